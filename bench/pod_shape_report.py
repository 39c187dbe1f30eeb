#!/usr/bin/env python3
"""Medians and worst runs of bench/run-pod-shape-comparison.sh's output, 128 x 8 beside 1,024 x 1.

    python3 bench/pod_shape_report.py /tmp/pod-shape.jsonl
"""

import json
import statistics
import sys

# (bench, figure, unit scale, unit, worse is higher)
FIGURES = [
    ("coord-bench", "registered_seconds", 1e3, "ms", True),
    ("coord-bench", "seconds", 1e3, "ms", True),
    ("coord-bench", "service_peak_rss_bytes", 1 / 2**20, "MiB", True),
    ("operator-bench", "seconds", 1e3, "ms", True),
    ("operator-bench", "operator_peak_rss_mib", 1, "MiB", True),
    ("sidecar-rss", "sidecar_rss_bytes", 1 / 2**20, "MiB", True),
]


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    print(f"| bench | figure | 128 x 8: median (worst) | 1,024 x 1: median (worst) | runs |")
    print("|---|---|---|---|---|")
    for bench, figure, scale, unit, _ in FIGURES:
        cells = []
        runs = 0
        for per_pod in (8, 1):
            values = [r[figure] * scale for r in rows
                      if r.get("bench") == bench and r.get("processes_per_pod") == per_pod]
            runs = len(values)
            cells.append(f"{statistics.median(values):.1f} ({max(values):.1f}) {unit}"
                         if values else "-")
        what = "8 ranks' sidecars" if bench == "sidecar-rss" else bench
        print(f"| {what} | {figure} | {cells[0]} | {cells[1]} | {runs} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")

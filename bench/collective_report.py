#!/usr/bin/env python3
"""Medians over runs of collective-bench (under cohort-run) and its peers
(bench/run-collective-comparison.sh), as the markdown tables of docs/benchmarks.md, with the
targets checked per row: busbw at least the better MPI's at every size, and no run slower than
1.5x the median (issue 22); at 64 MiB also the memcpy ceiling and, over TCP, gloo (issue 9).

    python3 bench/collective_report.py build/bench-peers/comparison.jsonl
"""
import collections
import json
import statistics
import sys

PEERS = ("openmpi", "intelmpi", "gloo")
MPIS = ("openmpi", "intelmpi")  # The targets: busbw at least the better of the two.
SIZES = {4096: "4 KiB", 16384: "16 KiB", 65536: "64 KiB", 262144: "256 KiB",
         1048576: "1 MiB", 4194304: "4 MiB", 16777216: "16 MiB", 67108864: "64 MiB"}
# The loopback TCP ceiling of a P=2 ring from ../shared/reference/collectives.md section 4.2
# (derived from a measured 1.77 GB/s stream with both cores busy).
TCP_CEILING_P2 = 0.88


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    busbw = collections.defaultdict(list)   # (impl, P, bytes, in_place) -> [busbw per run]
    time_us = collections.defaultdict(list)
    memcpy = collections.defaultdict(list)  # (P, bytes) -> [GB/s]
    for r in rows:
        if r.get("impl") == "memcpy":
            memcpy[(r["ranks"], r["bytes"])].append(r["gbps_per_process"])
            continue
        if r.get("op", "all_reduce") != "all_reduce":
            continue
        key = (r["impl"], r["ranks"], r["bytes"], r["in_place"])
        busbw[key].append(r["busbw_gbps"])
        time_us[key].append(r["median_max_us"])
    med = lambda xs: statistics.median(xs) if xs else None
    ranks = sorted({k[1] for k in busbw})
    failures = []
    for p in ranks:
        print(f"\n### P = {p}, float32 sum all-reduce, in place, busbw in GB/s (median of "
              f"{max(len(v) for k, v in busbw.items() if k[1] == p)} runs)\n")
        print("| size | Cohort shm | its worst run | OpenMPI | Intel MPI | gloo | Cohort TCP | "
              "best MPI | Cohort / best MPI | worst / median |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for size, label in SIZES.items():
            def b(impl):
                return med(busbw.get((impl, p, size, True), []))
            runs = busbw.get(("cohort-shm", p, size, True), [])
            if not runs:
                continue
            worst = min(runs)
            mpis = {impl: b(impl) for impl in MPIS if b(impl) is not None}
            best = max(mpis, key=mpis.get) if mpis else None
            cells = [f"{b(i):.2f}" if b(i) is not None else "-" for i in
                     ("cohort-shm",)] + [f"{worst:.2f}"] + [
                     f"{b(i):.2f}" if b(i) is not None else "-" for i in
                     PEERS + ("cohort-tcp",)]
            ratio = b("cohort-shm") / mpis[best] if best else None
            ok = ratio is not None and ratio >= 1.0
            # No run slower than 1.5x the median: its busbw at least the median's / 1.5.
            steady = worst >= b("cohort-shm") / 1.5
            print(f"| {label} | " + " | ".join(cells) +
                  f" | {best} | {ratio:.2f}× {'✓' if ok else '✗'} | "
                  f"{b('cohort-shm') / worst:.2f}× {'✓' if steady else '✗'} |"
                  if ratio is not None else f"| {label} | " + " | ".join(cells) + " | - | - | - |")
            if not ok:
                failures.append(f"P={p} {label}: busbw {b('cohort-shm'):.2f} vs {best} "
                                f"{mpis[best] if best else float('nan'):.2f} GB/s")
            if not steady:
                failures.append(f"P={p} {label}: the worst run's busbw {worst:.2f} is under "
                                f"the median {b('cohort-shm'):.2f} / 1.5")
        ceiling = med(memcpy.get((p, 67108864), []))
        shm64 = med(busbw.get(("cohort-shm", p, 67108864, True), []))
        tcp64 = med(busbw.get(("cohort-tcp", p, 67108864, True), []))
        gloo64 = med(busbw.get(("gloo", p, 67108864, True), []))
        if ceiling and shm64:
            ok = shm64 >= 0.5 * ceiling
            print(f"\n64 MiB: Cohort shm {shm64:.2f} GB/s = {shm64 / ceiling:.0%} of the "
                  f"concurrent-memcpy ceiling ({ceiling:.2f} GB/s per process, {p} at once; "
                  f"need 50%) {'✓' if ok else '✗'}")
            if not ok:
                failures.append(f"P={p} 64 MiB: {shm64 / ceiling:.0%} of the memcpy ceiling")
        if tcp64:
            line = f"64 MiB over TCP: Cohort {tcp64:.2f} GB/s"
            if gloo64:
                ok = tcp64 >= gloo64
                line += f", gloo {gloo64:.2f} ({'✓' if ok else '✗'} ≥ gloo)"
                if not ok:
                    failures.append(f"P={p} 64 MiB TCP: {tcp64:.2f} < gloo {gloo64:.2f}")
            if p == 2:
                ok = tcp64 >= 0.85 * TCP_CEILING_P2
                line += (f", {tcp64 / TCP_CEILING_P2:.0%} of the loopback TCP ceiling "
                         f"{TCP_CEILING_P2} GB/s ({'✓' if ok else '✗'} ≥ 85%)")
                if not ok:
                    failures.append(f"P=2 64 MiB TCP: {tcp64 / TCP_CEILING_P2:.0%} of the ceiling")
            print(line)
    print("\nTargets missed: " + ("none" if not failures else "; ".join(failures)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

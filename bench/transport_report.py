#!/usr/bin/env python3
"""The transport issue's targets from bench/run-transport-comparison.sh's JSON lines.

    python3 bench/transport_report.py transport.jsonl

Prints one Markdown table: each target's median figures (medians over the runs), the ratio the
target bounds, the bound, and whether it is met. Exits 0 either way; a run with a system missing
names what is missing instead of a ratio.
"""
import json
import statistics
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def median(rows, implementation, workload, tasks, field):
    values = [r[field] for r in rows
              if r.get("implementation") == implementation and r.get("workload") == workload
              and r.get("tasks") == tasks and field in r]
    return (statistics.median(values), len(values)) if values else (None, 0)


def ms(v):
    return "—" if v is None else f"{v * 1000:.1f} ms"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: transport_report.py TRANSPORT_JSONL (from bench/run-transport-comparison.sh)")
    rows = load(sys.argv[1])
    tcp = "torch-tcpstore-libuv-cpp-client"
    xla = "xla-coordination-service"
    out = ["| target | Cohort (median) | peer / floor (median) | ratio | bound | met |",
           "|---|---|---|---|---|---|"]

    def line(name, ours, theirs, peer_name, bound, fmt=ms):
        if ours[0] is None or theirs[0] is None:
            missing = "Cohort" if ours[0] is None else peer_name
            out.append(f"| {name} | {fmt(ours[0])} | {fmt(theirs[0])} | no {missing} figures | "
                       f"≤ {bound}× | — |")
            return
        ratio = ours[0] / theirs[0]
        out.append(f"| {name} | {fmt(ours[0])} (n={ours[1]}) | {peer_name} {fmt(theirs[0])} "
                   f"(n={theirs[1]}) | {ratio:.2f}× | ≤ {bound}× | {'yes' if ratio <= bound else 'no'} |")

    for tasks in (1024, 4096):
        line(f"barrier, {tasks:,} tasks, mean round",
             median(rows, "cohort", "barrier", tasks, "mean_round_seconds"),
             median(rows, "floor", "barrier-floor", tasks, "mean_round_seconds"), "barrier-floor", 2)
    line("rendezvous, 1,024 tasks",
         median(rows, "cohort", "rendezvous", 1024, "seconds"),
         median(rows, tcp, "rendezvous", 1024, "seconds"), "TCPStore C++", 0.5,
         fmt=lambda v: "—" if v is None else f"{v:.3f} s")
    peers = [(median(rows, tcp, "fanout", 1024, "seconds"), "TCPStore C++"),
             (median(rows, xla, "fanout", 1024, "seconds"), "XLA")]
    peers = [p for p in peers if p[0][0] is not None]
    best = min(peers, key=lambda p: p[0][0]) if peers else ((None, 0), "TCPStore C++ / XLA")
    line("fanout, 1,024 tasks", median(rows, "cohort", "fanout", 1024, "seconds"), best[0],
         f"best ({best[1]})", 0.5)

    small = median(rows, "cohort", "barrier", 16, "service_peak_rss_bytes")[0]
    large = median(rows, "cohort", "barrier", 10000, "service_peak_rss_bytes")[0]
    if small is None or large is None:
        out.append("| service RSS per task, 10,000 vs 16 tasks | — | — | no figures | ≤ 10 KiB | — |")
    else:
        per_task = (large - small) / (10000 - 16) / 1024
        out.append(f"| service RSS per task, 10,000 vs 16 tasks | {large / 1e6:.0f} MB vs "
                   f"{small / 1e6:.0f} MB | | {per_task:.1f} KiB/task | ≤ 10 KiB | "
                   f"{'yes' if per_task <= 10 else 'no'} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Medians over runs of collective-bench and its peers (bench/run-collective-comparison.sh),
as the markdown tables of docs/benchmarks.md, with issue 9's targets checked per row.

    python3 bench/collective_report.py build/bench-peers/comparison.jsonl
"""
import collections
import json
import statistics
import sys

PEERS = ("openmpi", "intelmpi", "gloo")
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
        print(f"\n### P = {p}, float32 sum all-reduce, in place (median of "
              f"{max(len(v) for k, v in busbw.items() if k[1] == p)} runs)\n")
        print("| size | Cohort shm | Cohort TCP | OpenMPI | Intel MPI | gloo | best peer | "
              "Cohort / best |")
        print("|---|---|---|---|---|---|---|---|")
        for size, label in SIZES.items():
            def b(impl):
                return med(busbw.get((impl, p, size, True), []))
            def t(impl):
                return med(time_us.get((impl, p, size, True), []))
            peers = {impl: b(impl) for impl in PEERS if b(impl) is not None}
            if b("cohort-shm") is None:
                continue
            if size == 4096:
                # Time per op (median over iterations of the slowest rank), lower is better.
                ptimes = {impl: t(impl) for impl in PEERS if t(impl) is not None}
                best = min(ptimes, key=ptimes.get) if ptimes else None
                cells = [f"{t(i):.2f} µs" if t(i) is not None else "-" for i in
                         ("cohort-shm", "cohort-tcp") + PEERS]
                ratio = ptimes[best] / t("cohort-shm") if best else None
                ok = ratio is not None and ratio >= 1.0
                print(f"| {label} (time) | " + " | ".join(cells) +
                      f" | {best} | {ratio:.2f}× {'✓' if ok else '✗'} |")
                if not ok:
                    failures.append(f"P={p} {label}: time {t('cohort-shm'):.2f} µs vs "
                                    f"{best} {ptimes[best]:.2f} µs")
                continue
            best = max(peers, key=peers.get) if peers else None
            cells = [f"{b(i):.2f}" if b(i) is not None else "-" for i in
                     ("cohort-shm", "cohort-tcp") + PEERS]
            ratio = b("cohort-shm") / peers[best] if best else None
            need = 1.5 if size == 67108864 else 1.0
            ok = ratio is not None and ratio >= need
            print(f"| {label} | " + " | ".join(cells) +
                  f" | {best} | {ratio:.2f}× (need {need}×) {'✓' if ok else '✗'} |")
            if not ok and size >= 65536:
                failures.append(f"P={p} {label}: busbw {b('cohort-shm'):.2f} vs {best} "
                                f"{peers[best]:.2f} GB/s")
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

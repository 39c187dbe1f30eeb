"""Prints bench/run-python-comparison.sh's tables (medians over runs, the worst run) and checks
the Python package's targets: key-value set+get (the pair from Python against the same pair from
C++ in the same process, in turn) and a 4 KiB all-reduce within 5 us of C++, a
64 MiB numpy all-reduce within 5% of collective-bench's busbw, and Cohort's all-reduce on torch
tensors at least gloo's busbw at every size."""

import collections
import json
import statistics
import sys


def main(path):
    rows = [json.loads(line) for line in open(path)]
    kv = collections.defaultdict(list)
    paired = collections.defaultdict(list)
    ar = collections.defaultdict(list)
    for r in rows:
        if r.get("workload") == "kv" or r.get("workload") == "store-latency":
            kv[r.get("impl")].append(r["set_get_median_us"])
        elif r.get("workload") == "kv-paired":
            for k in ("python_median_us", "cpp_median_us", "paired_diff_median_us"):
                paired[k].append(r[k])
        elif r.get("workload") == "all_reduce":
            ar[(r["impl"], r["bytes"])].append(r["time_us"])
        elif r.get("op") == "all_reduce" and r.get("in_place"):
            ar[("c++", r["bytes"])].append(r["time_us"])
    med = lambda xs: statistics.median(xs)
    missed = []
    print("### Key-value set + blocking get, per pair (µs; median pair of each run: median, "
          "worst of the runs)\n")
    print("| C++ program (store-latency) | Python program | in one process, in turn: C++ | "
          "Python | Python − C++, pair by pair |")
    print("|---|---|---|---|---|")
    c, p = kv.get("c++", []), kv.get("python", [])
    pc, pp, pd = (paired.get(k, []) for k in ("cpp_median_us", "python_median_us",
                                              "paired_diff_median_us"))
    if c and p and pd:
        diff = med(pd)
        print(f"| {med(c):.1f} ({max(c):.1f}) | {med(p):.1f} ({max(p):.1f}) | {med(pc):.1f} "
              f"({max(pc):.1f}) | {med(pp):.1f} ({max(pp):.1f}) | {diff:+.1f} ({max(pd):+.1f}) "
              f"{'✓' if diff <= 5 else '✗'} |")
        if diff > 5:
            missed.append(f"key-value: Python {diff:+.1f} us over C++ per set+get pair")
    print("\n### Float32 sum all-reduce, in place, P = 2 (µs per call; median, worst of the runs)\n")
    print("| size | C++ (collective-bench) | Python, numpy | Python, torch | gloo | numpy − C++ "
          "| busbw numpy / C++ | busbw torch / gloo |")
    print("|---|---|---|---|---|---|---|---|")
    sizes = sorted({b for _, b in ar})
    for b in sizes:
        cells = {impl: ar.get((impl, b), []) for impl in ("c++", "cohort-numpy", "cohort-torch",
                                                          "gloo")}
        if not all(cells.values()):
            continue
        m = {k: med(v) for k, v in cells.items()}
        fmt = lambda k: f"{m[k]:.1f} ({max(cells[k]):.1f})"
        diff = m["cohort-numpy"] - m["c++"]
        ratio = m["c++"] / m["cohort-numpy"]
        vs_gloo = m["gloo"] / m["cohort-torch"]
        label = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
        ok_diff = "✓" if b != 4096 or diff <= 5 else "✗"
        ok_ratio = "✓" if b != 64 << 20 or ratio >= 0.95 else "✗"
        ok_gloo = "✓" if vs_gloo >= 1 else "✗"
        print(f"| {label} | {fmt('c++')} | {fmt('cohort-numpy')} | {fmt('cohort-torch')} | "
              f"{fmt('gloo')} | {diff:+.1f} {ok_diff if b == 4096 else ''} | {ratio:.2f} "
              f"{ok_ratio if b == 64 << 20 else ''} | {vs_gloo:.1f}× {ok_gloo} |")
        if b == 4096 and diff > 5:
            missed.append(f"4 KiB: Python {diff:+.1f} us over C++")
        if b == 64 << 20 and ratio < 0.95:
            missed.append(f"64 MiB: numpy busbw {ratio:.2f} of C++'s")
        if vs_gloo < 1:
            missed.append(f"{label}: torch tensors below gloo")
    print("\nTargets missed: " + ("; ".join(missed) if missed else "none"))


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""Where a build's time went, from ninja's own logs: CPU seconds by kind of step and by target.

Usage: build_times.py BUILD_DIR [--top N] [--json]

Reads BUILD_DIR/.ninja_log (the gcc build) and, when present, the clang sub-build's logs
(BUILD_DIR/clang/.ninja_log and BUILD_DIR/clang/thread-safety/.ninja_log). Each step's time is
its own wall time as ninja recorded it, so under `-j 2` the sum is about twice the build's wall
time: read it as CPU seconds. Only the latest run of each output is counted (a log appended by
several builds keeps the last). docs/testing.md ("Where the time goes") has the table this prints
for a build from scratch.
"""
import argparse
import collections
import json
import os
import re
import sys


def read_log(path):
    """{output: seconds} of the latest run of each output in a .ninja_log (format v5)."""
    steps = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                continue
            start, end, _, output = int(parts[0]), int(parts[1]), parts[2], parts[3]
            steps[output] = (end - start) / 1000.0
    return steps


def classify(output, where):
    """(kind, target) of one output."""
    if where == "thread-safety":
        return "thread-safety check (clang -fsyntax-only)", "thread-safety"
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    if m:
        target = m.group(1)
        kind = "compile"
    elif output.endswith((".a", ".so")) or re.search(r"\.so\.\d", output):
        target = re.sub(r"^lib|\.(a|so.*)$", "", os.path.basename(output))
        kind = "archive or shared library"
    elif re.search(r"(^|/)(bin|tests|fuzz)/[^/.]+$", output):
        target = os.path.basename(output)
        kind = "link"
    else:
        return "other (code generation, configure, stamps)", "other"
    if output.endswith(".gch") or "cmake_pch" in output:
        kind = "precompiled header"
    if where == "clang":
        kind = "fuzzers (clang, sanitized): " + kind
    return kind, target


def group(target, where):
    if where != "gcc":
        return "clang sub-build"
    if target.endswith("_test") or target in ("test-trainer", "chaos-test", "cohort_test_support") \
            or target.startswith("fuzz_replay_"):
        return "tests"
    if target.endswith("-bench") or target in ("store-latency",) or target.startswith("bench"):
        return "benchmarks"
    if target == "other":
        return "other"
    return "libraries and binaries"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    logs = [("gcc", os.path.join(args.build_dir, ".ninja_log")),
            ("clang", os.path.join(args.build_dir, "clang", ".ninja_log")),
            ("thread-safety", os.path.join(args.build_dir, "clang", "thread-safety", ".ninja_log"))]
    by_kind = collections.Counter()
    by_group = collections.Counter()
    by_target = collections.Counter()
    steps = collections.Counter()
    for where, path in logs:
        if not os.path.exists(path):
            continue
        for output, seconds in read_log(path).items():
            if (where == "gcc" and "clang-subbuild" in output) or \
                    (where == "clang" and output.endswith("CMakeFiles/clang-checks")):
                continue  # A step that runs others: they are counted from their own logs.
            kind, target = classify(output, where)
            by_kind[kind] += seconds
            by_group[group(target, where)] += seconds
            by_target[(target if where == "gcc" else f"{target} (clang)")] += seconds
            steps[kind] += 1
    total = sum(by_kind.values())
    if args.json:
        json.dump({"total_cpu_s": round(total, 1), "by_group": by_group, "by_kind": by_kind,
                   "top_targets": by_target.most_common(args.top)}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{total:8.0f} s of steps in all (about {total / 2 / 60:.1f} min of wall time on 2 cores)")
    print("\nby part of the tree:")
    for name, s in by_group.most_common():
        print(f"  {s:8.0f} s  {100 * s / total:4.0f}%  {name}")
    print("\nby kind of step:")
    for name, s in by_kind.most_common():
        print(f"  {s:8.0f} s  {100 * s / total:4.0f}%  {steps[name]:4d} steps  {name}")
    print(f"\nthe {args.top} costliest targets:")
    for name, s in by_target.most_common(args.top):
        print(f"  {s:8.0f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

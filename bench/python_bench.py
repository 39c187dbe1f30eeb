"""python-bench: what the cohort package costs over libdist, beside torch.distributed's gloo.

    cohort-run -n 2 -- python bench/python_bench.py [--min-bytes 4096] [--max-bytes 67108864]
    cohort-run -n 1 -- python bench/python_bench.py --kv-only --kv-paired build/lib/libcohort-kv-pair-shim.so

(the interpreter of an environment with the cohort wheel and torch). Rank 0 prints JSON lines:
  {"workload": "kv", "impl": "python", "set_get_us": ..., "set_get_median_us": ...}
                               key_value_set + blocking get: the mean pair, the median pair
  {"workload": "kv-paired", "python_median_us": ..., "cpp_median_us": ...,
   "paired_diff_median_us": ...}     --kv-paired: the package's pair and the same pair from C++
                               (bench/kv_pair_shim.cc through ctypes, timed in C++), in turn in
                               this process, so both see the same sidecar, coordinator and load
  {"workload": "all_reduce", "impl": "cohort-numpy" | "cohort-torch" | "gloo", "bytes": ...,
   "time_us": ..., "busbw_gbps": ...}                          float32 sum, in place
measured as collective-bench measures (untimed calls for 200 ms first, then the mean of 20/10/5
back-to-back calls by size, averaged over ranks). bench/run-python-comparison.sh runs it beside
collective-bench and store-latency and prints the tables of docs/benchmarks.md.
"""

import argparse
import json
import statistics
import time

import numpy as np

import cohort


def base_iters(nbytes):
    return 20 if nbytes <= 1 << 20 else 10 if nbytes <= 16 << 20 else 5


def mean_over_ranks(comm, value):
    v = np.array([value], np.float64)
    comm.all_reduce(v, op="avg")
    return float(v[0])


def timed(comm, call, nbytes):
    end = time.monotonic() + 0.2
    more = np.ones(1, np.int32)
    while more[0]:  # rank 0's clock decides, so every rank makes the same calls
        for _ in range(20):
            call()
        more[0] = time.monotonic() < end
        comm.broadcast(more, root=0)
    comm.barrier()
    iters = base_iters(nbytes)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return mean_over_ranks(comm, (time.perf_counter() - start) / iters * 1e6)


def kv_paired(rank, iters, shim_path):
    """The package's pair and the C++ pair in turn, `iters` times (the order drawn at random
    each time): the medians of the package's pairs (timed here), of the C++ pairs (timed in C++,
    without the ctypes call around them) and of the difference of each matched pair."""
    import ctypes
    import random

    shim = ctypes.CDLL(shim_path)
    shim.cohort_kv_pair_us.restype = ctypes.c_double
    shim.cohort_kv_pair_us.argtypes = [ctypes.c_char_p]
    clock = time.perf_counter
    python_us, cpp_us = [], []
    for i in range(iters):
        for which in random.sample(("python", "c++"), 2):
            if which == "python":
                start = clock()
                cohort.key_value_set(f"paired/{rank}/py/{i}", "value")
                cohort.blocking_key_value_get(f"paired/{rank}/py/{i}", 60_000)
                python_us.append((clock() - start) * 1e6)
            else:
                us = shim.cohort_kv_pair_us(f"paired/{rank}/cc/{i}".encode())
                if us < 0:
                    raise RuntimeError("the C++ pair failed (libdist's log says why)")
                cpp_us.append(us)
    return [statistics.median(python_us), statistics.median(cpp_us),
            statistics.median(p - c for p, c in zip(python_us, cpp_us))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--kv-iters", type=int, default=2000)
    parser.add_argument("--no-torch", action="store_true", help="skip cohort-torch and gloo")
    parser.add_argument("--kv-only", action="store_true", help="only the key-value figures")
    parser.add_argument("--kv-paired", metavar="SHIM",
                        help="also time the package's pairs against C++ pairs in this process, "
                             "in turn (SHIM: build/lib/libcohort-kv-pair-shim.so)")
    args = parser.parse_args()

    cohort.initialize()
    comm = cohort.Communicator()
    rank, ranks = comm.rank, comm.size
    report = (lambda d: print(json.dumps(d), flush=True)) if rank == 0 else (lambda d: None)

    for i in range(50):
        cohort.key_value_set(f"warm/{rank}/{i}", "v")
        cohort.blocking_key_value_get(f"warm/{rank}/{i}", 10_000)
    cohort.wait_at_barrier("python-bench/kv", 60_000)
    pair_us = [0.0] * args.kv_iters
    clock = time.perf_counter
    start = last = clock()
    for i in range(args.kv_iters):
        cohort.key_value_set(f"bench/{rank}/{i}", "value")
        cohort.blocking_key_value_get(f"bench/{rank}/{i}", 60_000)
        now = clock()
        pair_us[i] = (now - last) * 1e6
        last = now
    figures = np.array([(last - start) / args.kv_iters * 1e6, statistics.median(pair_us)])
    comm.all_reduce(figures, op="avg")
    report({"workload": "kv", "impl": "python", "ranks": ranks, "iters": args.kv_iters,
            "set_get_us": figures[0], "set_get_median_us": figures[1]})
    if args.kv_paired:
        paired = np.array(kv_paired(rank, args.kv_iters, args.kv_paired))
        comm.all_reduce(paired, op="avg")
        report({"workload": "kv-paired", "ranks": ranks, "iters": args.kv_iters,
                "python_median_us": paired[0], "cpp_median_us": paired[1],
                "paired_diff_median_us": paired[2]})
    if args.kv_only:
        cohort.shutdown()
        return

    torch = dist = None
    if not args.no_torch:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo")  # torchrun's variables, from cohort-run
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        n = nbytes // 4
        x = np.ones(n, np.float32)
        cases = [("cohort-numpy", lambda: comm.all_reduce(x))]
        if torch is not None:
            t = torch.ones(n, dtype=torch.float32)
            cases += [("cohort-torch", lambda: comm.all_reduce(t)),
                      ("gloo", lambda: dist.all_reduce(t))]
        for impl, call in cases:
            time_us = timed(comm, call, nbytes)
            busbw = nbytes / (time_us * 1e-6) / 1e9 * 2 * (ranks - 1) / ranks
            report({"workload": "all_reduce", "impl": impl, "ranks": ranks, "bytes": nbytes,
                    "time_us": time_us, "busbw_gbps": busbw})
        nbytes *= 4
    if dist is not None:
        dist.destroy_process_group()
    cohort.shutdown()


if __name__ == "__main__":
    main()

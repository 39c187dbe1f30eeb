"""python-bench: what the cohort package costs over libdist, beside torch.distributed's gloo.

    cohort-run -n 2 -- python bench/python_bench.py [--min-bytes 4096] [--max-bytes 67108864]

(the interpreter of an environment with the cohort wheel and torch). Rank 0 prints JSON lines:
  {"workload": "kv", "impl": "python", "set_get_us": ...}   key_value_set + blocking get, per pair
  {"workload": "all_reduce", "impl": "cohort-numpy" | "cohort-torch" | "gloo", "bytes": ...,
   "time_us": ..., "busbw_gbps": ...}                          float32 sum, in place
measured as collective-bench measures (untimed calls for 200 ms first, then the mean of 20/10/5
back-to-back calls by size, averaged over ranks). bench/run-python-comparison.sh runs it beside
collective-bench and store-latency and prints the tables of docs/benchmarks.md.
"""

import argparse
import json
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--kv-iters", type=int, default=2000)
    parser.add_argument("--no-torch", action="store_true", help="skip cohort-torch and gloo")
    args = parser.parse_args()

    cohort.initialize()
    comm = cohort.Communicator()
    rank, ranks = comm.rank, comm.size
    report = (lambda d: print(json.dumps(d), flush=True)) if rank == 0 else (lambda d: None)

    for i in range(50):
        cohort.key_value_set(f"warm/{rank}/{i}", "v")
        cohort.blocking_key_value_get(f"warm/{rank}/{i}", 10_000)
    cohort.wait_at_barrier("python-bench/kv", 60_000)
    start = time.perf_counter()
    for i in range(args.kv_iters):
        cohort.key_value_set(f"bench/{rank}/{i}", "value")
        cohort.blocking_key_value_get(f"bench/{rank}/{i}", 60_000)
    us = mean_over_ranks(comm, (time.perf_counter() - start) / args.kv_iters * 1e6)
    report({"workload": "kv", "impl": "python", "ranks": ranks, "iters": args.kv_iters,
            "set_get_us": us})

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

#!/usr/bin/env python3
"""float32 sum all-reduce timings with torch.distributed's gloo backend, a peer of collective-bench.

  python3 bench/baselines/gloo_allreduce.py --ranks 2 [--min-bytes 4096] [--max-bytes 67108864]
                                            [--iters-scale 1]

Starts --ranks processes on this machine that meet over TCP on 127.0.0.1 (gloo has no
shared-memory transport) and prints, from rank 0, one JSON line per size in the format of
mpi_allreduce.cc, with impl "gloo". gloo's all_reduce is in place, so only in-place rows are
printed. time_us is the mean per-op time of `iters` back-to-back ops after one warm-up, averaged
over ranks; median_max_us puts a barrier before each op and takes the median over iterations of
the slowest rank's op time; wrong counts (over ranks) the elements that differ from P(P+1)/2
after an all-reduce of inputs rank+1. Needs torch (CPU use only); run-collective-peers.sh
installs a pinned one.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

KIB = 1024
MIB = 1024 * KIB
SMALLEST_BYTES = 4 * KIB
LARGEST_BYTES = 64 * MIB
SIZE_FACTOR = 4
STARTUP_WARMUP_SECONDS = 0.2  # as long as collective-bench's --warmup-ms
# Every blocking step (rendezvous, each collective) fails after this instead of hanging.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)


def base_iters(nbytes):
    # nccl-tests uses a fixed 20; the large sizes get fewer so a P=4 run on two cores stays short.
    if nbytes <= 1 * MIB:
        return 20
    if nbytes <= 16 * MIB:
        return 10
    return 5


def free_port():
    # The port is released again before rank 0's store binds it; on a quiet loopback the race
    # with another process taking it is remote, and losing it fails loudly at rendezvous.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sizes(args):
    nbytes = SMALLEST_BYTES
    while nbytes <= args.max_bytes:
        if nbytes >= args.min_bytes:
            yield nbytes
        nbytes *= SIZE_FACTOR


def measure(torch, dist, nbytes, iters, rank, ranks):
    count = nbytes // 4
    # Timing inputs: rank+1. The values grow by P each op and stay finite (see mpi_allreduce.cc).
    data = torch.full((count,), float(rank + 1), dtype=torch.float32)

    dist.all_reduce(data)  # warm-up
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(data)
    per_op_us = torch.tensor([(time.perf_counter() - start) / iters * 1e6], dtype=torch.float64)
    dist.all_reduce(per_op_us)
    time_us = per_op_us.item() / ranks

    max_times = []
    for _ in range(iters):
        dist.barrier()
        op_start = time.perf_counter()
        dist.all_reduce(data)
        mine = torch.tensor([(time.perf_counter() - op_start) * 1e6], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        max_times.append(mine.item())

    data.fill_(float(rank + 1))
    dist.all_reduce(data)
    expected = ranks * (ranks + 1) / 2
    wrong = torch.tensor([int((data != expected).sum().item())], dtype=torch.int64)
    dist.all_reduce(wrong)
    return time_us, statistics.median(max_times), int(wrong.item())


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    # P ranks share the machine's cores; intra-op threads would only compete with gloo's own.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks, timeout=DEFAULT_TIMEOUT)
    try:
        ranks = dist.get_world_size()
        # Connections are set up lazily; keep that out of the first size's timings.
        warm = torch.zeros(max(args.min_bytes, SMALLEST_BYTES) // 4, dtype=torch.float32)
        warmup_end = time.monotonic() + STARTUP_WARMUP_SECONDS
        more = torch.ones(1, dtype=torch.int32)
        while more.item():  # rank 0's clock decides, so every rank makes the same calls
            for _ in range(20):
                dist.all_reduce(warm)
            more.fill_(int(time.monotonic() < warmup_end))
            dist.broadcast(more, src=0)
        for nbytes in sizes(args):
            iters = max(1, round(base_iters(nbytes) * args.iters_scale))
            time_us, median_max_us, wrong = measure(torch, dist, nbytes, iters, rank, ranks)
            if rank != 0:
                continue
            algbw = nbytes / (time_us * 1e-6) / 1e9
            busbw = algbw * 2 * (ranks - 1) / ranks
            print(json.dumps({
                "impl": "gloo", "op": "all_reduce", "ranks": ranks, "bytes": nbytes,
                "count": nbytes // 4, "in_place": True, "time_us": round(time_us, 2),
                "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw, 3),
                "median_max_us": round(median_max_us, 2), "iters": iters, "wrong": wrong,
            }, separators=(",", ":")), flush=True)
    finally:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=SMALLEST_BYTES)
    parser.add_argument("--max-bytes", type=int, default=LARGEST_BYTES)
    parser.add_argument("--iters-scale", type=float, default=1.0)
    args = parser.parse_args()
    if args.ranks < 1:
        parser.error("--ranks must be at least 1")
    if not 0 < args.min_bytes <= args.max_bytes <= LARGEST_BYTES:
        parser.error(f"need 0 < --min-bytes <= --max-bytes <= {LARGEST_BYTES}")
    if args.iters_scale <= 0:
        parser.error("--iters-scale must be positive")

    # gloo otherwise resolves the hostname to pick its interface, which may not be loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp

    # spawn() joins every rank and raises if any of them failed.
    mp.spawn(worker, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one readable line instead of P interleaved tracebacks
        print(f"gloo_allreduce: {type(e).__name__}: {str(e).strip().splitlines()[-1]}",
              file=sys.stderr)
        sys.exit(1)

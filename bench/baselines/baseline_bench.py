#!/usr/bin/env python3
"""The coord-bench workloads against the systems Cohort replaces, for docs/benchmarks.md.

  python3 bench/baselines/baseline_bench.py --system tcpstore --workload barrier --tasks 1024

--system tcpstore: PyTorch's TCPStore (libuv server), the store behind torchrun/c10d.
--system xla:      the XLA coordination service behind jax.distributed (jaxlib).

Same workloads and JSON fields as build/bin/coord-bench. The server runs in its own process
(its peak RSS includes the Python interpreter and the imported library); tasks are threads
spread over --processes client processes, each with its own client (connection), all starting
at a common instant. Neither system has a directory listing that TCPStore shares, so the
rendezvous reads all N keys with multi_get (TCPStore) or key_value_dir_get (XLA); TCPStore has no
barrier, so a round is c10d's store-based barrier: add(counter) and wait for the last arrival's
key. Needs `pip install torch` or `pip install jax` (CPU); nothing here is used by the build.
"""
import argparse
import datetime
import json
import multiprocessing as mp
import os
import socket
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def wait_until(t_ns):
    delay = (t_ns - time.time_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


# --- servers -------------------------------------------------------------------------------

def tcpstore_server(port, ready, stop):
    from torch.distributed import TCPStore
    store = TCPStore("127.0.0.1", port, None, True, datetime.timedelta(minutes=10),
                     wait_for_workers=False, use_libuv=True)
    ready.set()
    stop.wait()
    del store


def xla_server(port, tasks, ready, stop):
    from jax._src.lib import _jax
    service = _jax.get_distributed_runtime_service(
        f"127.0.0.1:{port}", tasks, heartbeat_timeout=300, cluster_register_timeout=600,
        shutdown_timeout=5)
    ready.set()
    stop.wait()
    del service


# --- clients -------------------------------------------------------------------------------

class TcpStoreTask:
    def __init__(self, port, task, tasks):
        from torch.distributed import TCPStore
        self.store = TCPStore("127.0.0.1", port, None, False, datetime.timedelta(minutes=10),
                              use_libuv=True)
        self.task, self.tasks = task, tasks

    def set(self, k, v): self.store.set(k, v)
    def incr(self, k): return self.store.add(k, 1)
    def wait_get(self, k): return self.store.get(k)  # get() blocks until the key exists.
    def read_all(self, keys): return self.store.multi_get(keys)

    def barrier(self, round_):
        if self.store.add(f"b/{round_}", 1) == self.tasks:
            self.store.set(f"b/{round_}/done", "1")
        self.store.wait([f"b/{round_}/done"])


class XlaTask:
    def __init__(self, port, task, tasks):
        from jax._src.lib import _jax
        self.client = _jax.get_distributed_runtime_client(
            f"127.0.0.1:{port}", task, init_timeout=600, heartbeat_timeout=300,
            shutdown_on_destruction=False)
        self.client.connect()  # Blocks until every task registered.
        self.task, self.tasks = task, tasks

    def set(self, k, v): self.client.key_value_set(k, v)
    def incr(self, k): return self.client.key_value_increment(k, 1)
    def wait_get(self, k): return self.client.blocking_key_value_get(k, 600_000)
    def read_all(self, keys): return self.client.key_value_dir_get("rdv/keys")
    def barrier(self, round_): self.client.wait_at_barrier("bench", 600_000)


def run_task(system, port, task, tasks, workload, rounds, start_ns, out, lock):
    cls = TcpStoreTask if system == "tcpstore" else XlaTask
    wait_until(start_ns)
    t = cls(port, task, tasks)  # Connect (XLA: register and wait for all).
    registered = time.time_ns()
    result = {"registered_ns": registered}
    if workload == "rendezvous":
        t.set(f"rdv/keys/{task}", f"127.0.0.1:{10000 + task}")
        if t.incr("rdv-count") == tasks:
            t.set("rdv-all", "1")
        t.wait_get("rdv-all")
        got = t.read_all([f"rdv/keys/{i}" for i in range(tasks)])
        assert len(got) == tasks, len(got)
        result["done_ns"] = time.time_ns()
    elif workload == "barrier":
        if system == "tcpstore":
            t.barrier("registered")  # Like XLA's connect barrier: start the rounds together.
            result["registered_ns"] = time.time_ns()
        ends = []
        for r in range(rounds):
            t.barrier(r)
            ends.append(time.time_ns())
        result["round_done_ns"] = ends
    elif workload == "fanout":
        t.incr("waiting")
        value = t.wait_get("fanout")
        assert len(value) == 128, len(value)
        result["done_ns"] = time.time_ns()
    with lock:
        out.append(result)
    # Keep XLA clients alive until every task is done (their service would see disconnects).
    return t


def client_process(system, port, first, count, tasks, workload, rounds, start_ns, queue):
    # Import once, on the main thread: concurrent first imports from many threads can deadlock.
    if system == "tcpstore":
        import torch.distributed  # noqa: F401
    else:
        from jax._src.lib import _jax  # noqa: F401
    out, lock, keep = [], threading.Lock(), []
    def body(task):
        keep.append(run_task(system, port, task, tasks, workload, rounds, start_ns, out, lock))
    threads = [threading.Thread(target=body, args=(first + i,), daemon=True) for i in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    queue.put(out)
    queue.close()
    queue.join_thread()  # The queue's feeder thread must flush before os._exit.
    os._exit(0)  # Skip client teardown.


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", choices=["tcpstore", "xla"], required=True)
    p.add_argument("--workload", choices=["rendezvous", "barrier", "fanout"], required=True)
    p.add_argument("--tasks", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--json", action="store_true", help="kept for symmetry with coord-bench")
    a = p.parse_args()

    ctx = mp.get_context("spawn")
    port = free_port()
    ready, stop = ctx.Event(), ctx.Event()
    if a.system == "tcpstore":
        server = ctx.Process(target=tcpstore_server, args=(port, ready, stop))
    else:
        server = ctx.Process(target=xla_server, args=(port, a.tasks, ready, stop))
    server.start()
    if not ready.wait(120):
        sys.exit("server did not start")

    first_task = 1 if a.workload == "fanout" else 0
    n = a.tasks - first_task
    start_ns = time.time_ns() + int(3e9) + a.tasks * 2_000_000  # Imports take a while.
    queue = ctx.Queue()
    clients = []
    for i in range(a.processes):
        b, e = first_task + n * i // a.processes, first_task + n * (i + 1) // a.processes
        c = ctx.Process(target=client_process,
                        args=(a.system, port, b, e - b, a.tasks, a.workload, a.rounds, start_ns, queue))
        c.start()
        clients.append(c)

    result = {"implementation": {"tcpstore": "torch-tcpstore-libuv", "xla": "xla-coordination-service"}[a.system],
              "workload": a.workload, "tasks": a.tasks, "client_processes": a.processes}
    if a.workload == "fanout":
        wait_until(start_ns)
        setter = (TcpStoreTask if a.system == "tcpstore" else XlaTask)(port, 0, a.tasks)
        while int(setter.incr("waiting")) - 1 < a.tasks - 1:  # add(…, 0) is a read in TCPStore
            setter.store.add("waiting", -1) if a.system == "tcpstore" else setter.client.key_value_increment("waiting", -1)
            time.sleep(0.01)
        time.sleep(0.5)  # Let the last gets reach the server; neither system reports parked gets.
        set_ns = time.time_ns()
        setter.set("fanout", "x" * 128)
    results = []
    for _ in clients:
        results.extend(queue.get(timeout=900))
    for c in clients:
        c.join()
    if a.workload == "rendezvous":
        result["seconds"] = (max(r["done_ns"] for r in results) - start_ns) / 1e9
    elif a.workload == "fanout":
        result["seconds"] = (max(r["done_ns"] for r in results) - set_ns) / 1e9
    else:
        prev = max(r["registered_ns"] for r in results)
        ends = [max(r["round_done_ns"][i] for r in results) for i in range(a.rounds)]
        durations = []
        for e in ends:
            durations.append((e - prev) / 1e9)
            prev = e
        result["rounds"] = a.rounds
        result["seconds"] = (ends[-1] - max(r["registered_ns"] for r in results)) / 1e9
        result["mean_round_seconds"] = sum(durations) / len(durations)
        result["p99_round_seconds"] = sorted(durations)[min(len(durations) - 1, int(0.99 * len(durations)))]
    result["service_peak_rss_bytes"] = peak_rss(server.pid)
    # Print before stopping the service: an XLA client in this process aborts when it goes.
    print(json.dumps(result), flush=True)
    server.kill()
    os._exit(0)


if __name__ == "__main__":
    main()

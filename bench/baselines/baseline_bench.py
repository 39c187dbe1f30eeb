#!/usr/bin/env python3
"""The coord-bench workloads against the systems Cohort replaces, for docs/benchmarks.md.

  python3 bench/baselines/baseline_bench.py --system tcpstore --workload barrier --tasks 1024

--system tcpstore: PyTorch's TCPStore (libuv server), the store behind torchrun/c10d.
--system xla:      the XLA coordination service behind jax.distributed (jaxlib).
--system cohort-jax: the same jaxlib clients against Cohort's service, served by a real
                   cohort-sidecar on its JAX port (what an unmodified JAX program gets under Cohort).

--workload kill (xla, cohort-jax): 2 client processes of tasks/2 tasks each; once every task
registered, one process is killed with SIGKILL; `seconds` runs until the other one has been
terminated by its JAX client (as jax.distributed terminates a process whose peer died).

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


def xla_server(port, tasks, ready, stop, heartbeat_timeout):
    from jax._src.lib import _jax
    service = _jax.get_distributed_runtime_service(
        f"127.0.0.1:{port}", tasks, heartbeat_timeout=heartbeat_timeout,
        cluster_register_timeout=600, shutdown_timeout=5)
    ready.set()
    stop.wait()
    del service


def cohort_jax_server(sidecar, port, tasks, heartbeat_timeout):
    """A real cohort-sidecar as rank 0: the coordination service, with JAX's protocol on `port`."""
    import subprocess
    import tempfile
    work = tempfile.mkdtemp(prefix="cohort-bench-")
    env = dict(os.environ, COHORT_LOG_LEVEL="warning")
    proc = subprocess.Popen(
        [sidecar, "--rank", "0", "--num-processes", str(tasks),
         "--coordinator-address", f"127.0.0.1:{free_port()}",
         "--coordinator-bind-address", "127.0.0.1", "--jax-port", str(port),
         "--agent-socket", os.path.join(work, "agent.sock"), "--http-port", "0",
         "--initialization-timeout", "600s", "--shutdown-timeout", "5s",
         "--jax-heartbeat-timeout", f"{heartbeat_timeout}s",
         "--per-rank-metrics-limit", "0"], env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"cohort-sidecar exited with {proc.returncode}")
            time.sleep(0.05)
    sys.exit("cohort-sidecar's JAX port did not open within 60 s")


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
    heartbeat_timeout = 300

    def __init__(self, port, task, tasks):
        from jax._src.lib import _jax
        self.client = _jax.get_distributed_runtime_client(
            f"127.0.0.1:{port}", task, init_timeout=600,
            heartbeat_timeout=XlaTask.heartbeat_timeout, shutdown_on_destruction=False)
        self.client.connect()  # Blocks until every task registered.
        self.task, self.tasks = task, tasks

    def set(self, k, v): self.client.key_value_set(k, v)
    def incr(self, k): return self.client.key_value_increment(k, 1)
    def wait_get(self, k): return self.client.blocking_key_value_get(k, 600_000)
    def read_all(self, keys): return self.client.key_value_dir_get("rdv/keys")
    def barrier(self, round_): self.client.wait_at_barrier("bench", 600_000)


def registered_count(port):
    """How many tasks of the kill workload have registered. Asking the service would take a client
    that joins the job, so the tasks announce themselves in a file instead."""
    return sum(1 for _ in open(_kill_marker(port))) if os.path.exists(_kill_marker(port)) else 0


def _kill_marker(port):
    return f"/tmp/cohort-bench-kill-{port}"


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
    elif workload == "kill":
        with open(_kill_marker(port), "a") as f:
            f.write(f"{task}\n")
        t.wait_get("never-set")  # Until the process is killed or terminated by its client.
    with lock:
        out.append(result)
    # Keep XLA clients alive until every task is done (their service would see disconnects).
    return t


def client_process(system, port, first, count, tasks, workload, rounds, start_ns, queue,
                   heartbeat_timeout, finished):
    XlaTask.heartbeat_timeout = heartbeat_timeout
    if workload == "kill":  # Its end is a SIGABRT: time the abort, not the writing of a core file.
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
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
    # Stay until the harness has every result: a JAX client whose process exits is a dead task to
    # a service with fate sharing (Cohort's), which would terminate the other processes.
    finished.wait(900)
    os._exit(0)  # Skip client teardown.


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", choices=["tcpstore", "xla", "cohort-jax"], required=True)
    p.add_argument("--workload", choices=["rendezvous", "barrier", "fanout", "kill"], required=True)
    p.add_argument("--cohort-sidecar", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "../../build/bin/cohort-sidecar"),
        help="cohort-sidecar binary (--system cohort-jax)")
    p.add_argument("--heartbeat-timeout", type=int, default=None,
                   help="seconds; default 300, or JAX's own default of 100 for --workload kill")
    p.add_argument("--tasks", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--json", action="store_true", help="kept for symmetry with coord-bench")
    a = p.parse_args()
    if a.workload == "kill" and a.system == "tcpstore":
        sys.exit("--workload kill needs jax's clients: --system xla or cohort-jax")
    heartbeat_timeout = a.heartbeat_timeout or (100 if a.workload == "kill" else 300)
    if a.workload == "kill":
        a.processes = 2

    ctx = mp.get_context("spawn")
    port = free_port()
    ready, stop = ctx.Event(), ctx.Event()
    if a.system == "tcpstore":
        server = ctx.Process(target=tcpstore_server, args=(port, ready, stop))
    elif a.system == "xla":
        server = ctx.Process(target=xla_server, args=(port, a.tasks, ready, stop, heartbeat_timeout))
    else:
        server = cohort_jax_server(a.cohort_sidecar, port, a.tasks, heartbeat_timeout)
    if a.system != "cohort-jax":
        server.start()
        if not ready.wait(120):
            sys.exit("server did not start")

    first_task = 1 if a.workload == "fanout" else 0
    n = a.tasks - first_task
    start_ns = time.time_ns() + int(3e9) + a.tasks * 2_000_000  # Imports take a while.
    queue = ctx.Queue()
    finished = ctx.Event()
    clients = []
    for i in range(a.processes):
        b, e = first_task + n * i // a.processes, first_task + n * (i + 1) // a.processes
        c = ctx.Process(target=client_process,
                        args=(a.system, port, b, e - b, a.tasks, a.workload, a.rounds, start_ns, queue,
                              heartbeat_timeout, finished))
        c.start()
        clients.append(c)

    result = {"implementation": {"tcpstore": "torch-tcpstore-libuv", "xla": "xla-coordination-service",
                                 "cohort-jax": "cohort-jax-port"}[a.system],
              "workload": a.workload, "tasks": a.tasks, "client_processes": a.processes}
    if a.workload == "kill":
        wait_until(start_ns)
        # Every task registered (connect() returned) and is about to park in a blocking get.
        deadline = time.time() + 600
        while time.time() < deadline:
            if all(c.is_alive() for c in clients) and registered_count(port) >= a.tasks:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # Let the last parked gets reach the service.
        killed_ns = time.time_ns()
        os.kill(clients[1].pid, 9)
        clients[0].join(timeout=600)
        result["seconds"] = (time.time_ns() - killed_ns) / 1e9
        result["survivor_exit_code"] = clients[0].exitcode
        result["heartbeat_timeout_seconds"] = heartbeat_timeout
        print(json.dumps(result), flush=True)
        server.kill()
        os._exit(0)
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
    finished.set()
    for c in clients:
        c.join(timeout=60)
    os._exit(0)


if __name__ == "__main__":
    main()

"""Tests the Python start-up hook of launcher/python_probe (docs/faults.md, "Progress of
unmodified Python programs") as cohort-launch delivers it: PYTHONPATH=<the hook's directory>,
COHORT_PROBE_DIR, COHORT_PROBE_PPID (this test's pid, so that the programs it starts are "the
rank's process"), COHORT_PROCESS_ID; the probe's periods shortened through its test knobs.

Usage: python_probe_test.py --source-dir DIR [--torch-python PY] [--jax-python PY]
Exit 0: every part passed; 1: a part failed; 77: the plain parts passed and the torch or jax
part was skipped (its environment is absent), saying why.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

FAST = {"COHORT_PROBE_SAMPLE_S": "0.1", "COHORT_PROBE_WRITE_S": "0.2", "COHORT_PROBE_IDLE_S": "2"}
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAILED: " + message, flush=True)
    return condition


def wait_for(predicate, timeout, period=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(period)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def line_of(path, marker):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number, line.strip()
    raise AssertionError("%s not in %s" % (marker, path))


class Harness:
    def __init__(self, hook_dir, work):
        self.hook_dir = hook_dir
        self.work = work
        self.processes = []

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return path

    def probe_dir(self, name):
        path = os.path.join(self.work, name)
        os.makedirs(path, exist_ok=True)
        return path

    def env(self, probe_dir, rank=0, hook=True, extra_path=None, **more):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("COHORT_") and k not in ("PYTHONPATH", "PYTHONSTARTUP")}
        path = ([self.hook_dir] if hook else []) + ([extra_path] if extra_path else [])
        if path:
            env["PYTHONPATH"] = os.pathsep.join(path)
        if hook:
            env.update(FAST)
            env.update({"COHORT_PROBE_DIR": probe_dir, "COHORT_PROBE_PPID": str(os.getpid()),
                        "COHORT_PROCESS_ID": str(rank)})
        env.update(more)
        return env

    def start(self, argv, env, capture=True):
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if capture else None,
                                   stderr=subprocess.STDOUT if capture else None, cwd=self.work)
        self.processes.append(process)
        return process

    def stop_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def request_dump(probe_dir, request_id, directory):
    temporary = os.path.join(probe_dir, ".dump-request.test")
    with open(temporary, "w") as f:
        f.write("%d %s\n" % (request_id, directory))
    os.replace(temporary, os.path.join(probe_dir, "dump-request"))


def dumped(probe_dir, request_id):
    try:
        with open(os.path.join(probe_dir, "dumped")) as f:
            text = f.read()
    except OSError:
        return None
    return text if text.startswith("%d " % request_id) else None


def sigcgt_has_usr2(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR2 - 1) & 1)
    return False


# ---- plain Python ----------------------------------------------------------------------------

def test_chaining_and_output(h, python):
    """The hook runs the user's own sitecustomize (which sets a SIGUSR2 handler: the probe leaves
    it alone), leaves sys.path and the program's output as without the hook, and reports."""
    user_dir = os.path.join(h.work, "user-site")
    os.makedirs(user_dir, exist_ok=True)
    with open(os.path.join(user_dir, "sitecustomize.py"), "w") as f:
        f.write(textwrap.dedent("""\
            import signal
            CHAINED = "the user's sitecustomize ran"
            def on_usr2(signum, frame):
                print("the user's SIGUSR2 handler ran", flush=True)
            signal.signal(signal.SIGUSR2, on_usr2)
            """))
    program = h.write("chain_program.py", """\
        import os, signal, sys, time
        import sitecustomize
        print("chained:", getattr(sitecustomize, "CHAINED", None))
        print("hook dirs on sys.path:", [p for p in sys.path if "python_probe" in p])
        print("SIGUSR2 handler:", getattr(signal.getsignal(signal.SIGUSR2), "__name__", None))
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.1)
        probe_dir = os.environ.get("COHORT_PROBE_DIR")
        deadline = time.time() + 10
        while probe_dir and time.time() < deadline and not os.path.exists(os.path.join(probe_dir, "status.json")):
            time.sleep(0.05)
        time.sleep(0.5)
        print("done", file=sys.stderr)
        """)
    probe_dir = h.probe_dir("chain")
    with_hook = h.start([python, program], h.env(probe_dir, extra_path=user_dir))
    without = h.start([python, program], h.env(None, hook=False, extra_path=user_dir))
    out_with = with_hook.communicate(timeout=30)[0].decode()
    out_without = without.communicate(timeout=30)[0].decode()
    expected = ("chained: the user's sitecustomize ran\nhook dirs on sys.path: []\nSIGUSR2 handler: on_usr2\n"
                "the user's SIGUSR2 handler ran\ndone\n")
    check(out_without == expected, "without the hook the program printed %r" % out_without)
    check(out_with == out_without, "the hook changed the program's output: %r, not %r" % (out_with, out_without))
    status = read_json(os.path.join(probe_dir, "status.json"))
    if check(status is not None, "no status.json from a program run with the hook and a user sitecustomize"):
        check(status["pid"] == with_hook.pid, "status.json's pid %s is not the program's %d" % (status["pid"], with_hook.pid))
        check(status["sigusr2_dump"] is False,
              "sigusr2_dump is true although the user's sitecustomize handles SIGUSR2: %s" % status)
    check(not os.path.exists(os.path.join(probe_dir, "faulthandler.txt")),
          "the probe registered faulthandler over the user's SIGUSR2 handler")


def test_silent_cases(h, python):
    """python -I, COHORT_PYTHON_PROBE=0 and a parent other than COHORT_PROBE_PPID: no probe; and a
    chained sitecustomize still runs when the probe is off. The positive control is the same
    program with the plain environment."""
    program = h.write("silent_program.py", """\
        import sys, time
        print(type(sys.modules.get("sitecustomize")).__name__, "_cohort_probe" in sys.modules)
        time.sleep(1.5)
        """)
    cases = {
        "control": ([python, program], {}),
        "isolated": ([python, "-I", program], {}),
        "no-site": ([python, "-S", program], {}),
        "off": ([python, program], {"COHORT_PYTHON_PROBE": "0"}),
        "other-parent": ([python, program], {"COHORT_PROBE_PPID": "1"}),
    }
    running = {}
    for name, (argv, more) in cases.items():
        probe_dir = h.probe_dir("silent-" + name)
        running[name] = (h.start(argv, h.env(probe_dir, **more)), probe_dir)
    for name, (process, probe_dir) in running.items():
        output = process.communicate(timeout=30)[0].decode()
        check(process.returncode == 0, "%s: exit %s: %s" % (name, process.returncode, output))
        files = sorted(os.listdir(probe_dir))
        if name == "control":
            check("status.json" in files, "control: no status.json (files: %s)" % files)
        else:
            check(not files, "%s: the probe wrote %s" % (name, files))


def test_plain_program(h, python):
    """A sleeping main thread, a worker thread, a forked child and a spawned Python child: the
    status names the sleep, busy turns false, only the rank's process writes, a dump names every
    thread, SIGUSR2 writes faulthandler.txt in the rank's process but not in its forked child."""
    program = h.write("plain_program.py", """\
        import os, subprocess, sys, threading, time
        child = os.fork()  # before the program has a thread: Python >= 3.12 does not warn
        if child == 0:
            time.sleep(8)
            os._exit(0)
        print(child, flush=True)
        def worker():
            time.sleep(60)  # WORKER-LINE
        threading.Thread(target=worker, name="worker-thread", daemon=True).start()
        def save_checkpoint():
            time.sleep(1.5)  # CHECKPOINT-LINE
        spawned = subprocess.Popen([sys.executable, "-c", "import threading, time; time.sleep(0.5); "
                                    "print('spawned child threads:', [t.name for t in threading.enumerate()], flush=True); "
                                    "time.sleep(8)"])
        save_checkpoint()
        time.sleep(60)  # SLEEP-LINE
        """)
    sleep_line, sleep_source = line_of(program, "SLEEP-LINE")
    probe_dir = h.probe_dir("plain")
    process = h.start([python, program], h.env(probe_dir, rank=5))
    line = process.stdout.readline().decode()
    if not check(line.strip().isdigit(), "the program printed %r, not its forked child's pid" % line):
        return
    forked = int(line)
    spawned_threads = process.stdout.readline().decode().strip()
    check(spawned_threads == "spawned child threads: ['MainThread']",
          "a Python child of the rank's process runs a probe: %s" % spawned_threads)
    status_path = os.path.join(probe_dir, "status.json")
    checkpointing = wait_for(lambda: (read_json(status_path) or {}).get("phase") == "checkpoint", 3)
    check(checkpointing, "phase never \"checkpoint\" in a function named save_checkpoint: %s" % read_json(status_path))
    seen_pids = set()
    first = None

    def idle():
        nonlocal first
        status = read_json(status_path)
        if status:
            seen_pids.add(status["pid"])
            first = first or status
            return status if not status["busy"] else None
        return None

    status = wait_for(idle, 10, period=0.05)
    if not check(status, "no status.json with busy false within 10 s: %s" % read_json(status_path)):
        return
    print(json.dumps(status), flush=True)
    check(first["busy"] is True, "busy was false at first, before the 2 s idle period: %s" % first)
    check(seen_pids == {process.pid}, "status.json written by pids %s, not only the rank's %d (forked %d)"
          % (seen_pids, process.pid, forked))
    where = "plain_program.py:%d in <module>: %s" % (sleep_line, sleep_source)
    expected = {"pid": process.pid, "rank": 5, "steps": 0, "last_step_unix_ms": 0, "median_step_ms": 0,
                "phase": "run", "busy": False, "waiting": False, "op": "", "where": where, "frameworks": [],
                "dumped_id": 0, "sigusr2_dump": True}
    for key, value in expected.items():
        check(status.get(key) == value, "status[%r] is %r, not %r" % (key, status.get(key), value))
    now_ms = time.time() * 1000
    check(abs(status["unix_ms"] - now_ms) < 3000, "unix_ms %s is not now (%d)" % (status["unix_ms"], now_ms))
    check(0 < status["started_unix_ms"] <= status["unix_ms"], "started_unix_ms: %s" % status)

    # The forked child keeps no SIGUSR2 dump; the rank's process has it.
    check(sigcgt_has_usr2(process.pid), "the rank's process does not catch SIGUSR2")
    check(not sigcgt_has_usr2(forked), "the forked child still catches SIGUSR2 (faulthandler)")

    # A dump on request.
    dump_dir = os.path.join(h.work, "dumps", "plain", "7")
    request_dump(probe_dir, 7, dump_dir)
    answer = wait_for(lambda: dumped(probe_dir, 7), 5)
    if check(answer, "no answer in 'dumped' to dump request 7"):
        check(answer.strip() == "7 rank 5: " + where, "dumped says %r" % answer)
    stacks = ""
    try:
        with open(os.path.join(dump_dir, "stacks.txt")) as f:
            stacks = f.read()
    except OSError as error:
        check(False, "no stacks.txt: %s" % error)
    for directory in (dump_dir, os.path.dirname(dump_dir)):
        check(os.path.isdir(directory) and os.stat(directory).st_mode & 0o777 == 0o777,
              "the dump directory %s (or its parent made for it) is not mode 0777" % directory)
    main_at, worker_at = stacks.find("Thread MainThread"), stacks.find("Thread worker-thread")
    check(0 <= main_at < worker_at, "stacks.txt does not list the main thread first, then worker-thread:\n" + stacks)
    check("Thread cohort-probe" in stacks, "stacks.txt does not list the probe's thread")
    check("SLEEP-LINE" in stacks and "WORKER-LINE" in stacks, "stacks.txt lacks the threads' source lines:\n" + stacks)
    check(wait_for(lambda: (read_json(status_path) or {}).get("dumped_id") == 7, 3),
          "status.json's dumped_id did not become 7")
    # The same request again is not answered twice.
    os.unlink(os.path.join(probe_dir, "dumped"))
    request_dump(probe_dir, 7, dump_dir)
    time.sleep(0.5)
    check(not os.path.exists(os.path.join(probe_dir, "dumped")), "dump request 7 was answered twice")

    # SIGUSR2: faulthandler's stacks, and the process lives on.
    os.kill(process.pid, signal.SIGUSR2)
    expected_frame = 'plain_program.py", line %d' % sleep_line
    faulthandler_txt = os.path.join(probe_dir, "faulthandler.txt")
    text = wait_for(lambda: expected_frame in open(faulthandler_txt).read(), 5)
    check(text, "faulthandler.txt lacks the sleep: %r" % open(faulthandler_txt).read())
    time.sleep(0.2)
    check(process.poll() is None, "SIGUSR2 ended the rank's process")
    process.kill()
    process.wait()


# ---- torch ---------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torch_ddp(h, python):
    """Two gloo DDP ranks; after 6 steps rank 1 sleeps: rank 0 waits in an all_reduce."""
    program = h.write("ddp_program.py", """\
        import os, sys, time
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        def train_step():
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()  # RANK0-WAIT
            optimizer.step()
        for step in range(6):
            train_step()
            time.sleep(0.1)
        print("rank", rank, "trained", flush=True)
        if rank == 1:
            time.sleep(120)  # RANK1-SLEEP
        train_step()
        """)
    wait_line, wait_source = line_of(program, "RANK0-WAIT")
    sleep_line, sleep_source = line_of(program, "RANK1-SLEEP")
    port = str(free_port())
    ranks = []
    for rank in (0, 1):
        probe_dir = h.probe_dir("ddp-%d" % rank)
        env = h.env(probe_dir, rank=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2",
                    RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1")
        ranks.append((h.start([python, program], env), probe_dir))
        if rank == 0:
            # Rank 1 starts once rank 0 waits for it in init_process_group.
            def initializing():
                status = read_json(os.path.join(probe_dir, "status.json"))
                return status if status and status["phase"] == "init" and status["waiting"] and \
                    status["where"].startswith("ddp_program.py:5 in <module>: dist.init_process_group") else None
            status = wait_for(initializing, 30)
            check(status, "rank 0 alone never said phase init, waiting in init_process_group: %s"
                  % read_json(os.path.join(probe_dir, "status.json")))
            print("rank 0 alone: %s" % json.dumps(status), flush=True)
    for rank, (process, _) in enumerate(ranks):
        line = process.stdout.readline().decode()
        if not check("trained" in line, "rank %d did not train: %r%s" % (rank, line, process.stdout.read(4000) if process.poll() is not None else "")):
            return

    def settled(rank):
        status = read_json(os.path.join(ranks[rank][1], "status.json"))
        if status and not status["busy"] and (status["op"] == "all_reduce" if rank == 0 else "RANK1-SLEEP" in status["where"]):
            return status
        return None

    status0 = wait_for(lambda: settled(0), 15)
    status1 = wait_for(lambda: settled(1), 5)
    status0 = status0 or read_json(os.path.join(ranks[0][1], "status.json"))
    status1 = status1 or read_json(os.path.join(ranks[1][1], "status.json"))
    if not check(status0 and status1, "no status.json from the DDP ranks"):
        return
    print("rank 0: %s\nrank 1: %s" % (json.dumps(status0), json.dumps(status1)), flush=True)
    for rank, status in enumerate((status0, status1)):
        check(status["steps"] == 6, "rank %d counted %s optimizer steps, not 6: %s" % (rank, status["steps"], status))
        check(100 <= status["median_step_ms"] <= 1000,
              "rank %d's median step %s ms is not about 100 ms: %s" % (rank, status["median_step_ms"], status))
        check(status["frameworks"] == ["torch"], "rank %d frameworks: %s" % (rank, status["frameworks"]))
        check(status["phase"] == "run" and not status["busy"], "rank %d phase/busy: %s" % (rank, status))
        check(status["last_step_unix_ms"] > status["started_unix_ms"], "rank %d last_step_unix_ms: %s" % (rank, status))
    check(status0["waiting"] is True and status0["op"] == "all_reduce",
          "rank 0 does not say it waits in all_reduce: %s" % status0)
    check(status0["where"] == "ddp_program.py:%d in train_step: %s" % (wait_line, wait_source),
          "rank 0's where: %r" % status0["where"])
    check(status1["waiting"] is False and status1["op"] == "",
          "rank 1 (sleeping in user code) says it waits: %s" % status1)
    check(status1["where"] == "ddp_program.py:%d in <module>: %s" % (sleep_line, sleep_source),
          "rank 1's where: %r" % status1["where"])

    # Dumps with torch's flight recorder.
    for rank, (process, probe_dir) in enumerate(ranks):
        request_dump(probe_dir, 3, os.path.join(h.work, "dumps", "ddp", "rank-%d" % rank))
    for rank, (process, probe_dir) in enumerate(ranks):
        directory = os.path.join(h.work, "dumps", "ddp", "rank-%d" % rank)
        answer = wait_for(lambda: dumped(probe_dir, 3), 10)
        check(answer and "failed" not in answer, "rank %d's dump: %r" % (rank, answer))
        trace = read_json(os.path.join(directory, "fr_trace.json"))
        if check(trace is not None, "rank %d: no fr_trace.json" % rank):
            active = [e["profiling_name"] for e in trace.get("entries", []) if not e.get("retired")]
            if rank == 0:
                check(active == ["gloo:all_reduce"], "rank 0's flight recorder's active entries: %s" % active)
        check(os.path.getsize(os.path.join(directory, "fr_trace_rank_%d" % rank)) > 0
              if os.path.exists(os.path.join(directory, "fr_trace_rank_%d" % rank)) else False,
              "rank %d: no fr_trace_rank_%d" % (rank, rank))
    for process, _ in ranks:
        process.kill()
        process.wait()


def test_torch_collectives(h, python):
    """A program that all-reduces in a loop without an optimizer (issue 50's user): each completed
    dist.all_reduce counts as a step, so it leaves start-up after two and is judged by its median,
    as a DDP program is; after 10, rank 1 sleeps and rank 0 waits in its next all_reduce."""
    program = h.write("allreduce_program.py", """\
        import time
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        t = torch.ones(4)
        for step in range(10):
            dist.all_reduce(t)
            time.sleep(0.1)
        work = dist.all_reduce(t, async_op=True)  # completes later: not counted
        work.wait()
        print("rank", rank, "reduced", flush=True)
        if rank == 1:
            time.sleep(120)  # RANK1-SLEEP
        dist.all_reduce(t)  # RANK0-WAIT
        """)
    wait_line, wait_source = line_of(program, "RANK0-WAIT")
    port = str(free_port())
    ranks = []
    for rank in (0, 1):
        probe_dir = h.probe_dir("allreduce-%d" % rank)
        env = h.env(probe_dir, rank=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2",
                    RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1")
        ranks.append((h.start([python, program], env), probe_dir))
    for rank, (process, _) in enumerate(ranks):
        line = process.stdout.readline().decode()
        if not check("reduced" in line, "rank %d did not reduce: %r%s" % (
                rank, line, process.stdout.read(4000) if process.poll() is not None else "")):
            return

    # Each probe rewrites status.json on its own period: wait until rank 0's shows it waiting in
    # its last all_reduce and rank 1's shows it asleep, so neither is a file written mid-loop.
    def settled(rank, marker):
        status = read_json(os.path.join(ranks[rank][1], "status.json"))
        return status if status and marker in status["where"] else None

    status0 = wait_for(lambda: settled(0, "RANK0-WAIT"), 15) or read_json(os.path.join(ranks[0][1], "status.json"))
    status1 = wait_for(lambda: settled(1, "RANK1-SLEEP"), 15) or read_json(os.path.join(ranks[1][1], "status.json"))
    if not check(status0 and status1, "no status.json from the all-reducing ranks"):
        return
    print("rank 0: %s\nrank 1: %s" % (json.dumps(status0), json.dumps(status1)), flush=True)
    for rank, status in enumerate((status0, status1)):
        check(status["steps"] == 10, "rank %d counted %s collectives, not 10: %s" % (rank, status["steps"], status))
        check(100 <= status["median_step_ms"] <= 1000,
              "rank %d's median step %s ms is not about 100 ms: %s" % (rank, status["median_step_ms"], status))
        check(status["phase"] == "run", "rank %d's phase: %s" % (rank, status))
        check(status["last_step_unix_ms"] > status["started_unix_ms"], "rank %d last_step_unix_ms: %s" % (rank, status))
    check(status0["waiting"] is True and status0["op"] == "all_reduce",
          "rank 0 does not say it waits in all_reduce: %s" % status0)
    check(status0["where"] == "allreduce_program.py:%d in <module>: %s" % (wait_line, wait_source),
          "rank 0's where: %r" % status0["where"])
    for process, _ in ranks:
        process.kill()
        process.wait()


# ---- JAX -----------------------------------------------------------------------------------

def test_jax(h, python):
    """Host syncs counted as steps (x.block_until_ready(), jax.block_until_ready, float(x),
    jax.device_get: 4 each); a compile event puts the phase at "compile"."""
    program = h.write("jax_program.py", """\
        import time
        import jax
        import jax.numpy as jnp
        f = jax.jit(lambda x: x * 2 + 1)
        x = jnp.ones(4)
        for i in range(4):
            f(x).block_until_ready(); time.sleep(0.03)
        for i in range(4):
            jax.block_until_ready(f(x)); time.sleep(0.03)
        for i in range(4):
            float(f(x).sum()); time.sleep(0.03)
        for i in range(4):
            jax.device_get(f(x)); time.sleep(0.03)
        print("synced", flush=True)
        jax.monitoring.record_scalar("/jax/core/compile/backend_compile_duration", time.time(), fun_name="probe_test")
        time.sleep(1.5)  # COMPILING
        jax.monitoring.record_event_duration_secs("/jax/core/compile/backend_compile_duration", 1.5, fun_name="probe_test")
        print("compiled", flush=True)
        time.sleep(60)  # JAX-SLEEP
        """)
    sleep_line, sleep_source = line_of(program, "JAX-SLEEP")
    probe_dir = h.probe_dir("jax")
    process = h.start([python, program], h.env(probe_dir, rank=2, JAX_PLATFORMS="cpu"))
    line = process.stdout.readline().decode()
    if not check("synced" in line, "the JAX program did not run: %r" % line):
        return
    status_path = os.path.join(probe_dir, "status.json")
    compiling = wait_for(lambda: (read_json(status_path) or {}).get("phase") == "compile", 3)
    check(compiling, "phase never \"compile\" during a /jax/core/compile/ event: %s" % read_json(status_path))
    check("compiled" in process.stdout.readline().decode(), "the JAX program did not go on")
    status = wait_for(lambda: (lambda s: s if s and s["phase"] == "run" and not s["busy"] else None)(read_json(status_path)), 8)
    if not check(status, "the JAX program's status did not settle: %s" % read_json(status_path)):
        return
    print(json.dumps(status), flush=True)
    check(status["steps"] == 16, "counted %s host syncs, not 16: %s" % (status["steps"], status))
    check(30 <= status["median_step_ms"] <= 1000, "median step %s ms is not about 30 ms" % status["median_step_ms"])
    check(status["frameworks"] == ["jax"], "frameworks: %s" % status["frameworks"])
    check(status["where"] == "jax_program.py:%d in <module>: %s" % (sleep_line, sleep_source), "where: %r" % status["where"])
    check(status["waiting"] is False, "a sleeping JAX program waits: %s" % status)
    process.kill()
    process.wait()


# ---- cost (not part of the test: --bench) --------------------------------------------------

def bench(h, python, runs=5, steps=3000, probe_root=None, launcher=None):
    """Same-run A/B of a small 2-rank gloo DDP loop on the CPU with and without the hook (default
    periods), alternating which goes first: rank 0's wall and main-thread CPU time per step over
    `steps` steps after 100 warm-up steps, the probe thread's CPU time, each rank's VmRSS; then
    the cost of the optimizer hooks per step, and the VmRSS of a plain `python -c` with and
    without the hook. With `launcher` (a cohort-launch installed with --install, the hook beside
    it), both ranks run as one pod of two processes under it, as the operator runs them, the hook
    turned off by COHORT_PYTHON_PROBE=0 for the runs without."""
    program = h.write("bench_program.py", """\
        import json, os, sys, threading, time
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(16, 32), torch.randn(16, 1)
        def step():
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        for _ in range(100):
            step()
        def probe_cpu_ns():
            for thread in threading.enumerate():
                if thread.name == "cohort-probe":
                    with open("/proc/self/task/%d/schedstat" % thread.native_id) as f:
                        return int(f.read().split()[0])
            return 0
        steps = int(os.environ["BENCH_STEPS"])
        dist.barrier()
        probe0, cpu0, start = probe_cpu_ns(), time.thread_time(), time.perf_counter()
        for _ in range(steps):
            step()
        elapsed, cpu, probe = time.perf_counter() - start, time.thread_time() - cpu0, probe_cpu_ns() - probe0
        result = {"wall_us": elapsed / steps * 1e6, "cpu_us": cpu / steps * 1e6, "probe_us_per_s": probe / 1e3 / elapsed,
                  "rss_kib": int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS:")][0])}
        probe_module = sys.modules.get("_cohort_probe")
        if probe_module is not None and probe_module._probe is not None:
            from torch.optim.optimizer import _global_optimizer_pre_hooks, _global_optimizer_post_hooks
            hooks = list(_global_optimizer_pre_hooks.values()) + list(_global_optimizer_post_hooks.values())
            n = 100000
            t = time.perf_counter()
            for _ in range(n):
                for hook in hooks:
                    hook(optimizer, (), {})
            result["hooks_us_per_step"] = (time.perf_counter() - t) / n * 1e6
            p = probe_module._probe
            t = time.perf_counter()
            for _ in range(1000):
                p._sample(time.monotonic())
            result["sample_us"] = (time.perf_counter() - t) / 1000 * 1e6
            import copy
            q = copy.copy(p)  # writes elsewhere, so as not to race the probe's own writes
            q.directory = os.path.join(p.directory, "bench")
            os.makedirs(q.directory, exist_ok=True)
            t = time.perf_counter()
            for _ in range(1000):
                q._write_status(time.monotonic())
            result["write_us"] = (time.perf_counter() - t) / 1000 * 1e6
        print(json.dumps(result), flush=True)
        dist.barrier()
        os._exit(0)
        """)
    results = {"hook": [], "none": []}
    for run in range(runs):
        for config in (("hook", "none") if run % 2 == 0 else ("none", "hook")):
            port = str(free_port())
            if launcher:
                results[config].append(bench_pod(h, launcher, python, program, config, run, port, steps, probe_root))
                print("run %d %-4s: %s" % (run, config, json.dumps(results[config][-1])), flush=True)
                continue
            processes = []
            for rank in (0, 1):
                probe_dir = os.path.join(probe_root or h.work, "bench-%s-%d-%d" % (config, run, rank))
                os.makedirs(probe_dir, exist_ok=True)
                env = h.env(probe_dir, rank=rank, hook=config == "hook",
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank),
                            LOCAL_RANK=str(rank), OMP_NUM_THREADS="1", BENCH_STEPS=str(steps))
                for knob in FAST:
                    env.pop(knob, None)
                processes.append(h.start([python, program], env))
            texts = [p.communicate(timeout=600)[0].decode() for p in processes]
            try:
                outputs = [json.loads(t.strip().splitlines()[-1]) for t in texts]
            except (ValueError, IndexError):
                raise AssertionError("the benchmark failed: %s" % texts)
            results[config].append(outputs)
            print("run %d %-4s: %s" % (run, config, json.dumps(outputs)), flush=True)

    def stats(values):
        values = sorted(values)
        return "median %.1f, worst %.1f" % (values[len(values) // 2], values[-1])

    for config, values in results.items():
        print("%-4s: rank 0 wall us/step %s; main-thread CPU us/step %s; VmRSS KiB (both ranks) %s"
              % (config, stats(v[0]["wall_us"] for v in values), stats(v[0]["cpu_us"] for v in values),
                 stats(r["rss_kib"] for v in values for r in v)))
    hooked = [r for v in results["hook"] for r in v]
    print("hook: probe thread CPU us per second %s; optimizer hooks us/step %s; one sample us %s; one status write us %s"
          % (stats(r["probe_us_per_s"] for r in hooked), stats(r["hooks_us_per_step"] for r in hooked),
             stats(r["sample_us"] for r in hooked), stats(r["write_us"] for r in hooked)))
    medians = {config: sorted(v[0]["wall_us"] for v in values)[runs // 2] for config, values in results.items()}
    print("rank 0 wall time per step with the hook: %+.2f%% (medians)" % ((medians["hook"] / medians["none"] - 1) * 100))
    # The hook's own memory, without torch's noise: a plain python -c, 5 times each.
    rss = {"hook": [], "none": []}
    code = ("import time; time.sleep(1.5); "
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')][0])")
    for run in range(5):
        for config in ("hook", "none"):
            process = h.start([sys.executable, "-c", code], h.env(h.probe_dir("rss-%s-%d" % (config, run)), hook=config == "hook"))
            rss[config].append(int(process.communicate(timeout=30)[0]))
    print("plain python -c VmRSS KiB: hook %s; none %s" % (stats(rss["hook"]), stats(rss["none"])))

def bench_pod(h, launcher, python, program, config, run, port, steps, probe_root):
    """One run of the benchmark as a pod of two processes under cohort-launch; each rank's result."""
    pod_dir = os.path.join(probe_root or h.work, "pod-%s-%d" % (config, run))
    os.makedirs(pod_dir, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_") and k not in ("PYTHONPATH",)}
    env.update(COHORT_PROCESS_ID="0", COHORT_NUM_PROCESSES="2", COHORT_PROCESSES_PER_POD="2",
               COHORT_AGENT_SOCKET=os.path.join(pod_dir, "agent.sock"),
               COHORT_PYTHON_PROBE="1" if config == "hook" else "0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1", BENCH_STEPS=str(steps))
    text = h.start([launcher, python, program], env).communicate(timeout=600)[0].decode()
    outputs = []
    for rank in (0, 1):
        prefix = "[rank %d] " % rank
        lines = [l[len(prefix):] for l in text.splitlines() if l.startswith(prefix + "{")]
        if not lines:
            raise AssertionError("the benchmark failed: %s" % text)
        outputs.append(json.loads(lines[-1]))
    if config == "hook" and "hooks_us_per_step" not in outputs[0]:
        raise AssertionError("cohort-launch gave the processes no hook: was it installed with --install? %s" % text)
    return outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--torch-python", default="")
    parser.add_argument("--jax-python", default="")
    parser.add_argument("--only", default="", help="comma-separated part names (plain,torch,jax)")
    parser.add_argument("--keep", action="store_true", help="keep the programs, probe directories and dumps")
    parser.add_argument("--bench", action="store_true", help="measure the hook's cost with --torch-python instead")
    parser.add_argument("--bench-probe-root", default="", help="where --bench puts the probe directories (a tmpfs)")
    parser.add_argument("--bench-runs", type=int, default=5, help="--bench: runs of each configuration")
    parser.add_argument("--bench-launcher", default="",
                        help="--bench: run each configuration as a pod of two processes under this cohort-launch "
                             "(installed with --install, so that the hook is beside it)")
    args = parser.parse_args()
    hook_dir = os.path.join(os.path.abspath(args.source_dir), "launcher", "python_probe")
    only = set(filter(None, args.only.split(",")))
    work = tempfile.mkdtemp(prefix="python-probe-test-")
    h = Harness(hook_dir, work)
    skipped = []
    started = time.monotonic()
    if args.bench:
        try:
            bench(h, os.path.abspath(args.torch_python), runs=args.bench_runs, probe_root=args.bench_probe_root,
                  launcher=os.path.abspath(args.bench_launcher) if args.bench_launcher else None)
        finally:
            h.stop_all()
            shutil.rmtree(work, ignore_errors=True)
        return 0
    try:
        parts = [("plain", test_chaining_and_output, sys.executable),
                 ("plain", test_silent_cases, sys.executable),
                 ("plain", test_plain_program, sys.executable),
                 ("torch", test_torch_ddp, args.torch_python),
                 ("torch", test_torch_collectives, args.torch_python),
                 ("jax", test_jax, args.jax_python)]
        for part, test, python in parts:
            if only and part not in only:
                continue
            python = os.path.abspath(python) if python else ""
            if not python or not os.access(python, os.X_OK):
                skipped.append("%s (%s): no Python environment with %s" % (test.__name__, part, part))
                continue
            t0 = time.monotonic()
            before = len(FAILURES)
            try:
                test(h, python)
            except Exception as error:  # noqa: BLE001
                check(False, "%s raised %s: %s" % (test.__name__, type(error).__name__, error))
            finally:
                h.stop_all()
            print("%s %s (%.1f s)" % ("FAIL" if len(FAILURES) > before else "ok  ", test.__name__,
                                      time.monotonic() - t0), flush=True)
    finally:
        h.stop_all()
        if not FAILURES and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("files kept in " + work, flush=True)
    print("%.1f s" % (time.monotonic() - started))
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    if skipped:
        print("skipped: " + "; ".join(skipped))
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())

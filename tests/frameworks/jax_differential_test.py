#!/usr/bin/env python3
"""The differential test of Cohort's JAX port (docs/jax.md, "What the port answers"): the same JAX
program (jax_coordination_scenarios.py, 4 processes on CPU) runs twice, once against jaxlib's own
coordination service (JAX process 0 hosting it, as upstream runs) and once against rank 0's
sidecar under cohort-run, and what every process got back from every call (the value, or the
error's code and text) must be the same in both runs, after normalizing what differs from run to
run (service incarnations, the order gRPC and absl print fields and payloads in, which task reached
a barrier first) and dropping Cohort's own diagnosis, which follows XLA's text on a line that starts with
"Cohort: ".

A difference that docs/jax.md lists as deliberate (its table "Where the port answers otherwise,
on purpose": each row names the calls it covers, in backticks) is reported and allowed; any other
fails the test.

Usage: jax_differential_test.py --jax VERSION --source-dir DIR --build-dir DIR [--cohort-run PATH]
Exit status: 0 no difference left that docs/jax.md does not list; 1 otherwise; 77 the test cannot
run here (no Python the jax version needs, or PyPI cannot be reached), saying why.

Also its own wrapper: `jax_differential_test.py wrap -- COMMAND...` runs COMMAND with its stderr
kept in $COHORT_SCENARIO_DIR/stderr-<process id>.log and appends how it ended to the process's
record; it ends as COMMAND did (the same exit code or signal) and passes on SIGTERM and SIGINT.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NUM_PROCESSES = 4
TENSORSTORE = "0.1.86"
MODES = ("calls", "shutdown-missing")
# Each mode's processes must be done by then (the slowest, shutdown-missing under JAX's own
# service, takes about 10 s on 2 cores).
RUN_TIMEOUT_S = 240
HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "jax_coordination_scenarios.py")
FATAL = "Terminating process because the JAX distributed service detected fatal errors."
# The record read_run() adds where JAX's fatal error ended a process.
FATAL_CALL = "fatal error (JAX terminated the process)"


# -------------------------------------------------------------------------------------------------
# The wrapper: one per JAX process, in both runs.

def wrap(command):
    directory = os.environ["COHORT_SCENARIO_DIR"]
    process = os.environ["JAX_PROCESS_ID"]
    with open(os.path.join(directory, f"stderr-{process}.log"), "wb") as stderr:
        child = subprocess.Popen(command, stderr=stderr)

        def forward(signum, _frame):
            child.send_signal(signum)
        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        code = child.wait()
    ended = {"call": "process ended", "ok": True,
             "value": f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit {code}"}
    with open(os.path.join(directory, f"record-{process}.jsonl"), "a") as record:
        record.write(json.dumps(ended, sort_keys=True) + "\n")
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


# -------------------------------------------------------------------------------------------------
# Running the program both ways.

def free_port():
    """A port nobody listens on now, for JAX process 0's service (it takes no listening socket, so
    the port is chosen before it binds; run() retries if someone took it meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario_command(python, mode):
    return [sys.executable, os.path.abspath(__file__), "wrap", "--", python, SCENARIOS, mode]


def base_environment(directory):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("JAX_", "COHORT_", "XLA_")):
            del env[name]
    env.update({"JAX_PLATFORMS": "cpu", "COHORT_SCENARIO_DIR": directory,
                "PYTHONUNBUFFERED": "1"})
    return env


def run_with_jax_service(python, mode, directory):
    """The processes as upstream runs them: process 0 hosts jaxlib's service on the address every
    process dials."""
    env = base_environment(directory)
    env["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["JAX_NUM_PROCESSES"] = str(NUM_PROCESSES)
    processes = []
    for p in range(NUM_PROCESSES):
        env_p = dict(env, JAX_PROCESS_ID=str(p),
                     COHORT_SCENARIO_RECORD=os.path.join(directory, f"record-{p}.jsonl"))
        # A session of its own: a process that hangs is ended with its JAX child (stop()).
        processes.append(subprocess.Popen(scenario_command(python, mode), env=env_p,
                                          stdout=subprocess.DEVNULL, start_new_session=True))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for p in processes:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in processes:
                stop(q)
            raise RuntimeError(f"{mode} under jaxlib's service did not end in {RUN_TIMEOUT_S} s")
    return ""


def stop(process):
    """Ends `process` and everything in its session: SIGTERM, then SIGKILL after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def run_under_cohort(python, mode, directory, cohort_run):
    """The processes as a Cohort user runs them: cohort-run starts one sidecar per rank and the
    processes dial rank 0's, which serves JAX's protocol."""
    env = base_environment(directory)
    # cohort-run sets JAX_PROCESS_ID and friends; the record path follows from the process id.
    command = [cohort_run, "-n", str(NUM_PROCESSES), "--work-dir", os.path.join(directory, "work"),
               # What the program passes to jax.distributed.initialize(shutdown_timeout_seconds=2):
               # under Cohort the service's timeout is cohort-run's (docs/jax.md).
               "--shutdown-timeout", "2s", "--"]
    command += [sys.executable, os.path.abspath(__file__), "record-path", "--",
                *scenario_command(python, mode)]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", start_new_session=True) as run:
        try:
            return run.communicate(timeout=RUN_TIMEOUT_S)[0]
        except subprocess.TimeoutExpired:
            stop(run)  # cohort-run stops its sidecars and processes on SIGTERM.
            raise RuntimeError(f"{mode} under cohort-run did not end in {RUN_TIMEOUT_S} s:\n"
                               f"{run.communicate()[0]}")


def with_record_path(command):
    """Under cohort-run: sets COHORT_SCENARIO_RECORD from the process id cohort-run gave."""
    directory = os.environ["COHORT_SCENARIO_DIR"]
    os.environ["COHORT_SCENARIO_RECORD"] = os.path.join(
        directory, f"record-{os.environ['JAX_PROCESS_ID']}.jsonl")
    os.execv(command[0], command)


def read_run(directory):
    """Per process: its records, and its fatal error line (JAX's own, when the service failed it)."""
    out = []
    for p in range(NUM_PROCESSES):
        path = os.path.join(directory, f"record-{p}.jsonl")
        records = []
        if os.path.exists(path):
            with open(path) as f:
                records = [json.loads(line) for line in f if line.strip()]
        stderr_path = os.path.join(directory, f"stderr-{p}.log")
        stderr = ""
        if os.path.exists(stderr_path):
            with open(stderr_path, errors="replace") as f:
                stderr = f.read()
        fatal = fatal_status(stderr)
        if fatal is not None:
            # Where the process's end shows in the order of its calls: at its end.
            records.insert(len(records) - 1 if records and records[-1]["call"] == "process ended"
                           else len(records),
                           {"call": FATAL_CALL, "ok": False,
                            "message": fatal})
        out.append({"records": records, "stderr": stderr})
    return out


def fatal_status(stderr):
    """The status in JAX's fatal log line, or None. JAX prints it from whichever of its calls heard
    of the failure first (PollForError, or ShutdownTask under "Failed to disconnect ..."), which is
    a race in both runs; the status is the same."""
    start = stderr.find(FATAL)
    if start < 0:
        return None
    text = stderr[start + len(FATAL):]
    end = text.find("*** Check failure stack trace")
    if end >= 0:
        text = text[:end]
    text = text.split("Status: ", 1)[-1]
    text = re.sub(r"^[A-Z_]+: Failed to disconnect from coordination service with status: ", "", text)
    text = text.split("\nRPC: ", 1)[0]
    return text.rstrip()


# -------------------------------------------------------------------------------------------------
# Normalizing and comparing.

def canonical_grpc_fields(text):
    """gRPC prints `{grpc_status:N, grpc_message:"..."}` with its fields in either order."""
    def repl(m):
        fields = re.findall(r'(grpc_[a-z_]+:(?:"(?:[^"\\]|\\.)*"|[^,}]*))', m.group(1))
        return "{" + ", ".join(sorted(fields)) + "}"
    return re.sub(r'\{((?:grpc_[a-z_]+:(?:"(?:[^"\\]|\\.)*"|[^,}]*)(?:, )?)+)\}', repl, text)


def sorted_payloads(text):
    """absl prints a status's payloads (` [type.googleapis.com/...='...']`) in an order that varies
    from status to status, jaxlib's included: in one order."""
    payload = r" \[type\.googleapis\.com/[A-Za-z.]+='(?:[^'\\]|\\.)*'\]"
    return re.sub(f"(?:{payload})+", lambda m: "".join(sorted(re.findall(payload, m.group(0)))), text)


def normalize(text):
    # Cohort's diagnosis after XLA's text: a line of its own (escaped where gRPC quotes it).
    text = re.sub(r'(?:\n|\\n)Cohort: (?:(?! \[type\.googleapis\.com/)[^\n"\\])*', "", text)
    text = canonical_grpc_fields(text)
    text = sorted_payloads(text)
    # Which task reached a barrier first is timing.
    text = re.sub(r"The first task at the barrier: \d+", "The first task at the barrier: <task>", text)
    text = re.sub(r"(task:)\d+(\. Some timed out)", r"\1<task>\2", text)  # The TSL spelling.
    # The shutdown barrier is named after the service's incarnation (and its BarrierError payload
    # starts with that name's length).
    text = re.sub(r"(BarrierError='\\n)(?:\\x[0-9a-f]{2}|[^\\])Shutdown::\d+", r"\1<length>Shutdown::<service>", text)
    text = re.sub(r"Shutdown::\d+", "Shutdown::<service>", text)
    return text


def comparable(record):
    r = dict(record)
    if "message" in r:
        r["message"] = normalize(r["message"])
    return r


def answered_before_termination(xla, cohort, i):
    """Whether jaxlib's process was terminated while it waited in its i-th call, and Cohort's was
    answered ABORTED there and then terminated with the same error: the job's failure reaches the
    waiting call and JAX's PollForError at once, and which one reaches the program first is a race
    (docs/jax.md lists the call). The process's end differs with it (SIGABRT, or the program's own
    exit when it got there first), so nothing after is compared."""
    return (i < len(xla) and xla[i]["call"] == FATAL_CALL and i + 1 < len(cohort)
            and not cohort[i].get("ok") and cohort[i].get("message", "").startswith("ABORTED: ")
            and cohort[i + 1] == xla[i])


def differences(xla_run, cohort_run):
    """[(process, call, what jaxlib's service gave, what Cohort's port gave)]."""
    out = []
    for p in range(NUM_PROCESSES):
        xla = [comparable(r) for r in xla_run[p]["records"]]
        cohort = [comparable(r) for r in cohort_run[p]["records"]]
        for i in range(max(len(xla), len(cohort))):
            a = xla[i] if i < len(xla) else None
            b = cohort[i] if i < len(cohort) else None
            if answered_before_termination(xla, cohort, i):
                out.append((p, b["call"], a, b))
                break
            if a != b:
                call = (a or b)["call"]
                out.append((p, call, a, b))
                if a is None or b is None or a["call"] != b["call"]:
                    break  # The runs went different ways: what follows would not line up.
    return out


def documented_differences(source_dir):
    """The calls docs/jax.md lists as answered otherwise on purpose: the backticked names in the
    first column of the table under its heading "Where the port answers otherwise, on purpose"."""
    with open(os.path.join(source_dir, "docs", "jax.md")) as f:
        doc = f.read()
    heading = "Where the port answers otherwise, on purpose"
    start = doc.find(heading)
    if start < 0:
        return set()
    section = doc[start:]
    next_heading = re.search(r"\n#+ ", section[len(heading):])
    if next_heading:
        section = section[:len(heading) + next_heading.start()]
    calls = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|-") and not line.startswith("| -"):
            first = line.split("|")[1]
            calls.update(re.findall(r"`([^`]+)`", first))
    return calls


def show(record):
    if record is None:
        return "(nothing: the process had ended)"
    if record.get("ok"):
        return f"ok {json.dumps(record.get('value'))}"
    return f"{record.get('error', 'error')}: {record.get('message')}"


# -------------------------------------------------------------------------------------------------

def find_python(version):
    """The interpreter jax `version` installs with: python3 before 0.11, else one >= 3.12."""
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    if major_minor < (0, 11):
        return "python3"
    candidates = ["python3.13", "python3.12"]
    versions = os.path.join(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")), "versions")
    if os.path.isdir(versions):
        candidates += [os.path.join(versions, v, "bin", "python3")
                       for v in sorted(os.listdir(versions), reverse=True)]
    for python in candidates:
        try:
            if subprocess.run([python, "-c", "import sys, venv; sys.exit(sys.version_info < (3, 12))"],
                              capture_output=True).returncode == 0:
                return python
        except OSError:
            continue
    return None


def main():
    if len(sys.argv) > 2 and sys.argv[1] in ("wrap", "record-path") and sys.argv[2] == "--":
        (wrap if sys.argv[1] == "wrap" else with_record_path)(sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax", required=True, help="the jax version from PyPI, e.g. 0.10.2")
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--cohort-run", help="the cohort-run to compare (default: the build's)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' records")
    args = parser.parse_args()

    python = find_python(args.jax)
    if python is None:
        print(f"SKIPPED: jax {args.jax} needs Python >= 3.12 (its wheels say Requires-Python >=3.12), "
              "and this machine has none (in PATH or under pyenv)")
        return 77
    venv = os.path.join(args.build_dir, "python", f"jax-{args.jax}")
    # The frameworks tests' environment of this jax, with tensorstore, which jax's checkpointing
    # (one of the scenarios) imports.
    setup = subprocess.run(["bash", os.path.join(args.source_dir, "tests", "setup_python_venv.sh"), venv,
                            "tensorstore", f"jax=={args.jax}", f"jaxlib=={args.jax}",
                            f"tensorstore=={TENSORSTORE}"],
                           env=dict(os.environ, PYTHON=python))
    if setup.returncode == 77:
        print(f"SKIPPED: PyPI cannot be reached, so jax {args.jax} cannot be installed")
        return 77
    if setup.returncode != 0:
        print(f"tests/setup_python_venv.sh {venv} failed ({setup.returncode})")
        return 1
    venv_python = os.path.join(venv, "bin", "python")
    cohort_run = args.cohort_run or os.path.join(args.build_dir, "bin", "cohort-run")
    allowed = documented_differences(args.source_dir)

    work = tempfile.mkdtemp(prefix="cohort-jaxdiff-", dir="/tmp")  # Short: sidecar sockets live here.
    failed = False
    try:
        for mode in MODES:
            runs = {}
            broken = False
            for service in ("jaxlib", "cohort"):
                directory = os.path.join(work, f"{mode}-{service}")
                for attempt in range(2):
                    shutil.rmtree(directory, ignore_errors=True)
                    os.makedirs(directory)
                    started = time.monotonic()
                    if service == "jaxlib":
                        log = run_with_jax_service(venv_python, mode, directory)
                    else:
                        log = run_under_cohort(venv_python, mode, directory, cohort_run)
                    run = read_run(directory)
                    # JAX's process 0 could not bind the port chosen for it: someone took it.
                    if service == "jaxlib" and "Failed to add port" in run[0]["stderr"] and attempt == 0:
                        continue
                    break
                print(f"jax {args.jax}, {mode}, {service}'s service: {time.monotonic() - started:.1f} s")
                runs[service] = run
                if not all(r["records"] for r in run):
                    print(f"{mode} under {service}'s service: a process recorded nothing; its output:")
                    print(log)
                    for p, r in enumerate(run):
                        print(f"--- process {p} stderr ---\n{r['stderr'][-4000:]}")
                    broken = True
            failed |= broken
            if broken:
                continue
            for p, call, xla, cohort in differences(runs["jaxlib"], runs["cohort"]):
                listed = call in allowed
                failed |= not listed
                print(f"{'DOCUMENTED DIFFERENCE' if listed else 'DIFFERENCE'} ({mode}, process {p}) {call}:\n"
                      f"  jaxlib's service: {show(xla)}\n  Cohort's port:    {show(cohort)}")
    finally:
        if args.keep or failed:
            print(f"records kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("FAILED: differences docs/jax.md does not list" if failed else
          f"jax {args.jax}: every process got what jaxlib's own service answers, but for what "
          "docs/jax.md lists")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

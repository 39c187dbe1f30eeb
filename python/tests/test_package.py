"""The cohort package as users run it: real jobs under cohort-run (3 processes, a sidecar each),
each rank a Python process running one case of worker.py. COHORT_BIN_DIR names the build's
bin/ (cohort-run)."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import cohort

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(os.environ.get("COHORT_BIN_DIR", HERE.parents[1] / "build" / "bin"))
RANKS = 3


def run_job(case, ranks=RANKS, timeout=120, env=None):
    cohort_run = BIN / "cohort-run"
    assert cohort_run.exists(), f"{cohort_run} is missing: build first, or set COHORT_BIN_DIR"
    return subprocess.run(
        [str(cohort_run), "-n", str(ranks), "--", sys.executable, str(HERE / "worker.py"), case],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def oks(result, case):
    return sorted(int(m) for m in re.findall(rf"\[rank \d+\] ok {case} rank (\d+)", result.stdout))


@pytest.mark.parametrize("case", ["job", "key_value", "barriers", "collectives_numpy",
                                  "collectives_torch", "array_errors", "multihost", "interrupt",
                                  "preemption"])
def test_case_passes_on_every_rank(case):
    result = run_job(case)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert oks(result, case) == list(range(RANKS)), output


def test_peer_killed_others_raise_aborted_naming_it_within_a_second():
    result = run_job("peer_killed")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output  # rank 2 was killed: the job failed
    assert "rank 2 killed by signal 9" in output, output
    survivors = re.findall(r"\[rank (\d)\] ok peer_killed rank \d: AbortedError after ([\d.]+) s: "
                           r"(.*)", result.stdout)
    assert sorted(int(r) for r, _, _ in survivors) == [0, 1], output
    for _, took, message in survivors:
        assert float(took) < 1.0 and "rank 2" in message, message


def test_preemption_every_rank_checkpoints_at_the_same_step():
    result = run_job("preemption")
    output = result.stdout + result.stderr
    steps = set(re.findall(r"checkpoint at step (\d+)", result.stdout))
    assert len(steps) == 1, output
    assert len(re.findall(r"checkpoint at step", result.stdout)) == RANKS, output


# ---- Without a job ----------------------------------------------------------------------------


def test_before_initialize_the_defaults_and_a_clear_error():
    assert not cohort.is_initialized()
    assert (cohort.process_index(), cohort.process_count()) == (0, 1)
    assert cohort.reached_preemption_sync_point(3) is False
    with pytest.raises(cohort.FailedPreconditionError) as e:
        cohort.key_value_set("k", "v")
    assert isinstance(e.value, cohort.Error)
    assert e.value.code == "FAILED_PRECONDITION"


def test_every_status_has_its_class_under_cohort_error():
    for name in ["CancelledError", "UnknownError", "InvalidArgumentError", "DeadlineExceededError",
                 "NotFoundError", "AlreadyExistsError", "PermissionDeniedError",
                 "ResourceExhaustedError", "FailedPreconditionError", "AbortedError",
                 "OutOfRangeError", "UnimplementedError", "InternalError", "UnavailableError",
                 "DataLossError", "UnauthenticatedError"]:
        assert issubclass(getattr(cohort, name), cohort.Error), name
    assert issubclass(cohort.DeadlineExceededError, TimeoutError)
    assert issubclass(cohort.InvalidArgumentError, ValueError)


def test_initialize_with_bad_settings_names_the_problem():
    with pytest.raises(cohort.InvalidArgumentError) as e:
        cohort.initialize("127.0.0.1:1", num_processes=2, process_id=5, initialization_timeout=1)
    assert "5" in str(e.value), str(e.value)
    with pytest.raises(TypeError):
        cohort.initialize(on_peer_failure="exit")


def test_the_wheel_carries_libdist_next_to_the_module():
    package = pathlib.Path(cohort.__file__).parent
    assert (package / "libcohort_dist.so.0").exists()
    assert np.__version__  # numpy is the one declared dependency


# ---- Elastic replica groups -------------------------------------------------------------------


def test_replica_groups_from_the_operators_variables(monkeypatch):
    for name in ("COHORT_REPLICA_GROUPS", "COHORT_DESIRED_REPLICA_GROUPS"):
        monkeypatch.delenv(name, raising=False)
    assert cohort.replica_groups() is None and cohort.desired_replica_groups() is None
    assert cohort.gradient_accumulation_steps() == 1
    monkeypatch.setenv("COHORT_REPLICA_GROUPS", "3")
    monkeypatch.setenv("COHORT_DESIRED_REPLICA_GROUPS", "4")
    assert (cohort.replica_groups(), cohort.desired_replica_groups()) == (3, 4)
    assert cohort.gradient_accumulation_steps() == 2
    monkeypatch.setenv("COHORT_REPLICA_GROUPS", "4")
    assert cohort.gradient_accumulation_steps() == 1
    monkeypatch.setenv("COHORT_REPLICA_GROUPS", "three")
    with pytest.raises(cohort.InvalidArgumentError, match="COHORT_REPLICA_GROUPS='three'"):
        cohort.replica_groups()

"""examples/python/, run as their docstrings say, under cohort-run."""

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = pathlib.Path(os.environ.get("COHORT_BIN_DIR", REPO / "build" / "bin"))


def test_pytorch_preemptible_checkpoints_on_sigterm_and_resumes(tmp_path):
    if os.environ.get("COHORT_TEST_REQUIRE_TORCH") != "1":
        pytest.importorskip("torch")
    example = [sys.executable, str(REPO / "examples/python/pytorch_preemptible.py"),
               "--checkpoint-dir", str(tmp_path), "--steps", "400"]
    job = subprocess.Popen([str(BIN / "cohort-run"), "-n", "2", "--"] + example,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in job.stdout:  # wait until training runs, then preempt it as a drain would
        lines.append(line)
        if re.search(r"step 50 loss", line):
            job.send_signal(signal.SIGTERM)
            break
    lines += job.stdout.readlines()
    assert job.wait(timeout=120) == 76, "".join(lines)
    steps = re.findall(r"rank (\d): preempted: checkpoint at step (\d+)", "".join(lines))
    assert sorted(r for r, _ in steps) == ["0", "1"], "".join(lines)
    assert len({s for _, s in steps}) == 1, steps
    step = steps[0][1]
    assert (tmp_path / "checkpoint.pt").exists()

    assert "global batch 32 (1 micro-batches of 16 per rank" in "".join(lines), "".join(lines)

    # Resumed as an elastic job that runs 1 of its 2 replica groups: one process, the same global
    # batch in two micro-batches, from the checkpoint the two processes took.
    again = subprocess.run([str(BIN / "cohort-run"), "-n", "1", "--"] + example,
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "COHORT_REPLICA_GROUPS": "1",
                                "COHORT_DESIRED_REPLICA_GROUPS": "2"})
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "rank 0/1: global batch 32 (2 micro-batches of 16 per rank; replica groups 1 of 2)" \
        in out, out
    assert re.findall(rf"rank (\d): resumed from step {step} ", out) == ["0"], out
    assert re.findall(r"rank (\d): done at step 399", out) == ["0"], out

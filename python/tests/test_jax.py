"""`import cohort.jax` makes a zero-argument jax.distributed.initialize() work under cohort-run,
for every jax the tests install. COHORT_JAX_PYTHONS lists "version=interpreter" pairs (an empty
interpreter: that version cannot be installed here, with the reason in COHORT_JAX_SKIP_<ver>);
COHORT_JAX_K8S_PYTHON is "version=interpreter" of one that also has jax[k8s]'s kubernetes
package."""

import os
import pathlib
import re
import signal
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(os.environ.get("COHORT_BIN_DIR", HERE.parents[1] / "build" / "bin"))


def jax_pythons():
    pairs = [p.split("=", 1) for p in os.environ.get("COHORT_JAX_PYTHONS", "").split(",") if p]
    return pairs or [("none", "")]


def run_jax(version, python, *program, env=None):
    if not python:
        reason = os.environ.get(f"COHORT_JAX_SKIP_{version}", "COHORT_JAX_PYTHONS is not set")
        pytest.skip(f"jax {version}: {reason}")
    return subprocess.run(
        [str(BIN / "cohort-run"), "-n", "2", "--", python, *map(str, program)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})})


@pytest.mark.parametrize("version,python", jax_pythons())
def test_zero_argument_initialize_under_cohort_run(version, python):
    result = run_jax(version, python, HERE / "jax_worker.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    ranks = sorted(int(r) for r in re.findall(rf"ok jax {re.escape(version)} rank (\d) of 2",
                                              result.stdout))
    assert ranks == [0, 1], output


@pytest.mark.parametrize("version,python", jax_pythons())
def test_the_jax_example_runs_as_its_docstring_says(version, python):
    result = run_jax(version, python, HERE.parents[1] / "examples/python/jax_zero_arg.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert len(re.findall(r"process \d: every process's index: \[0, 1\]", result.stdout)) == 2, \
        output


def test_ahead_of_jax_own_kubernetes_detector():
    """jax[k8s]'s own detector, the real one (the kubernetes package installed, and
    KUBERNETES_SERVICE_HOST set as in every pod): without `import cohort.jax` it claims the
    process and fails (here, outside a pod, on the missing service account; in a pod of the
    operator, on the DistributedJob owner); with it, Cohort's detector answers first."""
    version, _, python = os.environ.get("COHORT_JAX_K8S_PYTHON", "").partition("=")
    if not python:
        pytest.skip("COHORT_JAX_K8S_PYTHON is not set (no jax with the kubernetes package)")
    in_a_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    plain = run_jax(version, python, "-c", "import jax; jax.distributed.initialize()",
                    env=in_a_pod)
    output = plain.stdout + plain.stderr
    assert plain.returncode != 0, output
    assert "load_incluster_config" in output or "service" in output.lower(), output
    result = run_jax(version, python, HERE / "jax_worker.py", env=in_a_pod)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    ranks = sorted(int(r) for r in re.findall(rf"ok jax {re.escape(version)} rank (\d) of 2",
                                              result.stdout))
    assert ranks == [0, 1], output


@pytest.mark.parametrize("version,python", jax_pythons()[:1])
def test_jax_elastic_example_resumes_at_another_world_size_with_the_same_global_batch(
        version, python, tmp_path):
    """examples/python/jax_elastic.py as its docstring runs it: preempted at 2 processes, resumed
    at 1 as an elastic job running 1 of its 2 replica groups."""
    if not python:
        run_jax(version, python)  # skips, saying why
    example = [python, str(HERE.parents[1] / "examples/python/jax_elastic.py"),
               "--checkpoint-dir", str(tmp_path), "--steps", "300"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    job = subprocess.Popen([str(BIN / "cohort-run"), "-n", "2", "--"] + example, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in job.stdout:
        lines.append(line)
        if re.search(r"step 50 loss", line):
            job.send_signal(signal.SIGTERM)
            break
    lines += job.stdout.readlines()
    out = "".join(lines)
    assert job.wait(timeout=120) == 76, out
    assert "rank 0/2: global batch 32 (1 micro-batches of 16 per rank" in out, out
    steps = set(re.findall(r"rank \d: preempted: checkpoint at step (\d+)", out))
    assert len(steps) == 1, out
    again = subprocess.run([str(BIN / "cohort-run"), "-n", "1", "--"] + example,
                           capture_output=True, text=True, timeout=300,
                           env={**env, "COHORT_REPLICA_GROUPS": "1",
                                "COHORT_DESIRED_REPLICA_GROUPS": "2"})
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "rank 0/1: global batch 32 (2 micro-batches of 16 per rank; replica groups 1 of 2)" \
        in out, out
    assert f"rank 0: resumed from step {steps.pop()} at world size 1" in out, out
    assert "rank 0: done at step 299" in out, out


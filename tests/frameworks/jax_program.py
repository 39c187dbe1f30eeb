"""An unmodified JAX program, as a user writes it for a cluster: it calls jax.distributed with the
coordinator, process count and index from the environment that cohort-run and cohort-operator
set, and exercises what a multi-host JAX program uses of the coordination service: the key-value
store, wait_at_barrier, process_allgather, broadcast_one_to_all, get_live_nodes and shutdown.

Modes (argv[1]):
  clean        everything above, then exit 0.
  wait         initialize, print "ready", then wait for the other rank to die (the fate-sharing
               test kills one rank; JAX terminates the other when the service tells it).
  preemption   train in a loop until jax's own reached_preemption_sync_point(step) is true, print
               the step, save and exit 0 (the preemption test sends SIGTERM to one process).
  k8s          as a DistributedJob: restart attempt 0 runs `preemption` when COHORT_TEST_HOLD=1
               (the test kills or evicts a rank), else `clean`; later attempts run `clean`.

For the tests, rank 0 prints what its sidecar's /metrics says of the JAX tasks after shutdown
(COHORT_TEST_SIDECAR_PORT_FILE: the file holding the sidecar's HTTP port on this host;
COHORT_TEST_SIDECAR_METRICS=pod: the sidecar of this pod, on port 9400 of COHORT_POD_IP).
Run by tests/frameworks/frameworks_test.cc and tests/e2e/operator_e2e_test.cc.
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def say(line):
    """Prints `line`; with COHORT_TEST_RECORD set, also appends it to that file, which outlives
    the pod (a restarted pod's log starts afresh)."""
    print(line, flush=True)
    record = os.environ.get("COHORT_TEST_RECORD")
    if record:
        with open(record, "a") as f:
            f.write(line + "\n")


def initialize():
    # JAX reads only JAX_COORDINATOR_ADDRESS itself (docs/jax.md): pass the other two.
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        initialization_timeout=60,
    )


def client():
    from jax._src import distributed
    return distributed.global_state.client


def clean():
    index, count = jax.process_index(), jax.process_count()
    kv = client()
    kv.key_value_set(f"cohort-test/{index}", f"hello from {index}")
    values = [kv.blocking_key_value_get(f"cohort-test/{p}", 30_000) for p in range(count)]
    assert values == [f"hello from {p}" for p in range(count)], values
    kv.wait_at_barrier("cohort-test-barrier", 30_000)
    gathered = multihost_utils.process_allgather(jnp.array([index * 10]))
    assert [int(x) for x in gathered.reshape(-1)] == [p * 10 for p in range(count)], gathered
    root = multihost_utils.broadcast_one_to_all(jnp.array([index + 7]))
    assert int(root[0]) == 7, root
    live = kv.get_live_nodes(list(range(count)))
    assert sorted(live) == list(range(count)), live
    say(f"JAX process {index} of {count}: kv, barrier, allgather, broadcast and live nodes ok")
    jax.distributed.shutdown()
    print_sidecar_metrics(index)


def print_sidecar_metrics(index):
    """For the test: what rank 0's sidecar says of the JAX tasks once both shut down."""
    port_file = os.environ.get("COHORT_TEST_SIDECAR_PORT_FILE")
    if index != 0:
        return
    if port_file:
        with open(port_file) as f:
            url = f"http://127.0.0.1:{int(f.read())}/metrics"
    elif os.environ.get("COHORT_TEST_SIDECAR_METRICS") == "pod":
        url = f"http://{os.environ['COHORT_POD_IP']}:9400/metrics"
    else:
        return
    import urllib.request
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(("cohort_task_state{", "cohort_jax_rpcs_total{")):
            print("METRIC", line, flush=True)


def wait():
    say(f"JAX process {jax.process_index()} ready")
    client().blocking_key_value_get("cohort-test/never-set", 120_000)
    sys.exit("a key nobody sets was found")


def preemption():
    index = jax.process_index()
    say(f"JAX process {index} ready")
    step = 0
    x = jnp.zeros(4)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        x = x + 1
        if multihost_utils.reached_preemption_sync_point(step):
            say(f"JAX process {index} preemption sync point at step {step}; saving")
            jax.distributed.shutdown()
            return
        step += 1
        time.sleep(0.01)
    sys.exit("no preemption notice within 120 s")


def k8s():
    attempt = int(os.environ.get("COHORT_RESTART_ATTEMPT", "0"))
    say(f"JAX process {jax.process_index()} restart attempt {attempt}")
    if attempt == 0 and os.environ.get("COHORT_TEST_HOLD") == "1":
        preemption()
    else:
        clean()


if __name__ == "__main__":
    initialize()
    {"clean": clean, "wait": wait, "preemption": preemption, "k8s": k8s}[sys.argv[1]]()

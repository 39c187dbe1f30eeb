"""An unmodified JAX program, as a user would write it for a cluster: it takes the coordinator,
the process count and its index from the JAX_* environment that cohort-operator injects, and
checks that every process joined.

Run as a DistributedJob by tests/e2e/operator_e2e_test.cc (JaxProgram_TwoRanksSucceed)."""

import os
import sys

import jax

jax.distributed.initialize(
    coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
    initialization_timeout=60,
)
count = jax.process_count()
index = jax.process_index()
devices = len(jax.devices())
print(f"JAX process {index} of {count}; {devices} devices in the job", flush=True)
if count != int(os.environ["JAX_NUM_PROCESSES"]):
    sys.exit(f"expected {os.environ['JAX_NUM_PROCESSES']} processes, JAX sees {count}")
jax.distributed.shutdown()

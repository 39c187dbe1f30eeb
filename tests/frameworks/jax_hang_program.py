"""The hang of jax#38503, unmodified JAX on CPU: two processes train in steps of a second, each
step a cross-process all-gather (multihost_utils.process_allgather) and a host sync; in restart
attempt 0, process 1 blocks before step 5 (a sleep standing for a stuck data loader or a
deadlock) while process 0 waits for it in the all-gather. JAX itself never gives up on such a
wait. Cohort's hang detection must name process 1 and restart the job; later attempts train 5
steps and exit 0. Run by tests/e2e/operator_e2e_test.cc."""

import os
import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

jax.distributed.initialize(
    coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
    initialization_timeout=60,
)
index = jax.process_index()
attempt = int(os.environ.get("COHORT_RESTART_ATTEMPT", "0"))
print(f"JAX process {index} ready (attempt {attempt})", flush=True)
for step in range(1_000_000 if attempt == 0 else 5):
    if attempt == 0 and index == 1 and step == 5:
        time.sleep(1e9)  # The hang (tests/e2e look for this line).
    gathered = multihost_utils.process_allgather(jnp.array([step + index]))
    jnp.sum(jnp.asarray(gathered)).block_until_ready()
    time.sleep(1.0)
print(f"JAX process {index}: 5 steps (attempt {attempt})", flush=True)
jax.distributed.shutdown()

"""One rank of a JAX job under cohort-run: `import cohort.jax`, then a zero-argument
jax.distributed.initialize() (run with the interpreter of a venv that has jax and cohort)."""

import os
import sys

import cohort.jax  # noqa: F401  (registers Cohort's cluster detector, first)
from jax._src.clusters import ClusterEnv

import jax


class ClaimsEverything(ClusterEnv):
    """A detector that, like jax[k8s]'s in a pod, claims the environment and would fail."""

    name = "claims-everything"

    @classmethod
    def is_env_present(cls):
        return True

    @classmethod
    def get_coordinator_address(cls, timeout_secs=None, override_coordinator_port=None):
        raise AssertionError("JAX asked the wrong detector")


assert ClusterEnv._cluster_types[0] is cohort.jax.CohortCluster, ClusterEnv._cluster_types
jax.distributed.initialize()
rank = int(os.environ["COHORT_PROCESS_ID"])
assert jax.process_index() == rank, (jax.process_index(), rank)
assert jax.process_count() == int(os.environ["COHORT_NUM_PROCESSES"]), jax.process_count()

from jax.experimental import multihost_utils  # noqa: E402

multihost_utils.sync_global_devices("cohort-jax")
jax.distributed.shutdown()
print(f"ok jax {jax.__version__} rank {rank} of {jax.process_count()}")
sys.stdout.flush()

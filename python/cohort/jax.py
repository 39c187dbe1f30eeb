"""`import cohort.jax`: a zero-argument `jax.distributed.initialize()` under Cohort.

jax.distributed.initialize() with no arguments asks its cluster detectors (subclasses of
jax._src.clusters.ClusterEnv: Open MPI, Slurm, TPU, Kubernetes, ...) for the coordinator's
address, the process count and this process's id. None of them knows Cohort, and with
jax[k8s] installed its Kubernetes detector claims a Cohort pod and then fails on the
DistributedJob that owns it. This module registers a detector for Cohort's environment
(JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID, which cohort-run and the
operator set beside COHORT_PROCESS_ID) and puts it first, ahead of JAX's own.

    import cohort.jax  # noqa: F401  (before jax.distributed.initialize)
    import jax
    jax.distributed.initialize()

Importing it does not initialize Cohort (libdist) itself: the JAX process registers with
rank 0's sidecar over JAX's own protocol (docs/jax.md). Tested with jax 0.9.2, 0.10.2 and
0.12.0.1.
"""

import os

from jax._src.clusters import ClusterEnv

_VARIABLES = ("COHORT_PROCESS_ID", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
              "JAX_PROCESS_ID")


class CohortCluster(ClusterEnv):
    """A process started by cohort-run or in a DistributedJob's pod."""

    name = "cohort"

    @classmethod
    def is_env_present(cls):
        return all(v in os.environ for v in _VARIABLES)

    @classmethod
    def get_coordinator_address(cls, timeout_secs=None, override_coordinator_port=None):
        # JAX_COORDINATOR_PORT (the override) is not applied: the address is where rank 0's
        # sidecar serves JAX's protocol, and no other port answers.
        return os.environ["JAX_COORDINATOR_ADDRESS"]

    @classmethod
    def get_process_count(cls):
        return int(os.environ["JAX_NUM_PROCESSES"])

    @classmethod
    def get_process_id(cls):
        return int(os.environ["JAX_PROCESS_ID"])

    @classmethod
    def get_local_process_id(cls):
        # A pod of several GPU processes gets JAX_LOCAL_DEVICE_IDS, which jax reads itself;
        # None leaves every device visible otherwise (CPU jobs, one GPU per pod).
        return None


# ClusterEnv.__init_subclass__ appended it; JAX uses the first detector that claims the
# environment, so Cohort's goes first.
ClusterEnv._cluster_types.remove(CohortCluster)
ClusterEnv._cluster_types.insert(0, CohortCluster)

"""jax.distributed.initialize() with no arguments, under Cohort.

`import cohort.jax` puts Cohort's cluster detector ahead of JAX's own, so the coordinator's
address, the process count and this process's id come from the environment cohort-run and the
operator set (docs/python.md, "JAX").

    JAX_PLATFORMS=cpu cohort-run -n 2 -- python examples/python/jax_zero_arg.py

On Kubernetes: manifests/examples/jax-zero-arg.yaml.
"""

import cohort.jax  # noqa: F401  (before jax.distributed.initialize)

import jax
from jax.experimental import multihost_utils

jax.distributed.initialize()
print(f"process {jax.process_index()} of {jax.process_count()}: "
      f"{jax.local_device_count()} local device(s)", flush=True)
# Every process contributes its index; every process sees them all.
indices = multihost_utils.process_allgather(jax.numpy.array([jax.process_index()]))
print(f"process {jax.process_index()}: every process's index: {indices.ravel().tolist()}",
      flush=True)
jax.distributed.shutdown()

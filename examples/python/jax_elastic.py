"""A data-parallel JAX trainer that is elastic and survives preemption, with the cohort package.

Each process computes the gradient of a linear model on its micro-batches with jax.grad, the
processes average it with cohort's host all-reduce, and every step it asks
cohort.reached_preemption_sync_point(step): after a preemption notice (a pod evicted, an elastic
job's resize) every process gets True at the same step, rank 0 saves the parameters (every
process holds the same: data parallel) and every process leaves with exit 76. At every start it
reads the world size, and keeps the global batch when an elastic job runs fewer replica groups
than it wants (cohort.gradient_accumulation_steps() micro-batches per step; docs/operator.md,
"Elastic replica groups"), and it resumes from the checkpoint whatever the world size.

    JAX_PLATFORMS=cpu cohort-run -n 2 -- python examples/python/jax_elastic.py --checkpoint-dir /tmp/c
    kill -TERM <cohort-run's pid>        # every process checkpoints at one step, exits 76
    COHORT_REPLICA_GROUPS=1 COHORT_DESIRED_REPLICA_GROUPS=2 JAX_PLATFORMS=cpu \\
      cohort-run -n 1 -- python examples/python/jax_elastic.py --checkpoint-dir /tmp/c
                                          # "resumed from step N", the same global batch

On Kubernetes, as manifests/examples/pytorch-elastic.yaml runs the PyTorch one.
"""

import argparse
import os
import sys
import time

import numpy as np

import cohort

import jax
import jax.numpy as jnp


def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    args = parser.parse_args()

    cohort.initialize()
    rank, world = cohort.process_index(), cohort.process_count()
    comm = cohort.Communicator()
    micro_batch, accumulate = 16, cohort.gradient_accumulation_steps()
    print(f"rank {rank}/{world}: global batch {micro_batch * world * accumulate} "
          f"({accumulate} micro-batches of {micro_batch} per rank; replica groups "
          f"{cohort.replica_groups()} of {cohort.desired_replica_groups()})", flush=True)

    path = os.path.join(args.checkpoint_dir, "checkpoint.npz")
    w, start = jnp.zeros(4, jnp.float32), 0
    if os.path.exists(path):
        saved = np.load(path)
        w, start = jnp.asarray(saved["w"]), int(saved["step"]) + 1
        print(f"rank {rank}: resumed from step {int(saved['step'])} at world size {world}",
              flush=True)
    grad = jax.jit(jax.grad(loss))
    w_true = jnp.arange(4, dtype=jnp.float32)

    exit_code = 0
    for step in range(start, args.steps):
        g = jnp.zeros(4, jnp.float32)
        for micro in range(accumulate):
            key = jax.random.PRNGKey(step * 1_000_003 + rank * 1_009 + micro)
            x = jax.random.normal(key, (micro_batch, 4))
            g = g + grad(w, x, x @ w_true) / accumulate
        summed = np.array(g, dtype=np.float32)
        comm.all_reduce(summed)  # in place: the sum over the processes
        w = w - 0.05 * jnp.asarray(summed / world)
        cohort.report_progress(step)
        if cohort.reached_preemption_sync_point(step):
            if rank == 0:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                with open(path + ".tmp", "wb") as f:
                    np.savez(f, w=np.asarray(w), step=step)
                os.replace(path + ".tmp", path)  # a reader never sees half a checkpoint
            comm.barrier()  # the checkpoint is written before anyone leaves
            print(f"rank {rank}: preempted: checkpoint at step {step}", flush=True)
            exit_code = cohort.PREEMPTED_EXIT_CODE
            break
        if step % 50 == 0:
            print(f"rank {rank}/{world} step {step} loss {float(loss(w, x, x @ w_true)):.4f}",
                  flush=True)
        time.sleep(args.step_seconds)
    else:
        print(f"rank {rank}: done at step {args.steps - 1}", flush=True)
    cohort.shutdown()
    sys.stdout.flush()
    sys.exit(exit_code)


if __name__ == "__main__":
    main()

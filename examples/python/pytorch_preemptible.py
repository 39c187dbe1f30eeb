"""A PyTorch DDP (gloo) trainer that survives preemption, with the cohort package.

Every step it reports its progress (the dashboards' step panels and the CohortRankNoProgress
alert), and asks cohort.reached_preemption_sync_point(step): after any process got a
preemption notice (SIGTERM: a pod evicted, a node drained, cohort-run stopped), every process
gets True at the same step. There rank 0 saves a checkpoint, every process leaves with exit 76
(cohort.PREEMPTED_EXIT_CODE), and the operator restarts the gang as a preemption, not a failure.
On the next start the trainer resumes from the checkpoint.

    cohort-run -n 2 -- python examples/python/pytorch_preemptible.py --checkpoint-dir /tmp/ckpt
    kill -TERM <cohort-run's pid>        # every rank checkpoints at one step, exits 76
    cohort-run -n 2 -- python examples/python/pytorch_preemptible.py --checkpoint-dir /tmp/ckpt
                                          # "resumed from step N"

On Kubernetes: manifests/examples/pytorch-preemptible.yaml (the checkpoint directory must
outlive the pods: a PersistentVolumeClaim, or a hostPath on a one-node cluster). It is elastic
too (manifests/examples/pytorch-elastic.yaml, docs/operator.md "Elastic replica groups"): it
reads the world size at every start, keeps the global batch when the job runs fewer replica
groups than it wants (cohort.gradient_accumulation_steps() micro-batches per step), and its
checkpoint (rank 0's: every replica's parameters are the same) loads at any world size.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import cohort


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--step-seconds", type=float, default=0.02,
                        help="time each step takes on top of the computation (a stand-in for "
                             "real work, so that there is time to preempt it)")
    args = parser.parse_args()

    cohort.initialize()  # the job: rank, size, coordinator from cohort-run or the operator
    dist.init_process_group("gloo")  # torchrun's variables, set by cohort-run and the operator
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == cohort.process_index(), "torch's and Cohort's ranks agree"
    # An elastic job may run fewer replica groups than it wants: the same global batch, in more
    # micro-batches per rank.
    micro_batch, accumulate = 16, cohort.gradient_accumulation_steps()
    print(f"rank {rank}/{world}: global batch {micro_batch * world * accumulate} "
          f"({accumulate} micro-batches of {micro_batch} per rank; replica groups "
          f"{cohort.replica_groups()} of {cohort.desired_replica_groups()})", flush=True)

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        print(f"rank {rank}: resumed from step {state['step']} "
              f"(restart attempt {cohort.restart_attempt()})", flush=True)

    exit_code = 0
    for step in range(start, args.steps):
        optimizer.zero_grad()
        for micro in range(accumulate):
            x = torch.randn(micro_batch, 4) + rank
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean() / accumulate
            if micro < accumulate - 1:
                with model.no_sync():  # all-reduce the gradients once, with the last micro-batch
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()
        cohort.report_progress(step)
        if cohort.reached_preemption_sync_point(step):
            if rank == 0:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                state = {"step": step, "model": model.module.state_dict(),
                         "optimizer": optimizer.state_dict()}
                torch.save(state, path + ".tmp")
                os.replace(path + ".tmp", path)  # a reader never sees half a checkpoint
            dist.barrier()  # the checkpoint is written before anyone leaves
            print(f"rank {rank}: preempted: checkpoint at step {step}", flush=True)
            exit_code = cohort.PREEMPTED_EXIT_CODE
            break
        if step % 50 == 0:
            print(f"rank {rank}/{world} step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_seconds)
    else:
        print(f"rank {rank}: done at step {args.steps - 1}", flush=True)

    dist.destroy_process_group()
    cohort.shutdown()
    sys.stdout.flush()
    # torch 2.15 can abort in interpreter teardown after a clean destroy_process_group()
    # ("terminate called without an active exception"); leave without it.
    os._exit(exit_code)


if __name__ == "__main__":
    main()

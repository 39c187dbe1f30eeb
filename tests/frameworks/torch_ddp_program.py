"""An unmodified PyTorch DDP program (gloo, CPU) as a user writes it for torchrun or Kubeflow's
PyTorchJob: init_process_group() with no arguments reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and
RANK, which cohort-operator sets. It trains a few steps and checks that every rank ends with the
same parameters.

With COHORT_TEST_HOLD=1, restart attempt 0 keeps training until a rank is killed (the test kills
one; gloo then fails the others' all-reduce and the operator restarts the gang); later attempts
train the few steps and succeed. With COHORT_TEST_HANG_AT=N, restart attempt 0 takes steps of a
second and its rank 1 sleeps forever before step N (the others wait for it in DDP's all-reduce):
the hang Cohort's hang detection must find, explain and restart. COHORT_TEST_STEP_S and
COHORT_TEST_STEPS make the steps slow and their number other than 5 (a healthy job hang detection
must leave alone). Run by tests/e2e/operator_e2e_test.cc."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ.get("COHORT_RESTART_ATTEMPT", "0"))
hold = attempt == 0 and os.environ.get("COHORT_TEST_HOLD") == "1"
hang_at = int(os.environ.get("COHORT_TEST_HANG_AT", "0")) if attempt == 0 else 0
step_s = float(os.environ.get("COHORT_TEST_STEP_S", "0"))
steps = int(os.environ.get("COHORT_TEST_STEPS", "5"))
for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
    if name not in os.environ:
        sys.exit(f"{name} is not set; torchrun sets it and so must the operator")

torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
print(f"torch rank {rank} of {world} ready (attempt {attempt})", flush=True)
deadline = time.monotonic() + 120
step = 0
while True:
    if hang_at and step == hang_at and rank == 1:
        time.sleep(1e9)  # The hang (tests/e2e look for this line).
    x = torch.randn(8, 4) + rank
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    if hang_at:
        time.sleep(1.0)
        continue
    time.sleep(step_s)
    if not hold and step >= steps:
        break
    if hold:
        if time.monotonic() > deadline:
            sys.exit("held for 120 s and no rank was killed")
        time.sleep(0.05)

params = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(params) for _ in range(world)]
dist.all_gather(gathered, params)
if not all(torch.equal(g, params) for g in gathered):
    sys.exit(f"rank {rank}: the ranks' parameters differ after {step} DDP steps")
print(f"torch rank {rank}: {step} DDP steps, parameters equal on every rank", flush=True)
dist.destroy_process_group()
# torch 2.15.0 sometimes aborts in interpreter teardown after a clean destroy_process_group()
# ("terminate called without an active exception", about 1 run in 5 of two ranks on loopback,
# without Cohort too): the test is of what Cohort does, so the program leaves at once.
sys.stdout.flush()
os._exit(0)

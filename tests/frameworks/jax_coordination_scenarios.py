"""What a JAX program gets back from the coordination service, call by call: the program the
differential test (jax_differential_test.py) runs twice, once against jaxlib's own service (JAX
process 0 hosting it) and once against Cohort's JAX port under cohort-run, to compare.

Each process writes one JSON line per call to $COHORT_SCENARIO_RECORD (ok and the value, or the
exception's type and text), in program order; the driver normalizes ids and timings and compares
the two runs process by process. The calls are ordered between processes only by the
coordination service itself (barriers and blocking gets), so both runs make the same calls in the
same order.

Modes (argv[1]):
  calls             key-value store, barriers, GetAliveTasks/live_devices and the preemption sync
                    point, then a clean shutdown.
  shutdown-missing  every process but the last calls jax.distributed.shutdown(); the last never
                    does, so the shutdown barrier times out.
"""

import json
import os
import signal
import sys
import threading
import time

import jax
from jax._src import distributed
from jax.experimental import multihost_utils

SYNC_TIMEOUT_MS = 60_000
# The barrier that times out: short enough to keep the test fast, long enough that on a loaded
# machine the processes that call it all arrive before it times out.
BARRIER_TIMEOUT_MS = 3_000
GET_TIMEOUT_MS = 500

_record = open(os.environ["COHORT_SCENARIO_RECORD"], "a", buffering=1)


def record(name, **fields):
    _record.write(json.dumps({"call": name, **fields}, sort_keys=True) + "\n")


def call(name, fn):
    """Runs fn() and records what it returned or raised; returns (ok, value)."""
    try:
        value = fn()
    except Exception as e:  # JaxRuntimeError and the Python-side ValueErrors alike.
        record(name, ok=False, error=type(e).__name__, message=str(e))
        return False, None
    record(name, ok=True, value=plain(value))
    return True, value


def plain(value):
    """A JSON-able form of a client call's result."""
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, dict):  # get_live_nodes: {process: incarnation}
        return {"live": sorted(value), "incarnations_nonzero": all(v != 0 for v in value.values())}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def client():
    return distributed.global_state.client


def sync(name):
    """Every process reaches this point before any goes on (a barrier nothing else uses)."""
    client().wait_at_barrier(f"sync/{name}", SYNC_TIMEOUT_MS)


def initialize(**kwargs):
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        initialization_timeout=120,
        **kwargs,
    )
    return jax.process_index(), jax.process_count()


def key_value(p):
    kv = client()
    own = f"kv/{p}"
    call("try_get missing", lambda: kv.key_value_try_get(f"{own}/missing"))
    call("try_get_bytes missing", lambda: kv.key_value_try_get_bytes(f"{own}/missing"))
    call("set", lambda: kv.key_value_set(f"{own}/a", "1"))
    call("try_get present", lambda: kv.key_value_try_get(f"{own}/a"))
    call("set existing", lambda: kv.key_value_set(f"{own}/a", "2"))
    call("set existing allow_overwrite", lambda: kv.key_value_set(f"{own}/a", "3", allow_overwrite=True))
    call("blocking_get present", lambda: kv.blocking_key_value_get(f"{own}/a", GET_TIMEOUT_MS))
    call("blocking_get missing times out", lambda: kv.blocking_key_value_get(f"{own}/missing", GET_TIMEOUT_MS))
    call("blocking_get_bytes missing times out",
         lambda: kv.blocking_key_value_get_bytes(f"{own}/missing", GET_TIMEOUT_MS))
    call("set_bytes", lambda: kv.key_value_set_bytes(f"{own}/bytes", b"\x00\xffcohort"))
    call("blocking_get_bytes present", lambda: kv.blocking_key_value_get_bytes(f"{own}/bytes", GET_TIMEOUT_MS))
    call("set dir/x", lambda: kv.key_value_set(f"{own}/dir/x", "x"))
    call("set dir/y/z", lambda: kv.key_value_set(f"{own}/dir/y/z", "z"))
    call("set dirx (a sibling, not in dir)", lambda: kv.key_value_set(f"{own}/dirx", "no"))
    call("dir_get present", lambda: kv.key_value_dir_get(f"{own}/dir"))
    call("dir_get trailing slash", lambda: kv.key_value_dir_get(f"{own}/dir/"))
    call("dir_get_bytes present", lambda: kv.key_value_dir_get_bytes(f"{own}/dir"))
    call("dir_get missing", lambda: kv.key_value_dir_get(f"{own}/nothing"))
    call("set unnormalized key", lambda: kv.key_value_set(f"/{own}//norm/", "n"))
    call("try_get normalized key", lambda: kv.key_value_try_get(f"{own}/norm"))
    call("set existing, spelled unnormalized", lambda: kv.key_value_set(f"//{own}/norm", "m"))
    call("try_get missing, spelled unnormalized", lambda: kv.key_value_try_get(f"/{own}//missing/"))
    call("increment missing", lambda: kv.key_value_increment(f"{own}/n", 5))
    call("increment present", lambda: kv.key_value_increment(f"{own}/n", -2))
    call("try_get incremented", lambda: kv.key_value_try_get(f"{own}/n"))
    call("set non-number", lambda: kv.key_value_set(f"{own}/text", "seven"))
    call("increment non-number", lambda: kv.key_value_increment(f"{own}/text", 1))
    call("delete missing", lambda: kv.key_value_delete(f"{own}/missing"))
    call("delete directory", lambda: kv.key_value_delete(f"{own}/dir"))
    call("dir_get deleted", lambda: kv.key_value_dir_get(f"{own}/dir"))
    call("try_get deleted child", lambda: kv.key_value_try_get(f"{own}/dir/x"))
    call("try_get sibling of deleted", lambda: kv.key_value_try_get(f"{own}/dirx"))
    call("delete present", lambda: kv.key_value_delete(f"{own}/a"))
    call("try_get deleted", lambda: kv.key_value_try_get(f"{own}/a"))
    call("try_get empty key", lambda: kv.key_value_try_get(""))
    # No size limit but gRPC's: a GPU job's topology value grows with the job.
    call("set a 2 MiB value", lambda: kv.key_value_set(f"{own}/big", "v" * (2 << 20)))
    call("try_get the 2 MiB value", lambda: len(kv.key_value_try_get(f"{own}/big")))
    call("set a 5 KiB key", lambda: kv.key_value_set(f"{own}/" + "k" * 5120, "long"))
    sync("kv-own")
    # A key another process sets: the blocking get waits for it.
    if p == 1:
        call("set shared", lambda: kv.key_value_set("kv/shared", "from 1"))
    call("blocking_get set by process 1", lambda: kv.blocking_key_value_get("kv/shared", SYNC_TIMEOUT_MS))
    call("set shared again (another process's key)", lambda: kv.key_value_set("kv/shared", f"from {p}"))
    sync("kv-shared")
    call("dir_get every process's keys", lambda: sorted(k for k, _ in kv.key_value_dir_get_bytes("kv")))
    call("dir_get of the root", lambda: sorted(k for k, _ in kv.key_value_dir_get_bytes("")))
    if p == 0:
        call("set an empty key", lambda: kv.key_value_set("", "empty"))
    call("blocking_get empty key", lambda: kv.blocking_key_value_get("", SYNC_TIMEOUT_MS))
    call("set an empty key again", lambda: kv.key_value_set("/", "again"))
    sync("empty-key")
    if p == 0:
        call("delete the empty key", lambda: kv.key_value_delete(""))
    sync("empty-key-deleted")
    call("try_get the deleted empty key", lambda: kv.key_value_try_get(""))


def barriers(p, n):
    kv = client()
    call("barrier all", lambda: kv.wait_at_barrier("b/all", SYNC_TIMEOUT_MS))
    call("barrier all, same id again", lambda: kv.wait_at_barrier("b/all", SYNC_TIMEOUT_MS))
    call("barrier all, every task named", lambda: kv.wait_at_barrier("b/named", SYNC_TIMEOUT_MS, list(range(n))))
    # Named in full by some, left empty by others: the same barrier.
    full = list(range(n)) if p % 2 == 0 else None
    call("barrier all, named by half", lambda: kv.wait_at_barrier("b/half-named", SYNC_TIMEOUT_MS, full))
    if p in (0, 1):
        call("barrier subset", lambda: kv.wait_at_barrier("b/subset", SYNC_TIMEOUT_MS, [0, 1]))
        call("barrier subset again", lambda: kv.wait_at_barrier("b/subset", SYNC_TIMEOUT_MS, [1, 0]))
    sync("subset")

    # A non-participant calls a subset barrier before its participants.
    if p == 2:
        call("barrier as a non-participant", lambda: kv.wait_at_barrier("b/np", SYNC_TIMEOUT_MS, [0, 1]))
        kv.key_value_set("b/np/called", "yes")
    if p in (0, 1):
        kv.blocking_key_value_get("b/np/called", SYNC_TIMEOUT_MS)
        call("barrier a non-participant called first", lambda: kv.wait_at_barrier("b/np", SYNC_TIMEOUT_MS, [0, 1]))
    sync("non-participant")

    # A participant that does not exist.
    if p == 0:
        call("barrier naming a task not in the job",
             lambda: kv.wait_at_barrier("b/unknown", BARRIER_TIMEOUT_MS, [0, n + 3]))
    # A barrier the last process misses: it times out for the others; the late one gets the same.
    if p < n - 1:
        call("barrier that times out", lambda: kv.wait_at_barrier("b/slow", BARRIER_TIMEOUT_MS))
        kv.key_value_set(f"b/slow/{p}", "timed out")
    else:
        for q in range(n - 1):
            kv.blocking_key_value_get(f"b/slow/{q}", SYNC_TIMEOUT_MS)
        call("barrier that timed out, called late", lambda: kv.wait_at_barrier("b/slow", BARRIER_TIMEOUT_MS))
    sync("timeout")
    call("barrier that timed out, called again by all", lambda: kv.wait_at_barrier("b/slow", SYNC_TIMEOUT_MS))
    sync("barriers")
    # jax's own users of the text: its checkpoint manager tells a timed-out barrier apart by it.
    if p < n - 1:
        call("async checkpoint whose barrier times out", lambda: async_checkpoint_without(n - 1))
    sync("checkpoint")


def async_checkpoint_without(missing):
    """jax's asynchronous checkpoint commit (array_serialization's AsyncManager, as
    GlobalAsyncCheckpointManager runs it once the arrays are written) on every process but
    `missing`: its barrier times out, and wait_until_finished() raises what jax makes of that. Also
    what jax's multi-process test harness makes of it (test_multiprocess: startswith)."""
    from jax.experimental.array_serialization import serialization
    manager = serialization.AsyncManager(timeout_secs=BARRIER_TIMEOUT_MS // 1000)
    manager._commit_futures = []  # Nothing to write: only the commit's barrier is under test.
    manager._start_async_commit(on_commit_callback=None)
    try:
        manager.wait_until_finished()
    except Exception as e:  # BarrierTimeoutError, when jax recognizes the timeout by its text.
        timed_out = str(e.args[0]).startswith("DEADLINE_EXCEEDED")
        return f"raised {type(e).__name__}; test_multiprocess sees a timeout: {timed_out}"
    return "raised nothing"


def live_nodes(p, n):
    kv = client()
    call("get_live_nodes all", lambda: kv.get_live_nodes(list(range(n))))
    if p in (0, 1):
        call("get_live_nodes subset", lambda: kv.get_live_nodes([0, 1]))
    if p == 2:
        call("get_live_nodes not naming the caller", lambda: kv.get_live_nodes([0, 1]))
    if p == 3:
        call("get_live_nodes of nobody", lambda: kv.get_live_nodes([]))
    sync("live-subset")
    # Like a barrier: process 0's call returns once process n-1, the other task it names, calls.
    if p == 0:
        kv.key_value_set("live/0-calling", "yes")
        call("get_live_nodes waits for the tasks it names", lambda: kv.get_live_nodes([0, n - 1]))
        call("the other task called before it returned",
             lambda: kv.key_value_try_get("live/other-calling"))
    if p == n - 1:
        kv.blocking_key_value_get("live/0-calling", SYNC_TIMEOUT_MS)
        time.sleep(1)  # Process 0 waits in its call meanwhile (the call under test).
        kv.key_value_set("live/other-calling", "yes")
        call("get_live_nodes waits for the tasks it names", lambda: kv.get_live_nodes([0, n - 1]))
    sync("live-wait")

    def live_devices():
        with multihost_utils.live_devices(jax.devices()) as devices:
            return sorted(d.process_index for d in devices)
    call("live_devices", live_devices)
    sync("live")


def preemption(p):
    call("preemption sync point before any notice", lambda: multihost_utils.reached_preemption_sync_point(0))
    sync("preemption-start")
    if p == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # JAX's own handler: the preemption notice.
    step = 1
    while not multihost_utils.reached_preemption_sync_point(step):
        step += 1
        time.sleep(0.01)
    # Only that every process agrees matters (the step itself depends on timing).
    kv = client()
    kv.key_value_set(f"preemption/step/{p}", str(step))
    steps = {kv.blocking_key_value_get(f"preemption/step/{q}", SYNC_TIMEOUT_MS)
             for q in range(jax.process_count())}
    record("preemption sync point reached at the same step on every process", ok=True, value=len(steps) == 1)


def main():
    mode = sys.argv[1]
    if mode == "calls":
        p, n = initialize()
        record("initialize", ok=True, value=[p, n])
        key_value(p)
        barriers(p, n)
        live_nodes(p, n)
        preemption(p)
        call("shutdown", jax.distributed.shutdown)
    elif mode == "shutdown-missing":
        p, n = initialize(shutdown_timeout_seconds=2)
        record("initialize", ok=True, value=[p, n])
        sync("start")
        if p < n - 1:
            call("shutdown with a task missing", jax.distributed.shutdown)
        else:
            # Never shuts down: waits until the service's failure ends the process.
            call("wait while the others shut down",
                 lambda: client().blocking_key_value_get("never/set", 30_000))
        _record.flush()
        os._exit(0)  # No atexit shutdown: what each process got is recorded.
    else:
        sys.exit(f"unknown mode {mode!r}; see the module's docstring")


if __name__ == "__main__":
    main()

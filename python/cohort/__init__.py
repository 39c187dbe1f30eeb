"""Cohort for Python programs: libdist's job, key-value store, barriers, preemption sync point,
progress and host collectives, named as jax.distributed and jax's coordination client name them.

    import cohort
    cohort.initialize()                       # rank, size, coordinator from the launcher
    comm = cohort.Communicator()
    for step in range(start, steps):
        ...
        comm.all_reduce(grads)                # in place, numpy or torch CPU
        cohort.report_progress(step)
        if cohort.reached_preemption_sync_point(step):
            save_checkpoint(step)
            raise SystemExit(cohort.PREEMPTED_EXIT_CODE)
    cohort.shutdown()

docs/python.md describes every function, the errors and how signals behave.
"""

import os

import numpy as np

from . import _cohort
from ._arrays import host_array
from ._errors import *  # noqa: F401,F403 (the exception classes)
from ._errors import Error

__version__ = "0.1.0"

#: The exit status of a process that followed another process's failure (fate sharing).
PEER_FAILURE_EXIT_CODE = _cohort.PEER_FAILURE_EXIT_CODE
#: The exit status for "checkpointed at the preemption sync point; restart me": cohort-operator
#: restarts the gang without counting a failure.
PREEMPTED_EXIT_CODE = _cohort.PREEMPTED_EXIT_CODE

PeerFailure = _cohort.PeerFailure

_default_communicator = None


# ---- The job --------------------------------------------------------------------------------


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               initialization_timeout=300, *, on_peer_failure=None):
    """Joins the job; returns once every process has joined.

    Every argument left as None comes from the launcher's environment (cohort-run, the
    operator's pods: COHORT_COORDINATOR_ADDRESS, COHORT_NUM_PROCESSES, COHORT_PROCESS_ID).
    initialization_timeout is in seconds, as in jax.distributed.initialize; left at its default,
    COHORT_INITIALIZATION_TIMEOUT (cohort-run --initialization-timeout) wins when it is set.

    on_peer_failure: when another process of the job fails, by default this process prints the
    failure and exits with PEER_FAILURE_EXIT_CODE (75) at once, so that nothing hangs on a dead
    peer. A callable here is called instead, once, on a libdist thread, with a PeerFailure
    (process_id, cause, message); the process then keeps running, and every collective in flight
    and later raises AbortedError naming the failed process.
    """
    if initialization_timeout == 300 and "COHORT_INITIALIZATION_TIMEOUT" in os.environ:
        initialization_timeout = None  # the default gives way to the launcher's setting
    if initialization_timeout is not None:
        initialization_timeout = float(initialization_timeout)
    if on_peer_failure is not None and not callable(on_peer_failure):
        raise TypeError("on_peer_failure must be a callable taking a cohort.PeerFailure, or None")
    _cohort.initialize(coordinator_address, num_processes, process_id, initialization_timeout,
                       on_peer_failure)


def shutdown():
    """Leaves the job: waits until every process reached shutdown (a barrier), then disconnects."""
    global _default_communicator
    _default_communicator = None
    _cohort.shutdown()


def is_initialized():
    return _cohort.is_initialized()


def process_index():
    """This process's rank in the job (0 before initialize)."""
    return _cohort.process_index()


def process_count():
    """The number of processes in the job (1 before initialize)."""
    return _cohort.process_count()


def local_process_index():
    """This process's index among the processes of its pod or host (its GPU on a GPU node)."""
    return _cohort.local_process_index()


def local_process_count():
    return _cohort.local_process_count()


def restart_attempt():
    """0 on the first run of the gang, one more after each gang restart."""
    return _cohort.restart_attempt()


def _positive_env(name):
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgumentError(
            f"{name}={value!r} is not a whole number; the operator sets it for an elastic job"
        ) from None
    if number < 1:
        raise InvalidArgumentError(f"{name}={value!r} must be at least 1")
    return number


def replica_groups():
    """An elastic job's data-parallel replica groups that this restart attempt runs
    (COHORT_REPLICA_GROUPS); None for a job that is not elastic. Read it at every start: a job
    that lost a node may run fewer than it wants (docs/operator.md, "Elastic replica groups")."""
    return _positive_env("COHORT_REPLICA_GROUPS")


def desired_replica_groups():
    """An elastic job's replica groups that spec.replicas asks for
    (COHORT_DESIRED_REPLICA_GROUPS); None for a job that is not elastic. With replica_groups() it
    keeps the global batch: each rank takes desired / running times its usual share."""
    return _positive_env("COHORT_DESIRED_REPLICA_GROUPS")


def gradient_accumulation_steps():
    """The micro-batches of its usual size each rank accumulates per step to keep the global batch
    while an elastic job runs fewer replica groups than it wants: ceil(desired / running); 1 for a
    job that is not elastic or runs them all."""
    running, desired = replica_groups(), desired_replica_groups()
    if running is None or desired is None:
        return 1
    return -(-desired // running)


# ---- Key-value store ------------------------------------------------------------------------


# Bound directly (python/src/cohort_module.cc): values are str or bytes, timeouts milliseconds
# (None: 5 minutes); a value that is not UTF-8 raises UnicodeDecodeError naming the _bytes
# variant.
key_value_set = _cohort.key_value_set
blocking_key_value_get = _cohort.blocking_key_value_get
blocking_key_value_get_bytes = _cohort.blocking_key_value_get_bytes
key_value_try_get = _cohort.key_value_try_get
key_value_try_get_bytes = _cohort.key_value_try_get_bytes
key_value_dir_get = _cohort.key_value_dir_get
key_value_dir_get_bytes = _cohort.key_value_dir_get_bytes
key_value_delete = _cohort.key_value_delete
key_value_increment = _cohort.key_value_increment


# ---- Barriers, preemption, progress ---------------------------------------------------------


def wait_at_barrier(barrier_id, timeout_in_ms, process_ids=None):
    """Waits until every process (or every one in process_ids) reached barrier_id."""
    ids = None if process_ids is None else [int(p) for p in process_ids]
    _cohort.wait_at_barrier(barrier_id, timeout_in_ms, ids)


def sync_global_devices(name):
    """A barrier of every process that also checks they passed the same name."""
    _cohort.sync_global_devices(name, None)


def reached_preemption_sync_point(step):
    """Call once per step on every process. True on exactly one step, the same everywhere,
    after any process got a preemption notice (SIGTERM): save a checkpoint there."""
    return _cohort.reached_preemption_sync_point(int(step))


def preemption_notice_received():
    """Whether any process of the job reported a preemption notice."""
    return _cohort.preemption_notice_received()


def report_progress(step):
    """Reports this process's training step (metrics, the no-progress alert). Never waits."""
    _cohort.report_progress(int(step))


def report_preemption():
    """Tells the job that this process will be preempted (what libdist's SIGTERM handler does)."""
    _cohort.report_preemption()


def report_error(message):
    """Fails the job with this message; every other process is told."""
    _cohort.report_error(str(message))


# ---- Collectives ----------------------------------------------------------------------------


_OPS = ("sum", "prod", "min", "max", "avg")


def _check_op(op):
    if op not in _OPS:
        raise ValueError(f"unknown op {op!r}: use one of {', '.join(map(repr, _OPS))}")
    return op


class Communicator:
    """The processes of the job (or of a split), for host collectives on numpy arrays and torch
    CPU tensors. Create it on every process in the same order.

    backend: "auto" or "host" (the package runs host collectives; "nccl" is refused until GPU
    arrays are supported). host_transport: "auto" (shared memory within a host, TCP between
    hosts), "shm" or "tcp". timeout_in_ms: each call's timeout (default 10 minutes, or
    COHORT_COLLECTIVE_TIMEOUT).
    """

    def __init__(self, backend="auto", host_transport="auto", timeout_in_ms=None, *, _impl=None):
        if _impl is not None:
            self._impl = _impl
            return
        if backend == "nccl":
            raise ValueError("backend='nccl': the cohort package runs host collectives on CPU "
                             "arrays; use backend='host' (or 'auto')")
        if backend not in ("auto", "host"):
            raise ValueError(f"unknown backend {backend!r}: use 'auto' or 'host'")
        self._impl = _cohort.Communicator.create("host", host_transport, timeout_in_ms)

    @property
    def rank(self):
        return self._impl.rank

    @property
    def size(self):
        return self._impl.size

    def __repr__(self):
        return f"cohort.Communicator(rank={self.rank}, size={self.size}: {self._impl.describe()})"

    def all_reduce(self, array, op="sum"):
        """Reduces array over every rank, in place; returns array."""
        a = host_array(array, "all_reduce")
        self._impl.all_reduce(a.buffer(), _check_op(op))
        return array

    def all_gather(self, array):
        """Every rank's array, stacked in rank order: shape (size, *array.shape), a new array."""
        a = host_array(array, "all_gather", writable=False)
        out = a.empty((self.size,) + tuple(a.shape))
        o = host_array(out, "all_gather")
        self._impl.all_gather(a.buffer(), o.buffer())
        return out

    def reduce_scatter(self, array, op="sum"):
        """Reduces array over every rank and returns this rank's block of the first axis (which
        size must divide): a new array of shape (array.shape[0] // size, *array.shape[1:])."""
        a = host_array(array, "reduce_scatter", writable=False)
        first = self._first_axis(a, "reduce_scatter")
        out = a.empty((first // self.size,) + tuple(a.shape[1:]))
        o = host_array(out, "reduce_scatter")
        self._impl.reduce_scatter(a.buffer(), o.buffer(), _check_op(op))
        return out

    def broadcast(self, array, root=0):
        """Root's array on every rank, in place; returns array."""
        a = host_array(array, "broadcast")
        self._impl.broadcast(a.buffer(), int(root))
        return array

    def all_to_all(self, array):
        """Block j of the first axis goes to rank j; returns a new array of the same shape whose
        block j came from rank j."""
        a = host_array(array, "all_to_all", writable=False)
        self._first_axis(a, "all_to_all")
        out = a.empty(tuple(a.shape))
        o = host_array(out, "all_to_all")
        self._impl.all_to_all(a.buffer(), o.buffer())
        return out

    def barrier(self):
        """Returns once every rank of the communicator called it."""
        self._impl.barrier()

    def split(self, color, key):
        """A new communicator of the ranks that passed the same color, ordered by key (then
        rank). Every rank calls it; a negative color takes part but gets None."""
        impl = self._impl.split(int(color), int(key))
        return None if impl is None else Communicator(_impl=impl)

    def abort(self, reason):
        """Fails every call in flight and every later call with AbortedError naming reason."""
        self._impl.abort(str(reason))

    def _first_axis(self, a, what):
        if len(a.shape) == 0 or a.shape[0] % self.size != 0:
            raise ValueError(f"{what}: the first axis of an array of shape {tuple(a.shape)} must "
                             f"be a multiple of the communicator's size {self.size}")
        return a.shape[0]


# ---- jax.experimental.multihost_utils, over a host communicator of every process -------------


def _communicator():
    global _default_communicator
    if _default_communicator is None:
        _default_communicator = Communicator()
    return _default_communicator


def _array_from(result, like):
    dtype, shape, data = result
    if dtype == "bfloat16":
        import ml_dtypes

        np_dtype = ml_dtypes.bfloat16
    else:
        np_dtype = np.dtype(dtype)
    out = np.frombuffer(data, dtype=np_dtype).reshape(shape)
    return out.astype(like) if out.dtype != like else out.copy()


# Carried as int64 and given back in their own dtype (exact both ways).
_WIDENED = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.uint8, np.uint16, np.uint32)}


def _host_copy(array, what):
    """A contiguous host array libdist can carry (it keeps its copy alive), and the dtype to give
    the result back in."""
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    like = arr.dtype
    if arr.dtype in _WIDENED:
        arr = arr.astype(np.int64)
    arr = np.ascontiguousarray(arr)
    return host_array(arr, what, writable=False), like


def broadcast_one_to_all(array, root=0):
    """Every process gets root's array (dtype and shape included), as a new numpy array."""
    a, like = _host_copy(array, "broadcast_one_to_all")
    out = _cohort.broadcast_one_to_all(_communicator()._impl, a.buffer(), list(a.shape), int(root))
    return _array_from(out, like)


def process_allgather(array, tiled=False):
    """Every process's array in process order: stacked (shape (count, *shape)), or concatenated
    along the first axis when tiled."""
    a, like = _host_copy(array, "process_allgather")
    out = _cohort.process_allgather(_communicator()._impl, a.buffer(), list(a.shape), bool(tiled))
    return _array_from(out, like)


def assert_equal(array, fail_message=""):
    """Fails (FailedPreconditionError) on every process whose array differs from process 0's."""
    a, _ = _host_copy(array, "assert_equal")
    _cohort.assert_equal(_communicator()._impl, a.buffer(), list(a.shape), str(fail_message))

"""One rank of a test job: `cohort-run -n N -- python worker.py CASE`.

Each case checks what a rank sees and prints "ok CASE rank R" at the end; an assertion error
exits non-zero with the reason. The tests in test_*.py run the jobs and read their output.
"""

import array
import os
import signal
import sys
import threading
import time

import numpy as np

import cohort

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def expect_raises(cls, fn, *args, contains=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except cls as e:
        if contains is not None:
            assert contains in str(e), f"{cls.__name__} message {str(e)!r} lacks {contains!r}"
        return e
    raise AssertionError(f"{fn.__name__} did not raise {cls.__name__}")


def interrupt_after(seconds):
    """Sends this process a real SIGINT after `seconds`; returns the time it was sent."""
    sent = {}

    def send():
        time.sleep(seconds)
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t, sent


def expect_interrupt_within(fn, limit_s=0.5):
    t, sent = interrupt_after(0.3)
    try:
        fn()
    except KeyboardInterrupt:
        t.join()
        late = time.monotonic() - sent["at"]
        assert late < limit_s, f"KeyboardInterrupt came {late:.2f} s after SIGINT"
        return late
    raise AssertionError(f"{fn} returned instead of raising KeyboardInterrupt")


@case
def job(r, n):
    assert cohort.is_initialized()
    assert cohort.process_count() == n
    assert 0 <= r < n
    assert cohort.local_process_count() == n, cohort.local_process_count()
    assert cohort.local_process_index() == r
    assert cohort.restart_attempt() == 0
    cohort.report_progress(1)
    assert cohort.reached_preemption_sync_point(1) is False
    assert cohort.preemption_notice_received() is False
    expect_raises(cohort.FailedPreconditionError, cohort.initialize)


@case
def key_value(r, n):
    cohort.key_value_set(f"kv/str/{r}", f"value {r}")
    cohort.key_value_set(f"kv/bytes/{r}", bytes([r, 0, 255]))
    for q in range(n):
        assert cohort.blocking_key_value_get(f"kv/str/{q}", 10_000) == f"value {q}"
        assert cohort.blocking_key_value_get_bytes(f"kv/bytes/{q}", 10_000) == bytes([q, 0, 255])
    cohort.wait_at_barrier("kv/read", 10_000)  # before anyone overwrites what others read
    e = expect_raises(cohort.AlreadyExistsError, cohort.key_value_set, f"kv/str/{r}", "again")
    assert isinstance(e, cohort.Error)
    cohort.key_value_set(f"kv/str/{r}", "again", allow_overwrite=True)
    assert cohort.key_value_try_get(f"kv/str/{r}") == "again"
    assert cohort.key_value_try_get("kv/never/set") is None
    e = expect_raises(cohort.DeadlineExceededError, cohort.blocking_key_value_get,
                      "kv/never/set", 200)
    assert isinstance(e, TimeoutError)
    if r == 0:
        cohort.key_value_set("kv/binary", b"\xff\xfe")
    expect_raises(UnicodeDecodeError, cohort.blocking_key_value_get, "kv/binary", 10_000,
                  contains="blocking_key_value_get_bytes")
    assert cohort.key_value_increment("kv/counter", r + 1) >= r + 1
    cohort.wait_at_barrier("kv/written", 10_000)
    assert cohort.key_value_try_get("kv/counter") == str(n * (n + 1) // 2)
    assert cohort.key_value_try_get_bytes("kv/binary") == b"\xff\xfe"
    assert cohort.key_value_try_get_bytes("kv/never/set") is None
    assert cohort.key_value_dir_get_bytes("kv/bytes")[r] == (f"kv/bytes/{r}", bytes([r, 0, 255]))
    listed = cohort.key_value_dir_get("kv/str")
    assert [k for k, _ in listed] == [f"kv/str/{q}" for q in range(n)], listed
    assert all(isinstance(v, str) for _, v in listed)
    cohort.wait_at_barrier("kv/listed", 10_000)
    if r == 0:
        cohort.key_value_delete("kv/str")
    cohort.wait_at_barrier("kv/deleted", 10_000)
    assert cohort.key_value_dir_get("kv/str") == []
    expect_raises(TypeError, cohort.key_value_set, "kv/bad", 3, contains="str or bytes, not int")
    expect_raises(TypeError, cohort.blocking_key_value_get, "kv/str/0", "soon",
                  contains="timeout_in_ms must be a number of milliseconds, not str")
    expect_raises(TypeError, cohort.blocking_key_value_get, "kv/str/0", True,
                  contains="not bool")
    expect_raises(ValueError, cohort.blocking_key_value_get, "kv/str/0", -1, contains=">= 0")
    expect_raises(TypeError, cohort.wait_at_barrier, "kv/bad", "soon", contains="timeout_in_ms")
    # bytearray and memoryview are stored as their bytes; the error class comes from the
    # bindings themselves, message and all.
    cohort.key_value_set(f"kv/buffers/{r}/a", bytearray(b"ab\x00"))
    cohort.key_value_set(f"kv/buffers/{r}/m", memoryview(b"xyz")[1:])
    assert cohort.key_value_try_get_bytes(f"kv/buffers/{r}/a") == b"ab\x00"
    assert cohort.key_value_try_get(f"kv/buffers/{r}/m") == "yz"
    e = expect_raises(cohort.AlreadyExistsError, cohort.key_value_set, f"kv/buffers/{r}/m", b"")
    assert type(e) is cohort.AlreadyExistsError and f"kv/buffers/{r}/m" in str(e), str(e)
    assert cohort.blocking_key_value_get(f"kv/buffers/{r}/m", None) == "yz"  # None: the default


@case
def barriers(r, n):
    cohort.wait_at_barrier("all", 10_000)
    if r < 2:
        cohort.wait_at_barrier("pair", 10_000, process_ids=[0, 1])
    cohort.sync_global_devices("synced")
    # A name that differs from process 0's fails there only, naming both.
    if r == 1:
        expect_raises(cohort.FailedPreconditionError, cohort.sync_global_devices, "other",
                      contains='"other"')
    else:
        cohort.sync_global_devices("same")
    # Process 2 never comes to this one: the others time out naming it.
    if r < 2:
        e = expect_raises(cohort.DeadlineExceededError, cohort.wait_at_barrier, "missing", 500)
        assert "2" in str(e), str(e)
    cohort.wait_at_barrier("after", 10_000)


REFERENCE_DTYPES = ["float32", "float64", "int32", "int64", "float16", "bfloat16"]


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def rank_values(q, count, dtype):
    # Small integers: every dtype sums them exactly, in any order.
    return (np.arange(count) % 5 + q + 1).astype(np_dtype(dtype))


@case
def collectives_numpy(r, n):
    comm = cohort.Communicator()
    assert (comm.rank, comm.size) == (r, n)
    for dtype in REFERENCE_DTYPES:
        for count in (1, 1000, 70_001):
            x = rank_values(r, count, dtype)
            address = x.__array_interface__["data"][0]
            out = comm.all_reduce(x)
            assert out is x and x.__array_interface__["data"][0] == address
            want = sum(rank_values(q, count, "float64") for q in range(n))
            np.testing.assert_array_equal(x.astype(np.float64), want, err_msg=f"{dtype} sum")
            y = rank_values(r, count, dtype)
            comm.all_reduce(y, op="max")
            np.testing.assert_array_equal(y.astype(np.float64),
                                          rank_values(n - 1, count, "float64"))
        g = comm.all_gather(rank_values(r, 6, dtype).reshape(2, 3))
        assert g.shape == (n, 2, 3) and g.dtype == np_dtype(dtype)
        for q in range(n):
            np.testing.assert_array_equal(g[q].reshape(-1).astype(np.float64),
                                          rank_values(q, 6, "float64"))
        b = rank_values(r, 10, dtype)
        comm.broadcast(b, root=n - 1)
        np.testing.assert_array_equal(b.astype(np.float64), rank_values(n - 1, 10, "float64"))
    # Row i of rank q's input is (q + 1) * (i + 1): rank r's block is rows 4r..4r+3, summed.
    rows = np.arange(1, n * 4 + 1, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    s = comm.reduce_scatter(rows * (r + 1))
    assert s.shape == (4, 2)
    np.testing.assert_array_equal(s, rows[4 * r:4 * r + 4] * (n * (n + 1) / 2))
    a = comm.all_to_all(np.arange(n * 2, dtype=np.int64) + 100 * r)
    np.testing.assert_array_equal(a, [100 * q + 2 * r + k for q in range(n) for k in range(2)])
    comm.barrier()
    avg = np.full(8, float(r), np.float64)
    comm.all_reduce(avg, op="avg")
    np.testing.assert_allclose(avg, (n - 1) / 2)
    # A 2-D view that is contiguous works in place, too.
    m = np.full((4, 4), r + 1, np.int32)[1:3]
    comm.all_reduce(m)
    assert (m == n * (n + 1) // 2).all()
    # A negative color takes part in the split and gets None.
    lone = comm.split(-1 if r == 0 else 0, r)
    assert (lone is None) == (r == 0), lone
    # Split: evens and odds.
    sub = comm.split(r % 2, r)
    assert sub.size == len(range(r % 2, n, 2)), sub.size
    v = np.array([r], np.int64)
    sub.all_reduce(v)
    assert v[0] == sum(range(r % 2, n, 2))


@case
def collectives_torch(r, n):
    try:
        import torch
    except ImportError:
        if os.environ.get("COHORT_TEST_REQUIRE_TORCH") == "1":
            raise
        print(f"skip collectives_torch rank {r}: torch is not installed")
        return
    comm = cohort.Communicator()
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16):
        t = (torch.arange(1000) % 5 + r + 1).to(dtype)
        ptr = t.data_ptr()
        out = comm.all_reduce(t)
        assert out is t and t.data_ptr() == ptr
        want = sum((torch.arange(1000) % 5 + q + 1).double() for q in range(n))
        assert torch.equal(t.double(), want), (dtype, t[:5])
        g = comm.all_gather(torch.full((3,), r, dtype=dtype))
        assert isinstance(g, torch.Tensor) and g.shape == (n, 3) and g.dtype == dtype
        assert torch.equal(g[:, 0].double(), torch.arange(n).double())
    expect_raises(TypeError, comm.all_reduce, torch.ones(4, 4).t(), contains="contiguous()")
    expect_raises(TypeError, comm.all_reduce, torch.ones(3, dtype=torch.int8), contains="int8")


@case
def array_errors(r, n):
    comm = cohort.Communicator()
    x = np.zeros(10, np.float32)
    expect_raises(TypeError, comm.all_reduce, x[::2], contains="np.ascontiguousarray")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect_raises(TypeError, comm.all_reduce, ro, contains="read-only")
    expect_raises(TypeError, comm.all_reduce, np.zeros(3, np.int8), contains="int8")
    expect_raises(TypeError, comm.all_reduce, [1.0, 2.0], contains="not an array")
    expect_raises(ValueError, comm.all_reduce, x, op="median")
    expect_raises(ValueError, comm.reduce_scatter, np.zeros(n + 1, np.float32),
                  contains="multiple of the communicator's size")
    expect_raises(ValueError, cohort.Communicator, backend="nccl", contains="backend='host'")
    # Nothing was run by the refused calls: the ranks still agree on what comes next.
    y = np.ones(3, np.float32)
    comm.all_reduce(y)
    assert (y == n).all()
    # A buffer-protocol object (array.array of floats) is used in place.
    buf = array.array("f", [1.0] * 4)
    assert comm.all_reduce(buf) is buf
    assert list(buf) == [float(n)] * 4, buf
    # Raw bytes have no element type: refused, naming the dtype.
    expect_raises(TypeError, comm.all_reduce, bytearray(8), contains="uint8")


@case
def multihost(r, n):
    b = cohort.broadcast_one_to_all(np.arange(3, dtype=np.int32) + r, root=0)
    assert b.dtype == np.int32, b.dtype
    np.testing.assert_array_equal(b, [0, 1, 2])
    flags = cohort.broadcast_one_to_all(np.array([r == 1, True]), root=1)
    assert flags.dtype == np.bool_ and flags.tolist() == [True, True], flags
    g = cohort.process_allgather(np.array([r, 10 * r], np.float32))
    assert g.shape == (n, 2) and g.dtype == np.float32
    np.testing.assert_array_equal(g, [[q, 10 * q] for q in range(n)])
    t = cohort.process_allgather(np.array([r, r], np.uint8), tiled=True)
    assert t.dtype == np.uint8, t.dtype
    np.testing.assert_array_equal(t, [q for q in range(n) for _ in range(2)])
    cohort.assert_equal(np.array([1, 2, 3]), "same everywhere")
    if r == 0:
        cohort.assert_equal(np.array([r]), "rank 0 never fails")
    else:
        e = expect_raises(cohort.FailedPreconditionError, cohort.assert_equal, np.array([r]),
                          "differs", contains="differs")
        assert "[0]" in str(e) or "{0}" in str(e), str(e)  # process 0's array is shown


@case
def interrupt(r, n):
    # Ctrl-C in every kind of blocking call: KeyboardInterrupt < 0.5 s. Rank 0 calls alone what
    # the others never call, so each call blocks until the signal.
    comm, other = cohort.Communicator(), cohort.Communicator()
    cohort.broadcast_one_to_all(np.zeros(1))  # the multihost utilities' communicator, on all
    if r == 0:
        expect_interrupt_within(lambda: cohort.blocking_key_value_get("never/set", 60_000))
        expect_interrupt_within(lambda: cohort.wait_at_barrier("only/me", 60_000, [0, 1]))
        expect_interrupt_within(lambda: comm.all_reduce(np.ones(4, np.float32)))
        # The interrupted call aborted the communicator: later calls say so.
        expect_raises(cohort.Error, comm.barrier, contains="KeyboardInterrupt")
        expect_interrupt_within(lambda: other.split(0, 0))
        expect_raises(cohort.AbortedError, other.barrier, contains="KeyboardInterrupt")
        expect_interrupt_within(lambda: cohort.process_allgather(np.ones(2)))
        expect_interrupt_within(cohort.Communicator)
        cohort.key_value_set("interrupt/done", "1")
    else:
        cohort.blocking_key_value_get("interrupt/done", 60_000)


@case
def peer_killed(r, n):
    failures = FAILURES
    comm = cohort.Communicator()
    comm.all_reduce(np.ones(4, np.float32))
    if r == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    e = expect_raises(cohort.AbortedError, comm.all_reduce, np.ones(1 << 16, np.float32))
    took = time.monotonic() - start
    assert f"rank {n - 1}" in str(e), str(e)
    assert took < 1.0, f"AbortedError after {took:.2f} s"
    assert FAILED.wait(5), "the peer-failure handler was not called"
    assert failures[0].process_id == n - 1, failures
    print(f"ok peer_killed rank {r}: AbortedError after {took:.3f} s: {e}")
    sys.stdout.flush()
    os._exit(0)


@case
def preemption(r, n):
    # Rank 1 gets SIGTERM (as from the kubelet) at step 5: every rank checkpoints at one step.
    for step in range(1000):
        if r == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        if cohort.reached_preemption_sync_point(step):
            assert cohort.preemption_notice_received()
            print(f"[checkpoint] rank {r}: checkpoint at step {step}")
            break
        cohort.report_progress(step)
        time.sleep(0.01)
    else:
        raise AssertionError("no preemption sync point in 1000 steps")


FAILURES = []
FAILED = threading.Event()


def on_peer_failure(failure):
    FAILURES.append(failure)
    FAILED.set()


def main():
    name = sys.argv[1]
    fn = CASES[name]
    if name == "peer_killed":
        cohort.initialize(on_peer_failure=on_peer_failure)
    else:
        cohort.initialize()
    r, n = cohort.process_index(), cohort.process_count()
    fn(r, n)
    cohort.shutdown()
    assert not cohort.is_initialized()
    print(f"ok {name} rank {r}")


if __name__ == "__main__":
    main()

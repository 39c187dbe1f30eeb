#pragma once

// libdist collectives: all-reduce, all-gather, reduce-scatter, broadcast, all-to-all and barrier
// across the processes of the job (or a subset), and jax.experimental.multihost_utils on top.
//
//   dist::Initialize();
//   auto comm = dist::Communicator::Create();          // every process, same order
//   if (!comm.ok()) { /* the message says why, e.g. which backend is unavailable */ }
//   (*comm)->AllReduce(grads.data(), grads.data(), grads.size(), dist::DataType::kFloat32,
//                      dist::ReduceOp::kAvg);
//
// Backends: NCCL for GPU buffers when NCCL and a GPU are present (loaded at run time), and the
// host backend for host memory: shared memory between processes on one host, TCP between hosts.
// Results are bitwise identical on every rank (a fixed reduction order).
//
// Every call is collective: every rank of the communicator calls the same operations in the
// same order with the same op, data type, count and root. Each comes twice: blocking
// (AllReduce: returns when this rank's part is done, for at most its timeout) and asynchronous
// (AllReduceAsync: returns a Work at once; see Work below). Errors (absl::Status, nothing
// throws):
//   InvalidArgument     the caller's mistake (null buffer, bad root, unknown option value);
//   FailedPrecondition  not initialized; the communicator was closed or has failed before; the
//                       ranks called different operations (the message names both); a CUDA
//                       stream that is being captured into a graph;
//   DeadlineExceeded    the call's timeout passed (the message names the ranks it waited for);
//   Aborted             a process of the job failed (the message names it) or Abort() was called;
//   Unavailable         the backend asked for cannot run here (the message says why);
//   Internal            a transport error (a peer's connection broke).
// After any error but InvalidArgument the communicator is broken: every later call returns
// FailedPrecondition with the first error, and a timeout or mismatch also fails the job (cause
// kCollectiveTimeout), since the ranks no longer agree on what comes next.
//
// A communicator may be used by one thread at a time (calls are not reentrant); Abort(), the
// destructor and the Work handles may be used from any thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dist {

enum class DataType {
  kFloat32,
  kFloat64,
  kInt32,
  kInt64,
  kBFloat16,  // Reductions accumulate in float32 and round once.
  kFloat16,   // IEEE half; reductions accumulate in float32 and round once.
};
// "float32", "bfloat16", ... and the size of one element in bytes.
const char* DataTypeName(DataType type);
size_t DataTypeSize(DataType type);

enum class ReduceOp {
  kSum,
  kProd,
  kMin,
  kMax,
  kAvg,  // Sum divided by the number of ranks; integer types truncate toward zero.
};
const char* ReduceOpName(ReduceOp op);

enum class Backend {
  kAuto,  // NCCL when NCCL and a GPU are usable here, else the host backend.
  kNccl,  // Device buffers through NCCL; Unavailable (saying why) where it cannot run.
  kHost,  // Host buffers: shared memory and TCP.
};
const char* BackendName(Backend backend);

enum class HostTransport {
  kAuto,  // Shared memory when every rank runs on this host (same kernel and network
          // namespace), else TCP between every pair.
  kShm,   // Shared memory; Unavailable when a rank runs elsewhere.
  kTcp,   // TCP between every pair, also between ranks on one host.
};
const char* HostTransportName(HostTransport transport);

// The default timeout of a collective call.
inline constexpr absl::Duration kDefaultCollectiveTimeout = absl::Minutes(10);

// Every unset field falls back to the environment (name in brackets), then to the default.
struct CommunicatorOptions {
  std::optional<Backend> backend;               // [COHORT_COLLECTIVES] auto|nccl|host
  std::optional<HostTransport> host_transport;  // [COHORT_HOST_TRANSPORT] auto|shm|tcp
  std::optional<absl::Duration> timeout;        // [COHORT_COLLECTIVE_TIMEOUT] 10 min
  // How long creation may wait for the other ranks (they create theirs at different times).
  std::optional<absl::Duration> init_timeout;  // [COHORT_INITIALIZATION_TIMEOUT] 5 min
  // The address other hosts reach this process's TCP transport at; default: the address this
  // host uses to reach the coordinator (127.0.0.1 when the coordinator is on loopback).
  std::optional<std::string> tcp_host;  // [COHORT_COLLECTIVES_HOST]
  // The CUDA device of the NCCL backend (default: dist::LocalProcessIndex() modulo the devices
  // the process sees: one GPU per process of a multi-GPU pod).
  std::optional<int> cuda_device;
  // Shown in messages and in the flight recorder ("world" for Create(), "<parent>.<color>" for
  // a split).
  std::string name;
};

struct CallOptions {
  // Default: the communicator's. Counted from the call (for an asynchronous one: from the
  // enqueue), whether or not anyone waits.
  std::optional<absl::Duration> timeout;
  // NCCL backend: the cudaStream_t to run on (nullptr: the communicator's own stream). A
  // blocking call returns when the operation completed on the stream; an asynchronous one as
  // soon as it is enqueued.
  void* cuda_stream = nullptr;
};

namespace internal {
class CommunicatorImpl;
struct WorkState;
struct WorkAccess;
}  // namespace internal

// One asynchronous collective call (AllReduceAsync, ...): a copyable handle to its state.
//
// Host backend: the calls of a communicator run in order on one worker thread of its own, so
// the program computes while they run. NCCL backend: the call is enqueued on its stream
// (CallOptions::cuda_stream, else the communicator's) and the host returns at once; the device
// runs it in stream order.
//
// Buffers: send and recv must stay valid and unchanged (recv: untouched) until the Work is done
// (Test() true, Wait() returned) or, on the NCCL backend, until later work on the stream that
// StreamWait() ordered after it. Errors: those found when enqueueing (InvalidArgument, a broken
// communicator, a capturing stream) come from the *Async call; the others (timeout, a peer's
// failure, a transport error) from Test/Wait, and, when no one waits, the job still learns of
// them: a timeout fails the job with the watchdog's sentence, exactly as for a blocking call. A
// peer's failure ends every call in flight with Aborted naming it. Destroying the communicator
// with calls in flight aborts them (Aborted).
class Work {
 public:
  Work() = default;  // No call: done, OK.

  // The call's number on its communicator: "all_reduce #12" in messages and the watchdog.
  uint64_t sequence() const;
  // Whether the call ended (succeeded or failed). Never blocks.
  bool Test();
  // Waits on the host until the call ended and returns its status. With a `timeout`, waits at
  // most that long: DeadlineExceeded then says the call is still in flight (it keeps running,
  // and its own timeout still applies).
  absl::Status Wait(std::optional<absl::Duration> timeout = std::nullopt);
  // NCCL: makes `cuda_stream` (a cudaStream_t) wait on the device for the call's end, without
  // blocking the host (cudaStreamWaitEvent). Host backend: the same as Wait(). Returns the
  // call's error when it already ended with one.
  absl::Status StreamWait(void* cuda_stream);

 private:
  friend struct internal::WorkAccess;
  explicit Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::WorkState> state_;
};

// A group of ranks that run collectives together. Create() is collective over the whole job,
// Split() over the parent's ranks: every rank calls it, in the same order relative to its other
// collective calls. Destroying a communicator never hangs: a communicator that is mid-call on
// another thread, has asynchronous calls in flight, or whose job failed, is aborted.
class Communicator {
 public:
  // Every process of the initialized job, rank = dist::ProcessIndex().
  // FailedPrecondition when dist::Initialize() has not run; Unavailable when the backend or
  // transport asked for cannot run here (the message says why); DeadlineExceeded naming the
  // processes that did not create theirs within the init timeout; Aborted when the job failed.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      const CommunicatorOptions& options = {});

  // Collective over this communicator: ranks with the same `color` form a new communicator,
  // ordered by (`key`, rank). A negative color takes part in the split but gets no communicator
  // (returns nullptr). The child inherits the parent's options.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // The job's process index of each rank of this communicator.
  const std::vector<int>& processes() const;
  Backend backend() const;  // kNccl or kHost, never kAuto.
  // e.g. "world: 4 ranks, host backend over shared memory".
  std::string Describe() const;

  // recv[i] = op over ranks of send[i], for i < count. send == recv is in place.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         const CallOptions& options = {});
  absl::StatusOr<Work> AllReduceAsync(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, const CallOptions& options = {});
  // recv (size() * send_count elements) = every rank's send, in rank order.
  absl::Status AllGather(const void* send, void* recv, size_t send_count, DataType type,
                         const CallOptions& options = {});
  absl::StatusOr<Work> AllGatherAsync(const void* send, void* recv, size_t send_count,
                                      DataType type, const CallOptions& options = {});
  // send holds size() blocks of recv_count elements; rank r receives block r reduced over
  // ranks.
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, const CallOptions& options = {});
  absl::StatusOr<Work> ReduceScatterAsync(const void* send, void* recv, size_t recv_count,
                                          DataType type, ReduceOp op,
                                          const CallOptions& options = {});
  // recv = root's send on every rank (send is read on the root only; it may equal recv).
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root,
                         const CallOptions& options = {});
  absl::StatusOr<Work> BroadcastAsync(const void* send, void* recv, size_t count, DataType type,
                                      int root, const CallOptions& options = {});
  // send holds size() blocks of count elements; block j goes to rank j, and recv's block j
  // comes from rank j. send and recv must not overlap.
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType type,
                        const CallOptions& options = {});
  absl::StatusOr<Work> AllToAllAsync(const void* send, void* recv, size_t count, DataType type,
                                     const CallOptions& options = {});
  absl::Status Barrier(const CallOptions& options = {});
  absl::StatusOr<Work> BarrierAsync(const CallOptions& options = {});

  // Fails every pending and later call of this communicator on this process with Aborted
  // (`reason` in the message). Thread-safe; returns without waiting for the calls to return.
  void Abort(absl::string_view reason);

 private:
  explicit Communicator(std::unique_ptr<internal::CommunicatorImpl> impl);
  std::unique_ptr<internal::CommunicatorImpl> impl_;
};

// ---- Multihost utilities (jax.experimental.multihost_utils) ------------------------------------

// A host array: a data type, a shape (empty for a scalar) and the elements in row-major order.
struct HostArray {
  DataType type = DataType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // product(shape) * DataTypeSize(type) bytes.

  size_t num_elements() const;
  template <typename T>
  static HostArray Of(DataType type, std::vector<int64_t> shape, const std::vector<T>& values);
};

// Every rank gets `root`'s array (type and shape included). A barrier, like jax's
// broadcast_one_to_all, but with an explicit source instead of jax's is_source flags.
// InvalidArgument when root is out of range.
absl::StatusOr<HostArray> BroadcastOneToAll(Communicator& comm, const HostArray& array,
                                            int root = 0, const CallOptions& options = {});

// Every rank's array, in rank order: shape (size(), *shape), or with `tiled` (size() * d0, ...)
// (a scalar is always stacked). Every rank must pass the same type and shape: InvalidArgument
// naming the ranks that differ otherwise (on every rank).
absl::StatusOr<HostArray> ProcessAllgather(Communicator& comm, const HostArray& array,
                                           bool tiled = false, const CallOptions& options = {});

// Checks that `array` equals rank 0's (type, shape and bytes). As in jax, only the ranks that
// differ fail: FailedPrecondition "<fail_message> Expected: <rank 0's>; got: <this rank's>."
// Rank 0 never fails for a difference.
absl::Status AssertEqual(Communicator& comm, const HostArray& array,
                         absl::string_view fail_message = "", const CallOptions& options = {});

template <typename T>
HostArray HostArray::Of(DataType type, std::vector<int64_t> shape, const std::vector<T>& values) {
  HostArray a;
  a.type = type;
  a.shape = std::move(shape);
  a.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) __builtin_memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

}  // namespace dist

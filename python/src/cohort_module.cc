// cohort._cohort: the bindings of libdist (dist/distributed.h, dist/collectives.h) behind the
// Python package `cohort` (python/cohort/__init__.py holds the public names and checks arrays).
//
// Errors: every non-OK absl::Status becomes cohort._cohort.StatusError(code, message); the
// package turns it into cohort.<Code>Error. Blocking calls release the GIL and look for signals
// (Ctrl-C) every kSignalSlice, so a KeyboardInterrupt is raised within about that long:
//   - key-value gets wait in slices on the caller's thread;
//   - collectives run asynchronously and are waited for in slices; on an interrupt the
//     communicator is aborted first (the call may be half done on some ranks, and the array must
//     not be written after the exception), then KeyboardInterrupt is raised;
//   - initialize, barriers and shutdown cannot be cut into slices: they run on a helper thread
//     while the caller waits in slices; a barrier is cancelled (CancelBarrier) on an interrupt.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

namespace nb = nanobind;

namespace {

constexpr absl::Duration kSignalSlice = absl::Milliseconds(100);

nb::object g_status_error;  // cohort._cohort.StatusError, made at import
// Set by an atexit hook: from then on libdist's threads no longer call into Python.
std::atomic<bool> g_exiting{false};

[[noreturn]] void Raise(const absl::Status& status) {
  nb::object error = g_status_error(static_cast<int>(status.code()),
                                    absl::StatusCodeToString(status.code()),
                                    std::string(status.message()));
  PyErr_SetObject(g_status_error.ptr(), error.ptr());
  throw nb::python_error();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Value(absl::StatusOr<T> result) {
  if (!result.ok()) Raise(result.status());
  return *std::move(result);
}

// Raises KeyboardInterrupt (or whatever a Python signal handler raised). Needs the GIL.
void CheckSignals() {
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

absl::Duration Millis(std::optional<double> ms, absl::Duration fallback) {
  if (!ms.has_value()) return fallback;
  if (*ms < 0) {
    throw nb::value_error("a timeout must be >= 0 milliseconds (None: the default)");
  }
  return absl::Milliseconds(*ms);
}

// Calls `fn` without the GIL (libdist's calls wait on the network or on other ranks) and returns
// its result; the caller raises from it once the GIL is back.
template <typename F>
auto WithoutGil(F fn) {
  nb::gil_scoped_release release;
  return fn();
}

// Runs `fn` on a helper thread and waits for it without the GIL, looking for signals between
// slices. On an interrupt, `cancel` (if any) is called and the helper is waited for when that
// makes it end; without `cancel` the helper is left to finish on its own.
absl::Status RunInterruptible(std::function<absl::Status()> fn,
                              std::function<void()> cancel = nullptr) {
  struct Shared {
    absl::Notification done;
    absl::Status status;
  };
  auto shared = std::make_shared<Shared>();
  std::thread helper([shared, fn = std::move(fn)] {
    shared->status = fn();
    shared->done.Notify();
  });
  while (true) {
    bool done;
    {
      nb::gil_scoped_release release;
      done = shared->done.WaitForNotificationWithTimeout(kSignalSlice);
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) {
      if (cancel) {
        nb::gil_scoped_release release;  // cancel() is an RPC; the helper may need the GIL
        cancel();
        helper.join();
      } else {
        helper.detach();
      }
      throw nb::python_error();
    }
  }
  helper.join();
  return shared->status;
}

dist::DataType ParseType(const std::string& name) {
  if (name == "float32") return dist::DataType::kFloat32;
  if (name == "float64") return dist::DataType::kFloat64;
  if (name == "int32") return dist::DataType::kInt32;
  if (name == "int64") return dist::DataType::kInt64;
  if (name == "bfloat16") return dist::DataType::kBFloat16;
  if (name == "float16") return dist::DataType::kFloat16;
  throw nb::type_error(("unsupported dtype " + name +
                        ": use float32, float64, int32, int64, float16 or bfloat16")
                           .c_str());
}

dist::ReduceOp ParseOp(const std::string& name) {
  if (name == "sum") return dist::ReduceOp::kSum;
  if (name == "prod") return dist::ReduceOp::kProd;
  if (name == "min") return dist::ReduceOp::kMin;
  if (name == "max") return dist::ReduceOp::kMax;
  if (name == "avg" || name == "mean") return dist::ReduceOp::kAvg;
  throw nb::value_error(
      ("unknown op '" + name + "': use 'sum', 'prod', 'min', 'max' or 'avg'").c_str());
}

// One host buffer from the package: its address (the array stays referenced by the caller for
// the whole call), element count and dtype name.
struct Buffer {
  uintptr_t address;
  size_t count;
  std::string dtype;
  void* data() const { return reinterpret_cast<void*>(address); }
};

class PyCommunicator {
 public:
  explicit PyCommunicator(std::unique_ptr<dist::Communicator> comm) : comm_(std::move(comm)) {}

  static std::unique_ptr<PyCommunicator> Create(const std::string& backend,
                                                const std::string& host_transport,
                                                std::optional<double> timeout_in_ms) {
    dist::CommunicatorOptions options;
    if (backend == "auto") {
      options.backend = dist::Backend::kAuto;
    } else if (backend == "host") {
      options.backend = dist::Backend::kHost;
    } else if (backend == "nccl") {
      options.backend = dist::Backend::kNccl;
    } else {
      throw nb::value_error(
          ("unknown backend '" + backend + "': use 'auto', 'host' or 'nccl'").c_str());
    }
    if (host_transport == "auto") {
      options.host_transport = dist::HostTransport::kAuto;
    } else if (host_transport == "shm") {
      options.host_transport = dist::HostTransport::kShm;
    } else if (host_transport == "tcp") {
      options.host_transport = dist::HostTransport::kTcp;
    } else {
      throw nb::value_error(("unknown host_transport '" + host_transport +
                             "': use 'auto', 'shm' or 'tcp'")
                                .c_str());
    }
    if (timeout_in_ms.has_value()) options.timeout = Millis(timeout_in_ms, absl::ZeroDuration());
    // Creation waits for the other ranks, on this thread (the one that will use it).
    return std::make_unique<PyCommunicator>(
        Value(WithoutGil([&] { return dist::Communicator::Create(options); })));
  }

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  std::string describe() const { return comm_->Describe(); }

  void AllReduce(const Buffer& b, const std::string& op) {
    const dist::DataType type = ParseType(b.dtype);
    const dist::ReduceOp reduce = ParseOp(op);
    Wait(comm_->AllReduceAsync(b.data(), b.data(), b.count, type, reduce));
  }
  void AllGather(const Buffer& send, const Buffer& recv) {
    Wait(comm_->AllGatherAsync(send.data(), recv.data(), send.count, ParseType(send.dtype)));
  }
  void ReduceScatter(const Buffer& send, const Buffer& recv, const std::string& op) {
    const dist::DataType type = ParseType(send.dtype);
    const dist::ReduceOp reduce = ParseOp(op);
    Wait(comm_->ReduceScatterAsync(send.data(), recv.data(), recv.count, type, reduce));
  }
  void Broadcast(const Buffer& b, int root) {
    Wait(comm_->BroadcastAsync(b.data(), b.data(), b.count, ParseType(b.dtype), root));
  }
  void AllToAll(const Buffer& send, const Buffer& recv) {
    const size_t per_rank = send.count / static_cast<size_t>(comm_->size());
    Wait(comm_->AllToAllAsync(send.data(), recv.data(), per_rank, ParseType(send.dtype)));
  }
  void Barrier() { Wait(comm_->BarrierAsync()); }

  // None (nullptr) for a negative color: the rank took part in the split but is in no group.
  std::unique_ptr<PyCommunicator> Split(int color, int key) {
    std::unique_ptr<dist::Communicator> child =
        Value(WithoutGil([&] { return comm_->Split(color, key); }));
    if (child == nullptr) return nullptr;
    return std::make_unique<PyCommunicator>(std::move(child));
  }

  void Abort(const std::string& reason) { comm_->Abort(reason); }

  dist::Communicator& comm() { return *comm_; }

 private:
  // Waits for an asynchronous call in slices, without the GIL; on a signal the communicator is
  // aborted and the call waited for, so the array is no longer touched when the exception flies.
  void Wait(absl::StatusOr<dist::Work> enqueued) {
    if (!enqueued.ok()) Raise(enqueued.status());
    dist::Work work = *std::move(enqueued);
    while (true) {
      absl::Status status;
      bool done;
      {
        nb::gil_scoped_release release;
        status = work.Wait(kSignalSlice);
        done = !absl::IsDeadlineExceeded(status) || work.Test();
        if (done && absl::IsDeadlineExceeded(status)) status = work.Wait();
      }
      if (done) {
        Check(status);
        return;
      }
      if (PyErr_CheckSignals() != 0) {
        {
          nb::gil_scoped_release release;
          comm_->Abort("interrupted by a signal in Python (KeyboardInterrupt)");
          (void)work.Wait();
        }
        throw nb::python_error();
      }
    }
  }

  std::unique_ptr<dist::Communicator> comm_;
};

dist::HostArray ToHostArray(const Buffer& b, const std::vector<int64_t>& shape) {
  dist::HostArray a;
  a.type = ParseType(b.dtype);
  a.shape = shape;
  const size_t bytes = b.count * dist::DataTypeSize(a.type);
  const auto* p = static_cast<const uint8_t*>(b.data());
  a.bytes.assign(p, p + bytes);
  return a;
}

nb::tuple FromHostArray(const dist::HostArray& a) {
  return nb::make_tuple(std::string(dist::DataTypeName(a.type)), a.shape,
                        nb::bytes(reinterpret_cast<const char*>(a.bytes.data()), a.bytes.size()));
}

}  // namespace

NB_MODULE(_cohort, m) {
  m.doc() = "libdist bindings behind the cohort package (use `import cohort`)";
  // The peer-failure handler is kept until the process ends (libdist may call it until then),
  // and with it what it references: not a leak to warn about at exit.
  nb::set_leak_warnings(false);

  // The error type the package maps to cohort.<Code>Error: args (code, code_name, message).
  g_status_error = nb::borrow(PyErr_NewException("cohort._cohort.StatusError", nullptr, nullptr));
  m.attr("StatusError") = g_status_error;
  m.attr("PEER_FAILURE_EXIT_CODE") = dist::kPeerFailureExitCode;
  nb::module_::import_("atexit").attr("register")(
      nb::cpp_function([] { g_exiting.store(true); }));
  m.attr("PREEMPTED_EXIT_CODE") = dist::kPreemptedExitCode;

  // The address of a C-contiguous object's memory through the buffer protocol (much cheaper
  // than numpy's .ctypes.data), or -1 when the object does not export it (a dtype numpy cannot
  // put in a buffer, such as ml_dtypes' bfloat16).
  m.def("address_of", [](nb::handle obj) -> int64_t {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      return -1;
    }
    const auto address = reinterpret_cast<int64_t>(view.buf);
    PyBuffer_Release(&view);
    return address;
  });

  nb::class_<Buffer>(m, "Buffer")
      .def(nb::init<uintptr_t, size_t, std::string>(), nb::arg("address"), nb::arg("count"),
           nb::arg("dtype"));

  nb::class_<dist::PeerFailure>(m, "PeerFailure")
      .def_ro("process_id", &dist::PeerFailure::process_id)
      .def_prop_ro("cause",
                   [](const dist::PeerFailure& f) { return dist::FailureCauseName(f.cause); })
      .def_ro("message", &dist::PeerFailure::message)
      .def("__repr__", [](const dist::PeerFailure& f) {
        return "cohort.PeerFailure(process_id=" + std::to_string(f.process_id) + ", cause=" +
               dist::FailureCauseName(f.cause) + ", message=" + f.message + ")";
      });

  m.def(
      "initialize",
      [](std::optional<std::string> coordinator_address, std::optional<int> num_processes,
         std::optional<int> process_id, std::optional<double> initialization_timeout_s,
         nb::object on_peer_failure) {
        dist::Options options;
        if (!on_peer_failure.is_none()) {
          // Kept for the life of the process: libdist may call it until exit.
          auto* handler = new nb::object(on_peer_failure);
          options.on_peer_failure = [handler](const dist::PeerFailure& failure) {
            if (g_exiting.load()) return;
            nb::gil_scoped_acquire gil;
            try {
              (*handler)(failure);
            } catch (nb::python_error& e) {
              e.restore();
              PyErr_WriteUnraisable(handler->ptr());
            }
          };
        }
        options.coordinator_address = std::move(coordinator_address);
        options.num_processes = num_processes;
        options.process_id = process_id;
        if (initialization_timeout_s.has_value()) {
          if (*initialization_timeout_s <= 0) {
            throw nb::value_error("initialization_timeout must be > 0 seconds");
          }
          options.initialization_timeout = absl::Seconds(*initialization_timeout_s);
        }
        Check(RunInterruptible([options] { return dist::Initialize(options); }));
      },
      nb::arg("coordinator_address").none(), nb::arg("num_processes").none(),
      nb::arg("process_id").none(), nb::arg("initialization_timeout_s").none(),
      nb::arg("on_peer_failure").none());
  m.def("shutdown", [] { Check(RunInterruptible([] { return dist::Shutdown(); })); });
  m.def("is_initialized", &dist::IsInitialized);
  m.def("process_index", &dist::ProcessIndex);
  m.def("process_count", &dist::ProcessCount);
  m.def("local_process_index", &dist::LocalProcessIndex);
  m.def("local_process_count", &dist::LocalProcessCount);
  m.def("restart_attempt", &dist::RestartAttempt);

  m.def(
      "key_value_set",
      [](const std::string& key, nb::bytes value, bool allow_overwrite) {
        std::string v(value.c_str(), value.size());
        Check(WithoutGil([&] { return dist::KeyValueSet(key, v, allow_overwrite); }));
      },
      nb::arg("key"), nb::arg("value"), nb::arg("allow_overwrite"));
  m.def(
      "blocking_key_value_get",
      [](const std::string& key, std::optional<double> timeout_in_ms) {
        const absl::Duration timeout = Millis(timeout_in_ms, dist::kDefaultTimeout);
        const absl::Time deadline = absl::Now() + timeout;
        // A key that is set (or soon is) comes back from one short call on this thread; a longer
        // wait is one call with the whole timeout on a helper thread, so that Ctrl-C is seen
        // within a slice without polling the coordinator every slice.
        absl::StatusOr<std::string> value =
            WithoutGil([&] { return dist::KeyValueGet(key, std::min(timeout, kSignalSlice)); });
        if (absl::IsDeadlineExceeded(value.status()) && absl::Now() < deadline) {
          auto result = std::make_shared<absl::StatusOr<std::string>>();
          Check(RunInterruptible([key, deadline, result] {
            *result = dist::KeyValueGet(key, std::max(absl::ZeroDuration(), deadline - absl::Now()));
            return result->status();
          }));
          value = *result;
        }
        if (!value.ok()) Raise(value.status());
        return nb::bytes(value->data(), value->size());
      },
      nb::arg("key"), nb::arg("timeout_in_ms").none());
  m.def(
      "key_value_try_get",
      [](const std::string& key) -> std::optional<nb::bytes> {
        absl::StatusOr<std::string> value = WithoutGil([&] { return dist::KeyValueTryGet(key); });
        if (absl::IsNotFound(value.status())) return std::nullopt;
        if (!value.ok()) Raise(value.status());
        return nb::bytes(value->data(), value->size());
      },
      nb::arg("key"));
  m.def(
      "key_value_dir_get",
      [](const std::string& prefix) {
        nb::list out;
        for (const auto& [k, v] : Value(WithoutGil([&] { return dist::KeyValueDir(prefix); }))) {
          out.append(nb::make_tuple(k, nb::bytes(v.data(), v.size())));
        }
        return out;
      },
      nb::arg("prefix"));
  m.def(
      "key_value_delete",
      [](const std::string& key) {
        Check(WithoutGil([&] { return dist::KeyValueDelete(key); }));
      },
      nb::arg("key"));
  m.def(
      "key_value_increment",
      [](const std::string& key, int64_t amount) {
        return Value(WithoutGil([&] { return dist::KeyValueIncrement(key, amount); }));
      },
      nb::arg("key"), nb::arg("amount"));

  m.def(
      "wait_at_barrier",
      [](const std::string& barrier_id, std::optional<double> timeout_in_ms,
         std::optional<std::vector<int>> process_ids) {
        const absl::Duration timeout = Millis(timeout_in_ms, dist::kDefaultTimeout);
        std::vector<int> ids = process_ids.value_or(std::vector<int>{});
        Check(RunInterruptible(
            [barrier_id, timeout, ids] { return dist::Barrier(barrier_id, timeout, ids); },
            [barrier_id] { (void)dist::CancelBarrier(barrier_id); }));
      },
      nb::arg("barrier_id"), nb::arg("timeout_in_ms").none(), nb::arg("process_ids").none());
  m.def(
      "sync_global_devices",
      [](const std::string& name, std::optional<double> timeout_in_ms) {
        const absl::Duration timeout = Millis(timeout_in_ms, dist::kDefaultTimeout);
        // libdist's one barrier id for every SyncGlobalDevices call (distributed.cc).
        Check(RunInterruptible([name, timeout] { return dist::SyncGlobalDevices(name, timeout); },
                               [] { (void)dist::CancelBarrier("sync_global_devices"); }));
      },
      nb::arg("name"), nb::arg("timeout_in_ms").none());

  m.def(
      "reached_preemption_sync_point",
      [](int64_t step) {
        return Value(WithoutGil([&] { return dist::ReachedPreemptionSyncPoint(step); }));
      },
      nb::arg("step"));
  m.def("preemption_notice_received", &dist::PreemptionNoticeReceived);
  m.def(
      "report_progress", [](int64_t step) { Check(dist::ReportProgress(step)); }, nb::arg("step"));
  m.def("report_preemption", [] { Check(WithoutGil([] { return dist::ReportPreemption(); })); });
  m.def(
      "report_error",
      [](const std::string& message) {
        Check(WithoutGil([&] { return dist::ReportError(message); }));
      },
      nb::arg("message"));

  nb::class_<PyCommunicator>(m, "Communicator")
      .def_static("create", &PyCommunicator::Create, nb::arg("backend"), nb::arg("host_transport"),
                  nb::arg("timeout_in_ms").none())
      .def_prop_ro("rank", &PyCommunicator::rank)
      .def_prop_ro("size", &PyCommunicator::size)
      .def("describe", &PyCommunicator::describe)
      .def("all_reduce", &PyCommunicator::AllReduce)
      .def("all_gather", &PyCommunicator::AllGather)
      .def("reduce_scatter", &PyCommunicator::ReduceScatter)
      .def("broadcast", &PyCommunicator::Broadcast)
      .def("all_to_all", &PyCommunicator::AllToAll)
      .def("barrier", &PyCommunicator::Barrier)
      .def("split", &PyCommunicator::Split)
      .def("abort", &PyCommunicator::Abort);

  m.def(
      "broadcast_one_to_all",
      [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape, int root) {
        dist::HostArray in = ToHostArray(b, shape);
        return FromHostArray(
            Value(WithoutGil([&] { return dist::BroadcastOneToAll(c.comm(), in, root); })));
      });
  m.def(
      "process_allgather",
      [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape, bool tiled) {
        dist::HostArray in = ToHostArray(b, shape);
        return FromHostArray(
            Value(WithoutGil([&] { return dist::ProcessAllgather(c.comm(), in, tiled); })));
      });
  m.def("assert_equal", [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape,
                           const std::string& fail_message) {
    dist::HostArray in = ToHostArray(b, shape);
    Check(WithoutGil([&] { return dist::AssertEqual(c.comm(), in, fail_message); }));
  });
}

// cohort._cohort: the bindings of libdist (dist/distributed.h, dist/collectives.h) behind the
// Python package `cohort` (python/cohort/__init__.py holds the public names and checks arrays).
//
// Errors: every non-OK absl::Status is raised as cohort.<Code>Error(message), the classes that
// cohort/_errors.py registers at import. The key-value functions are bound as the public names
// themselves (no Python layer: a frame of Python around a call that waits on the network costs
// microseconds, docs/benchmarks.md). Blocking calls release the GIL and look for signals
// (Ctrl-C) every kSignalSlice, so a KeyboardInterrupt is raised within about that long:
//   - a key-value get makes one short call on the caller's thread, then waits on a helper;
//   - collectives run asynchronously and are waited for in slices; on an interrupt the
//     communicator is aborted first (the call may be half done on some ranks, and the array must
//     not be written after the exception), then KeyboardInterrupt is raised;
//   - what cannot be cut into slices runs on a helper thread while the caller waits in slices:
//     initialize, shutdown, barriers (cancelled with CancelBarrier on an interrupt), creating a
//     communicator, splitting one and the multihost utilities (the communicator used is
//     aborted); a helper that cannot be cancelled is left to finish on its own and what it makes
//     is dropped. reached_preemption_sync_point never waits for other processes.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <array>
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
constexpr char kInterrupted[] = "interrupted by a signal in Python (KeyboardInterrupt)";

// cohort.<Code>Error by absl::StatusCode number, from cohort._errors (RuntimeError until then).
std::array<nb::object, 17> g_error_classes;
// Set by an atexit hook: from then on libdist's threads no longer call into Python.
std::atomic<bool> g_exiting{false};

[[noreturn]] void Raise(const absl::Status& status) {
  const auto code = static_cast<size_t>(status.code());
  PyObject* type = code < g_error_classes.size() && g_error_classes[code].is_valid()
                       ? g_error_classes[code].ptr()
                       : PyExc_RuntimeError;
  PyErr_SetString(type, std::string(status.message()).c_str());
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

// A timeout argument: None, or an int or float of milliseconds (not a bool).
std::optional<double> MillisArg(nb::handle value, const char* name) {
  if (value.is_none()) return std::nullopt;
  if (PyBool_Check(value.ptr()) || !(PyLong_Check(value.ptr()) || PyFloat_Check(value.ptr()))) {
    throw nb::type_error((std::string(name) + " must be a number of milliseconds, not " +
                          Py_TYPE(value.ptr())->tp_name)
                             .c_str());
  }
  const double ms = PyFloat_AsDouble(value.ptr());
  if (ms == -1.0 && PyErr_Occurred() != nullptr) throw nb::python_error();
  return ms;
}

// A value for the key-value store: str (stored as UTF-8), bytes, bytearray or memoryview.
std::string BytesArg(nb::handle value, const char* name) {
  PyObject* obj = value.ptr();
  if (PyUnicode_Check(obj)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
    if (text == nullptr) throw nb::python_error();
    return std::string(text, size);
  }
  if (PyBytes_Check(obj)) return std::string(PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj));
  if (PyByteArray_Check(obj) || PyMemoryView_Check(obj)) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
    std::string out(static_cast<const char*>(view.buf), view.len);
    PyBuffer_Release(&view);
    return out;
  }
  throw nb::type_error(
      (std::string(name) + " must be str or bytes, not " + Py_TYPE(obj)->tp_name).c_str());
}

// A stored value as str; UnicodeDecodeError naming the key and the _bytes variant otherwise.
nb::object Text(const std::string& value, const std::string& key, const char* fn) {
  PyObject* text =
      PyUnicode_DecodeUTF8(value.data(), static_cast<Py_ssize_t>(value.size()), "strict");
  if (text != nullptr) return nb::steal(text);
  PyErr_Clear();
  const std::string reason =
      "the value of '" + key + "' is not UTF-8 text: use " + fn + "_bytes for binary values";
  PyObject* error =
      PyUnicodeDecodeError_Create("utf-8", value.data(), static_cast<Py_ssize_t>(value.size()), 0,
                                  static_cast<Py_ssize_t>(value.size()), reason.c_str());
  if (error != nullptr) {
    PyErr_SetObject(PyExc_UnicodeDecodeError, error);
    Py_DECREF(error);
  }
  throw nb::python_error();
}

nb::bytes Bytes(const std::string& value) { return nb::bytes(value.data(), value.size()); }

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

// What RunInterruptible does on an interrupt once `cancel` (if any) was called: wait for the
// helper (cancel ends it at once: a barrier's CancelBarrier), or leave it to finish on its own
// (nothing can end it early; it holds everything it uses, and its result is dropped).
enum class OnInterrupt { kJoin, kDetach };

// Runs `fn` on a helper thread and waits for it without the GIL, looking for signals between
// slices; on an interrupt calls `cancel` (if any), then joins or detaches the helper as `then`
// says, and raises the signal's exception.
absl::Status RunInterruptible(std::function<absl::Status()> fn,
                              std::function<void()> cancel = nullptr,
                              OnInterrupt then = OnInterrupt::kDetach) {
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
      {
        nb::gil_scoped_release release;  // cancel() may be an RPC; the helper may need the GIL
        if (cancel) cancel();
        if (then == OnInterrupt::kJoin) {
          helper.join();
        } else {
          helper.detach();
        }
      }
      throw nb::python_error();
    }
  }
  helper.join();
  return shared->status;
}

// RunInterruptible for a call with a result.
template <typename T>
T ValueInterruptible(std::function<absl::StatusOr<T>()> fn, std::function<void()> cancel = nullptr,
                     OnInterrupt then = OnInterrupt::kDetach) {
  auto result = std::make_shared<std::optional<absl::StatusOr<T>>>();
  Check(RunInterruptible(
      [fn = std::move(fn), result] {
        *result = fn();
        return (*result)->status();
      },
      std::move(cancel), then));
  return Value(std::move(**result));
}

dist::DataType ParseType(const std::string& name) {
  if (name == "float32") return dist::DataType::kFloat32;
  if (name == "float64") return dist::DataType::kFloat64;
  if (name == "int32") return dist::DataType::kInt32;
  if (name == "int64") return dist::DataType::kInt64;
  if (name == "bfloat16") return dist::DataType::kBFloat16;
  if (name == "float16") return dist::DataType::kFloat16;
  throw nb::type_error(
      ("unsupported dtype " + name + ": use float32, float64, int32, int64, float16 or bfloat16")
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
  explicit PyCommunicator(std::shared_ptr<dist::Communicator> comm) : comm_(std::move(comm)) {}

  static std::unique_ptr<PyCommunicator> Create(const std::string& backend,
                                                const std::string& host_transport,
                                                nb::handle timeout_in_ms_arg) {
    const std::optional<double> timeout_in_ms = MillisArg(timeout_in_ms_arg, "timeout_in_ms");
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
      throw nb::value_error(
          ("unknown host_transport '" + host_transport + "': use 'auto', 'shm' or 'tcp'").c_str());
    }
    if (timeout_in_ms.has_value()) options.timeout = Millis(timeout_in_ms, absl::ZeroDuration());
    // Creation waits for the other ranks: on a helper, so that Ctrl-C is seen (an interrupted
    // creation finishes or times out there, and what it made is dropped).
    return std::make_unique<PyCommunicator>(ValueInterruptible<std::shared_ptr<dist::Communicator>>(
        [options]() -> absl::StatusOr<std::shared_ptr<dist::Communicator>> {
          return dist::Communicator::Create(options);
        }));
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
  // Waits for the other ranks on a helper (which shares the parent); an interrupt aborts the
  // parent, as it does for a collective.
  std::unique_ptr<PyCommunicator> Split(int color, int key) {
    std::shared_ptr<dist::Communicator> child =
        ValueInterruptible<std::shared_ptr<dist::Communicator>>(
            [parent = comm_, color, key]() -> absl::StatusOr<std::shared_ptr<dist::Communicator>> {
              return parent->Split(color, key);
            },
            AbortOnInterrupt());
    if (child == nullptr) return nullptr;
    return std::make_unique<PyCommunicator>(std::move(child));
  }

  // For a call that uses this communicator from a helper: an interrupt aborts it.
  std::function<void()> AbortOnInterrupt() const {
    return [comm = comm_] { comm->Abort(kInterrupted); };
  }

  void Abort(const std::string& reason) { comm_->Abort(reason); }

  const std::shared_ptr<dist::Communicator>& comm() const { return comm_; }

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
          comm_->Abort(kInterrupted);
          (void)work.Wait();
        }
        throw nb::python_error();
      }
    }
  }

  std::shared_ptr<dist::Communicator> comm_;
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

// A blocking get: a key that is set (or soon is) comes back from one short call on this
// thread; a longer wait is one call with the whole timeout on a helper thread, so that Ctrl-C is
// seen within a slice without polling the coordinator every slice.
std::string BlockingGet(const std::string& key, std::optional<double> timeout_in_ms) {
  const absl::Duration timeout = Millis(timeout_in_ms, dist::kDefaultTimeout);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<std::string> value =
      WithoutGil([&] { return dist::KeyValueGet(key, std::min(timeout, kSignalSlice)); });
  if (absl::IsDeadlineExceeded(value.status()) && absl::Now() < deadline) {
    return ValueInterruptible<std::string>([key, deadline] {
      return dist::KeyValueGet(key, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    });
  }
  return Value(std::move(value));
}

std::optional<std::string> TryGet(const std::string& key) {
  absl::StatusOr<std::string> value = WithoutGil([&] { return dist::KeyValueTryGet(key); });
  if (absl::IsNotFound(value.status())) return std::nullopt;
  return Value(std::move(value));
}

}  // namespace

NB_MODULE(_cohort, m) {
  m.doc() = "libdist bindings behind the cohort package (use `import cohort`)";
  // The peer-failure handler is kept until the process ends (libdist may call it until then),
  // and with it what it references: not a leak to warn about at exit.
  nb::set_leak_warnings(false);

  // cohort/_errors.py hands over its classes: {absl status code number: cohort.<Code>Error}.
  m.def("_register_errors", [](nb::dict classes) {
    for (auto [code, cls] : classes) {
      const auto i = nb::cast<size_t>(code);
      if (i >= g_error_classes.size()) throw nb::value_error("no such status code");
      g_error_classes[i] = nb::borrow(cls);
    }
  });
  m.attr("PEER_FAILURE_EXIT_CODE") = dist::kPeerFailureExitCode;
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { g_exiting.store(true); }));
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
        return "cohort.PeerFailure(process_id=" + std::to_string(f.process_id) +
               ", cause=" + dist::FailureCauseName(f.cause) + ", message=" + f.message + ")";
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

  // ---- Key-value store: these are cohort.key_value_set etc. themselves ----
  m.def(
      "key_value_set",
      [](const std::string& key, nb::handle value, bool allow_overwrite) {
        const std::string bytes = BytesArg(value, "value");
        Check(WithoutGil([&] { return dist::KeyValueSet(key, bytes, allow_overwrite); }));
      },
      nb::arg("key"), nb::arg("value"), nb::arg("allow_overwrite") = false,
      nb::sig("def key_value_set(key: str, value: str | bytes, allow_overwrite: bool = False) "
              "-> None"),
      "Sets key to value (str or bytes, up to 1 MiB). AlreadyExistsError when the key is set "
      "and allow_overwrite is False.");
  m.def(
      "blocking_key_value_get",
      [](const std::string& key, nb::handle timeout_in_ms) {
        return Text(BlockingGet(key, MillisArg(timeout_in_ms, "timeout_in_ms")), key,
                    "blocking_key_value_get");
      },
      nb::arg("key"), nb::arg("timeout_in_ms").none(),
      nb::sig("def blocking_key_value_get(key: str, timeout_in_ms: float | None) -> str"),
      "Waits until key is set and returns its value as str (DeadlineExceededError after the "
      "timeout; None: 5 minutes).");
  m.def(
      "blocking_key_value_get_bytes",
      [](const std::string& key, nb::handle timeout_in_ms) {
        return Bytes(BlockingGet(key, MillisArg(timeout_in_ms, "timeout_in_ms")));
      },
      nb::arg("key"), nb::arg("timeout_in_ms").none(),
      nb::sig("def blocking_key_value_get_bytes(key: str, timeout_in_ms: float | None) -> bytes"),
      "blocking_key_value_get, returning bytes.");
  m.def(
      "key_value_try_get",
      [](const std::string& key) -> nb::object {
        std::optional<std::string> value = TryGet(key);
        return value ? Text(*value, key, "key_value_try_get") : nb::none();
      },
      nb::arg("key"), nb::sig("def key_value_try_get(key: str) -> str | None"),
      "The value of key as str, or None when it is not set.");
  m.def(
      "key_value_try_get_bytes",
      [](const std::string& key) -> nb::object {
        std::optional<std::string> value = TryGet(key);
        return value ? nb::object(Bytes(*value)) : nb::none();
      },
      nb::arg("key"), nb::sig("def key_value_try_get_bytes(key: str) -> bytes | None"),
      "key_value_try_get, returning bytes.");
  m.def(
      "key_value_dir_get",
      [](const std::string& prefix) {
        nb::list out;
        for (const auto& [k, v] : Value(WithoutGil([&] { return dist::KeyValueDir(prefix); }))) {
          out.append(nb::make_tuple(k, Text(v, k, "key_value_dir_get")));
        }
        return out;
      },
      nb::arg("prefix"), nb::sig("def key_value_dir_get(prefix: str) -> list[tuple[str, str]]"),
      "Every (key, value) below prefix/, in key order, values as str.");
  m.def(
      "key_value_dir_get_bytes",
      [](const std::string& prefix) {
        nb::list out;
        for (const auto& [k, v] : Value(WithoutGil([&] { return dist::KeyValueDir(prefix); }))) {
          out.append(nb::make_tuple(k, Bytes(v)));
        }
        return out;
      },
      nb::arg("prefix"),
      nb::sig("def key_value_dir_get_bytes(prefix: str) -> list[tuple[str, bytes]]"),
      "key_value_dir_get, values as bytes.");
  m.def(
      "key_value_delete",
      [](const std::string& key) { Check(WithoutGil([&] { return dist::KeyValueDelete(key); })); },
      nb::arg("key"), "Deletes key and everything below it.");
  m.def(
      "key_value_increment",
      [](const std::string& key, int64_t amount) {
        return Value(WithoutGil([&] { return dist::KeyValueIncrement(key, amount); }));
      },
      nb::arg("key"), nb::arg("amount"),
      "Atomically adds amount (a missing key counts as 0); returns the new value.");

  m.def(
      "wait_at_barrier",
      [](const std::string& barrier_id, nb::handle timeout_in_ms,
         std::optional<std::vector<int>> process_ids) {
        const absl::Duration timeout =
            Millis(MillisArg(timeout_in_ms, "timeout_in_ms"), dist::kDefaultTimeout);
        std::vector<int> ids = process_ids.value_or(std::vector<int>{});
        Check(RunInterruptible(
            [barrier_id, timeout, ids] { return dist::Barrier(barrier_id, timeout, ids); },
            [barrier_id] { (void)dist::CancelBarrier(barrier_id); }, OnInterrupt::kJoin));
      },
      nb::arg("barrier_id"), nb::arg("timeout_in_ms").none(), nb::arg("process_ids").none());
  m.def(
      "sync_global_devices",
      [](const std::string& name, std::optional<double> timeout_in_ms) {
        const absl::Duration timeout = Millis(timeout_in_ms, dist::kDefaultTimeout);
        // libdist's one barrier id for every SyncGlobalDevices call (distributed.cc).
        Check(RunInterruptible([name, timeout] { return dist::SyncGlobalDevices(name, timeout); },
                               [] { (void)dist::CancelBarrier("sync_global_devices"); },
                               OnInterrupt::kJoin));
      },
      nb::arg("name"), nb::arg("timeout_in_ms").none());

  m.def(
      "reached_preemption_sync_point",
      [](int64_t step) {
        // Never waits for other processes: at most for the agreement's exchange with the
        // coordinator that is in flight (libdist's preemption_sync.cc).
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

  m.def("broadcast_one_to_all",
        [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape, int root) {
          return FromHostArray(ValueInterruptible<dist::HostArray>(
              [comm = c.comm(), in = ToHostArray(b, shape), root] {
                return dist::BroadcastOneToAll(*comm, in, root);
              },
              c.AbortOnInterrupt()));
        });
  m.def("process_allgather",
        [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape, bool tiled) {
          return FromHostArray(ValueInterruptible<dist::HostArray>(
              [comm = c.comm(), in = ToHostArray(b, shape), tiled] {
                return dist::ProcessAllgather(*comm, in, tiled);
              },
              c.AbortOnInterrupt()));
        });
  m.def("assert_equal", [](PyCommunicator& c, const Buffer& b, const std::vector<int64_t>& shape,
                           const std::string& fail_message) {
    Check(RunInterruptible([comm = c.comm(), in = ToHostArray(b, shape),
                            fail_message] { return dist::AssertEqual(*comm, in, fail_message); },
                           c.AbortOnInterrupt()));
  });
}

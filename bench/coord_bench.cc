// coord-bench: measures the coordination service over loopback gRPC with N simulated tasks.
//
//   coord-bench --workload rendezvous|barrier|fanout --tasks N [--rounds R] [--json]
//
// The service is a real cohort-sidecar (rank 0, which hosts it); the tasks are asynchronous gRPC
// clients spread over a few worker processes (coord-bench --worker), each task its own
// registration and incarnation. With --json, one JSON object per run on stdout (see
// docs/benchmarks.md); without, one readable sentence.
//
// Workloads:
//   rendezvous  every task registers, sets rdv/keys/<i>, increments rdv-count (the task that
//               brings it to N sets rdv-all), blocks on rdv-all and reads the rdv/keys directory
//               (N keys). seconds: from the common start until the last task saw all N keys;
//               registered_seconds: until the last registration was answered.
//   barrier     after registering, every task passes `rounds` barriers over all tasks.
//               mean/p99_round_seconds: between consecutive releases of the last task.
//   fanout      N-1 tasks block on one key; then one task sets it (128 bytes). seconds: from
//               the set until the last waiter has the value.
//
// --processes-per-pod K gives the tasks the connections of a job of pods running K processes:
// the K agents of one pod's sidecar share one connection to the service (gRPC shares the
// subchannel of identical channels), so a 1,024-rank job of 128 pods x 8 makes 128 connections
// and one of 1,024 pods x 1 makes 1,024. Without it, each worker process multiplexes its tasks
// over 8 connections.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "common/token.h"
#include "coordination/client/session_client.h"

namespace cohort::bench {
namespace {

namespace pb = ::cohort::coordination::v1;
using json = nlohmann::json;

constexpr int kChannelsPerWorker = 8;
constexpr absl::Duration kCallTimeout = absl::Minutes(10);

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

// The simulated tasks of one worker process.
class Worker {
 public:
  // `per_pod` > 0: tasks first + i share a connection with their pod's (task / per_pod).
  Worker(const std::string& address, const std::string& token, int num_tasks, int first, int count,
         int per_pod = 0)
      : token_(token), num_tasks_(num_tasks), first_(first), count_(count), per_pod_(per_pod) {
    const int channels =
        per_pod > 0 ? (first + count - 1) / per_pod - first / per_pod + 1 : kChannelsPerWorker;
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args = DefaultChannelArguments();
      args.SetInt("cohort.bench.channel", c);  // A distinct connection per channel.
      stubs_.push_back(pb::CoordinationService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
    absl::BitGen gen;
    for (int i = 0; i < count; ++i) incarnations_.push_back(absl::Uniform<uint64_t>(gen));
  }

  // Opens one Session stream per task (each simulated task is its own agent).
  void OpenSessions() {
    for (int i = 0; i < count_; ++i) {
      sessions_.push_back(std::make_unique<coordination::SessionClient>(StubOf(i), token_));
    }
  }

  // Like ForAll, over the tasks' Session streams: `prepare(local, task, SessionRequest*)` fills
  // one call; `check(task, response)` inspects the result.
  template <typename Prepare, typename Check>
  std::vector<int64_t> ForAllSession(Prepare prepare, Check check, std::vector<int> subset = {}) {
    if (subset.empty()) {
      for (int i = 0; i < count_; ++i) subset.push_back(i);
    }
    std::vector<int64_t> done_ns(count_, 0);
    absl::BlockingCounter pending(static_cast<int>(subset.size()));
    for (int i : subset) {
      pb::SessionRequest req;
      prepare(i, first_ + i, incarnations_[i], &req);
      sessions_[i]->Call(std::move(req), [&, i](absl::Status s, const pb::SessionResponse& r) {
        if (!s.ok()) {
          std::fprintf(stderr, "coord-bench worker: task %d: %s\n", first_ + i,
                       std::string(s.message()).c_str());
          std::_Exit(1);
        }
        check(first_ + i, r);
        done_ns[i] = NowNs();
        pending.DecrementCount();
      });
    }
    pending.Wait();
    return done_ns;
  }

  // Registers every task (one unary call each) and waits for all; returns the completion times
  // (ns).
  std::vector<int64_t> Register() {
    using Async = pb::CoordinationService::StubInterface::async_interface;
    std::vector<int64_t> done_ns(count_, 0);
    absl::BlockingCounter pending(count_);
    for (int i = 0; i < count_; ++i) {
      pb::RegisterTaskRequest req;
      req.set_task_id(first_ + i);
      req.set_incarnation(incarnations_[i]);
      req.set_num_tasks(num_tasks_);
      req.set_hostname("bench");
      req.set_pid(getpid());
      UnaryCall(StubOf(i)->async(), &Async::RegisterTask, std::move(req),
                UnaryCallOptions{token_, kCallTimeout},
                std::function<void(absl::Status, pb::RegisterTaskResponse)>(
                    [&, i](absl::Status s, pb::RegisterTaskResponse) {
                      if (!s.ok()) {
                        std::fprintf(stderr, "coord-bench worker: task %d: %s\n", first_ + i,
                                     std::string(s.message()).c_str());
                        std::_Exit(1);
                      }
                      done_ns[i] = NowNs();
                      pending.DecrementCount();
                    }));
    }
    pending.Wait();
    return done_ns;
  }

  const std::string& token() const { return token_; }
  int count() const { return count_; }

 private:
  std::string token_;
  int num_tasks_, first_, count_;
  int per_pod_;
  // The connection of local task i.
  pb::CoordinationService::Stub* StubOf(int i) const {
    if (per_pod_ > 0) return stubs_[(first_ + i) / per_pod_ - first_ / per_pod_].get();
    return stubs_[i % stubs_.size()].get();
  }

  std::vector<std::unique_ptr<pb::CoordinationService::Stub>> stubs_;
  std::vector<uint64_t> incarnations_;
  std::vector<std::unique_ptr<coordination::SessionClient>> sessions_;
};

int64_t Max(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

void WaitUntilNs(int64_t t) {
  int64_t now = NowNs();
  if (t > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
}

int RunWorker(const std::string& address, const std::string& token, const std::string& workload,
              int num_tasks, int first, int count, int rounds, int64_t start_ns, int per_pod) {
  Worker w(address, token, num_tasks, first, count, per_pod);
  json out;
  WaitUntilNs(start_ns);
  auto ignore = [](int, const pb::SessionResponse&) {};
  auto call = [](uint64_t incarnation, int task, auto* r) {
    r->set_task_id(task);
    r->set_incarnation(incarnation);
  };
  out["registered_ns"] = Max(w.Register());
  w.OpenSessions();
  if (workload == "rendezvous") {
    w.ForAllSession(
        [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* set = r->mutable_insert_key_value();
          call(inc, task, set);
          set->mutable_kv()->set_key(absl::StrCat("rdv/keys/", task));
          set->mutable_kv()->set_value(absl::StrCat("127.0.0.1:", 10000 + task));
        },
        ignore);
    std::vector<int> completer;  // The local task whose increment reached N, if any.
    absl::Mutex mu;
    w.ForAllSession(
        [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* incr = r->mutable_increment_key_value();
          call(inc, task, incr);
          incr->set_key("rdv-count");
          incr->set_increment(1);
        },
        [&](int task, const pb::SessionResponse& r) {
          if (r.increment_key_value().value() == num_tasks) {
            absl::MutexLock lock(&mu);
            completer.push_back(task - first);
          }
        });
    if (!completer.empty()) {
      // That task announces that every key is set.
      w.ForAllSession(
          [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
            auto* set = r->mutable_insert_key_value();
            call(inc, task, set);
            set->mutable_kv()->set_key("rdv-all");
            set->mutable_kv()->set_value("1");
          },
          ignore, completer);
    }
    w.ForAllSession(
        [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* get = r->mutable_get_key_value();
          call(inc, task, get);
          get->set_key("rdv-all");
          get->set_timeout_ms(absl::ToInt64Milliseconds(kCallTimeout));
        },
        ignore);
    std::vector<int64_t> done = w.ForAllSession(
        [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* dir = r->mutable_get_key_value_dir();
          call(inc, task, dir);
          dir->set_directory("rdv/keys");
        },
        [&](int task, const pb::SessionResponse& r) {
          if (r.get_key_value_dir().kvs_size() != num_tasks) {
            std::fprintf(stderr, "task %d saw %d keys, not %d\n", task,
                         r.get_key_value_dir().kvs_size(), num_tasks);
            std::_Exit(1);
          }
        });
    out["done_ns"] = Max(done);
  } else if (workload == "barrier") {
    std::vector<int64_t> rounds_done;
    for (int round = 0; round < rounds; ++round) {
      rounds_done.push_back(Max(w.ForAllSession(
          [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
            auto* b = r->mutable_barrier();
            call(inc, task, b);
            b->set_barrier_id("bench");
            b->set_counter(round);
            b->set_timeout_ms(absl::ToInt64Milliseconds(kCallTimeout));
          },
          ignore)));
    }
    out["round_done_ns"] = rounds_done;
  } else if (workload == "fanout") {
    std::printf("REGISTERED\n");
    std::fflush(stdout);
    std::vector<int64_t> done = w.ForAllSession(
        [&](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* get = r->mutable_get_key_value();
          call(inc, task, get);
          get->set_key("fanout");
          get->set_timeout_ms(absl::ToInt64Milliseconds(kCallTimeout));
        },
        [](int task, const pb::SessionResponse& r) {
          if (r.get_key_value().kv().value().size() != 128) {
            std::fprintf(stderr, "task %d got %zu bytes\n", task,
                         r.get_key_value().kv().value().size());
            std::_Exit(1);
          }
        });
    out["done_ns"] = Max(done);
  }
  std::printf("RESULT %s\n", out.dump().c_str());
  std::fflush(stdout);
  std::_Exit(0);  // Skip channel teardown: nothing left to measure.
}

struct Child {
  Subprocess process;
  LineReader output;
  std::vector<std::string> lines;
  bool open = true;
};

// Reads child output until each child printed a line starting with `prefix` (or exited).
bool CollectLines(std::vector<Child>& children, const std::string& prefix, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool all = true;
    for (Child& c : children) {
      bool has = std::any_of(c.lines.begin(), c.lines.end(),
                             [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
      if (has) continue;
      all = false;
      if (!c.open) return false;
      std::vector<std::string> lines;
      c.open = c.output.Read(&lines);
      for (auto& l : lines) {
        if (l.rfind("RESULT", 0) != 0 && l.rfind("REGISTERED", 0) != 0) {
          std::fprintf(stderr, "%s\n", l.c_str());
        }
        c.lines.push_back(l);
      }
    }
    if (all) return true;
  }
  return false;
}

json ResultOf(const Child& c) {
  for (const auto& l : c.lines) {
    if (l.rfind("RESULT ", 0) == 0) return json::parse(l.substr(7));
  }
  return json();
}

int RunBench(const std::string& workload, int tasks, int rounds, int processes, bool json_output,
             const std::string& sidecar, int per_pod) {
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) return 1;
  std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("coord-bench-", getpid())).string();
  std::filesystem::create_directories(dir);
  std::string token = GenerateToken();
  std::ofstream(dir + "/token") << token;
  std::string address = absl::StrCat("127.0.0.1:", *port);
  absl::StatusOr<Subprocess> service =
      Subprocess::Start(Subprocess::Options{{sidecar,
                                             "--rank",
                                             "0",
                                             "--num-processes",
                                             absl::StrCat(tasks),
                                             "--coordinator-address",
                                             address,
                                             "--coordinator-bind-address",
                                             "127.0.0.1",
                                             "--agent-socket",
                                             dir + "/agent.sock",
                                             "--token-file",
                                             dir + "/token",
                                             "--http-address",
                                             "127.0.0.1",
                                             "--http-port",
                                             "0",
                                             "--http-port-file",
                                             dir + "/http-port",
                                             "--heartbeat-timeout",
                                             "5m",
                                             "--initialization-timeout",
                                             "10m",
                                             "--per-rank-metrics-limit",
                                             "0"},
                                            {{"COHORT_LOG_LEVEL", "warning"}},
                                            false});
  if (!service.ok()) {
    std::fprintf(stderr, "coord-bench: %s\n", std::string(service.status().message()).c_str());
    return 1;
  }
  int http_port = 0;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30);
       http_port == 0 && absl::Now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    std::ifstream(dir + "/http-port") >> http_port;
  }
  if (http_port == 0) {
    std::fprintf(stderr, "coord-bench: the service did not start\n");
    return 1;
  }

  // Spread tasks over worker processes; fanout's task 0 (the setter) stays here.
  int first_worker_task = workload == "fanout" ? 1 : 0;
  int worker_tasks = tasks - first_worker_task;
  int64_t start_ns =
      NowNs() + absl::ToInt64Nanoseconds(absl::Milliseconds(500) + absl::Microseconds(200) * tasks);
  std::vector<Child> children;
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int p = 0; p < processes && worker_tasks > 0; ++p) {
    int begin = first_worker_task + worker_tasks * p / processes;
    int end = first_worker_task + worker_tasks * (p + 1) / processes;
    if (begin == end) continue;
    absl::StatusOr<Subprocess> w = Subprocess::Start(Subprocess::Options{{self,
                                                                          "--worker",
                                                                          "--address",
                                                                          address,
                                                                          "--token",
                                                                          token,
                                                                          "--workload",
                                                                          workload,
                                                                          "--tasks",
                                                                          absl::StrCat(tasks),
                                                                          "--first",
                                                                          absl::StrCat(begin),
                                                                          "--count",
                                                                          absl::StrCat(end - begin),
                                                                          "--rounds",
                                                                          absl::StrCat(rounds),
                                                                          "--start-ns",
                                                                          absl::StrCat(start_ns),
                                                                          "--processes-per-pod",
                                                                          absl::StrCat(per_pod)},
                                                                         {}});
    if (!w.ok()) return 1;
    const int fd = w->output_fd();
    children.push_back(Child{std::move(*w), LineReader(fd), {}, true});
  }

  json result = {
      {"implementation", "cohort"},
      {"workload", workload},
      {"tasks", tasks},
      {"client_processes", static_cast<int>(children.size())},
      {"processes_per_pod", per_pod},
      {"connections", per_pod > 0 ? (tasks + per_pod - 1) / per_pod
                                  : static_cast<int>(children.size()) * kChannelsPerWorker}};
  bool ok = true;
  if (workload == "fanout") {
    Worker setter(address, token, tasks, 0, 1);
    WaitUntilNs(start_ns);
    setter.Register();
    ok = CollectLines(children, "REGISTERED", absl::Minutes(5));
    // Wait until every waiter is parked at the service (its own metric), then set.
    httplib::Client http("127.0.0.1", http_port);
    std::string want = absl::StrCat("cohort_kv_blocking_gets ", tasks - 1);
    for (absl::Time deadline = absl::Now() + absl::Minutes(2); ok && absl::Now() < deadline;) {
      auto res = http.Get("/metrics");
      if (res && res->body.find(want) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    setter.OpenSessions();
    int64_t set_ns = NowNs();
    setter.ForAllSession(
        [](int, int task, uint64_t inc, pb::SessionRequest* r) {
          auto* set = r->mutable_insert_key_value();
          set->set_task_id(task);
          set->set_incarnation(inc);
          set->mutable_kv()->set_key("fanout");
          set->mutable_kv()->set_value(std::string(128, 'x'));
        },
        [](int, const pb::SessionResponse&) {});
    ok = ok && CollectLines(children, "RESULT", absl::Minutes(5));
    int64_t done = 0;
    for (const Child& c : children) done = std::max<int64_t>(done, ResultOf(c)["done_ns"]);
    result["seconds"] = (done - set_ns) / 1e9;
  } else {
    ok = CollectLines(children, "RESULT", absl::Minutes(10));
    if (workload == "rendezvous") {
      int64_t done = 0, registered = 0;
      for (const Child& c : children) {
        done = std::max<int64_t>(done, ResultOf(c)["done_ns"]);
        registered = std::max<int64_t>(registered, ResultOf(c)["registered_ns"]);
      }
      result["seconds"] = (done - start_ns) / 1e9;
      // From the common start until the service answered the last registration: every rank
      // registered.
      result["registered_seconds"] = (registered - start_ns) / 1e9;
    } else {
      int64_t registered = 0;
      std::vector<int64_t> ends(rounds, 0);
      for (const Child& c : children) {
        json r = ResultOf(c);
        registered = std::max<int64_t>(registered, r["registered_ns"]);
        for (int i = 0; i < rounds; ++i)
          ends[i] = std::max<int64_t>(ends[i], r["round_done_ns"][i]);
      }
      std::vector<double> durations;
      int64_t prev = registered;
      for (int64_t e : ends) {
        durations.push_back((e - prev) / 1e9);
        prev = e;
      }
      double sum = 0;
      for (double d : durations) sum += d;
      std::vector<double> sorted = durations;
      std::sort(sorted.begin(), sorted.end());
      result["rounds"] = rounds;
      result["seconds"] = (ends.back() - registered) / 1e9;
      result["mean_round_seconds"] = sum / rounds;
      result["p99_round_seconds"] =
          sorted[std::min<size_t>(sorted.size() - 1, static_cast<size_t>(0.99 * sorted.size()))];
    }
  }
  result["service_peak_rss_bytes"] = PeakRssBytes(service->pid());
  service->Signal(SIGKILL);
  service->Wait();
  for (Child& c : children) c.process.Wait();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!ok) {
    std::fprintf(stderr, "coord-bench: a worker failed or timed out\n");
    return 1;
  }
  if (json_output) {
    std::printf("%s\n", result.dump().c_str());
    return 0;
  }
  std::printf("%s, %d tasks: %.3f s", workload.c_str(), tasks, result.value("seconds", 0.0));
  if (result.contains("mean_round_seconds")) {
    std::printf(" for %d rounds (mean %.1f ms, p99 %.1f ms per round)", rounds,
                result["mean_round_seconds"].get<double>() * 1e3,
                result["p99_round_seconds"].get<double>() * 1e3);
  }
  std::printf("; service peak RSS %.1f MiB\n",
              result["service_peak_rss_bytes"].get<double>() / (1 << 20));
  return 0;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) {
  std::string workload = "rendezvous";
  int tasks = 1024, rounds = 20, processes = 4, per_pod = 0;
  bool json_output = false, worker = false;
  std::string address, token, sidecar;
  int first = 0, count = 0;
  int64_t start_ns = 0;
  CLI::App app{"coord-bench: coordination service benchmark over loopback gRPC"};
  app.add_option("--workload", workload, "rendezvous, barrier or fanout")
      ->check(CLI::IsMember({"rendezvous", "barrier", "fanout"}))
      ->capture_default_str();
  app.add_option("--tasks", tasks, "Simulated tasks")
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  app.add_option("--rounds", rounds, "Barrier rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--processes", processes, "Client processes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_flag("--json", json_output,
               "Print one JSON object (docs/benchmarks.md) instead of a sentence");
  app.add_option("--sidecar", sidecar, "cohort-sidecar binary (default: beside coord-bench)");
  app.add_option("--processes-per-pod", per_pod,
                 "Tasks per connection, as the agents of a pod of K processes share their "
                 "sidecar's (default: each client process multiplexes over 8 connections)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--worker", worker)->group("");
  app.add_option("--address", address)->group("");
  app.add_option("--token", token)->group("");
  app.add_option("--first", first)->group("");
  app.add_option("--count", count)->group("");
  app.add_option("--start-ns", start_ns)->group("");
  CLI11_PARSE(app, argc, argv);
  cohort::InitLogging("coord-bench");
  if (worker) {
    return cohort::bench::RunWorker(address, token, workload, tasks, first, count, rounds, start_ns,
                                    per_pod);
  }
  if (sidecar.empty()) {
    sidecar =
        (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cohort-sidecar").string();
  }
  return cohort::bench::RunBench(workload, tasks, rounds, processes, json_output, sidecar, per_pod);
}

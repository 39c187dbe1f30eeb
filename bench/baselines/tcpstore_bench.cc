// tcpstore-bench: the coord-bench workloads against PyTorch's TCPStore driven by its C++ client
// (c10d::TCPStore from the torch wheel's libtorch_cpu), the fastest way TCPStore can be driven.
// bench/baselines/build-tcpstore-bench.sh builds it; nothing here is part of Cohort's build.
//
//   tcpstore-bench --workload rendezvous|barrier|fanout [--tasks 1024] [--processes 4] [--rounds
//   20]
//
// Same shape as build/bin/coord-bench and bench/baselines/baseline_bench.py: the server (libuv)
// in its own process; tasks are threads spread over --processes client processes, each task with
// its own client (connection). Every client connects first (TCPStore's connect storm of 1,024
// clients takes seconds, retrying refused connections after 1 s; it is reported apart, as
// connect_seconds), then all start at a common instant. Workloads:
// - rendezvous: each task sets its key, the job agrees all N are there (a counter; the last
//   arrival sets a key every task waits for), and every task reads all N values (multiGet).
// - barrier: --rounds rounds of c10d's store barrier (add a counter; the last arrival sets the
//   round's key; everyone waits for it); the mean round.
// - fanout: N-1 tasks wait for one key; the time from its set until the last task has it.
// Prints one JSON object like coord-bench's.

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <latch>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace {

using Clock = std::chrono::system_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void SleepUntil(int64_t ns) {
  int64_t left = ns - NowNs();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

c10::intrusive_ptr<c10d::TCPStore> Connect(uint16_t port) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::minutes(10);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

struct Args {
  std::string workload = "barrier";
  int tasks = 1024;
  int processes = 4;
  int rounds = 20;
};

void Barrier(c10d::TCPStore& store, const std::string& round, int tasks) {
  if (store.add("b/" + round, 1) == tasks) store.set("b/" + round + "/done", Bytes("1"));
  store.wait({"b/" + round + "/done"});
}

// One task of a client process; appends "registered_ns done_ns [round_end_ns...]" to `out`.
void RunTask(const Args& a, uint16_t port, int task, std::latch& connected,
             std::shared_future<int64_t> start, std::mutex& mu, std::ostream& out) {
  auto store = Connect(port);
  connected.count_down();
  int64_t start_ns = start.get();
  SleepUntil(start_ns);
  int64_t registered = NowNs();
  std::ostringstream line;
  if (a.workload == "rendezvous") {
    store->set("rdv/keys/" + std::to_string(task),
               Bytes("127.0.0.1:" + std::to_string(10000 + task)));
    if (store->add("rdv-count", 1) == a.tasks) store->set("rdv-all", Bytes("1"));
    store->wait({"rdv-all"});
    std::vector<std::string> keys;
    keys.reserve(a.tasks);
    for (int i = 0; i < a.tasks; ++i) keys.push_back("rdv/keys/" + std::to_string(i));
    auto values = store->multiGet(keys);
    if (static_cast<int>(values.size()) != a.tasks) std::abort();
    line << registered << " " << NowNs();
  } else if (a.workload == "barrier") {
    Barrier(*store, "registered", a.tasks);  // Start the rounds together.
    line << NowNs() << " 0";
    for (int r = 0; r < a.rounds; ++r) {
      Barrier(*store, std::to_string(r), a.tasks);
      line << " " << NowNs();
    }
  } else {  // fanout
    store->add("waiting", 1);
    auto value = store->get("fanout");  // Blocks until it exists.
    if (value.size() != 128) std::abort();
    line << registered << " " << NowNs();
  }
  std::lock_guard<std::mutex> lock(mu);
  out << line.str() << "\n";
}

int64_t PeakRssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

int Usage(const char* why) {
  std::cerr
      << "tcpstore-bench: " << why
      << "\nusage: tcpstore-bench --workload rendezvous|barrier|fanout [--tasks N] [--processes P] "
         "[--rounds R]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--json") continue;
    if (i + 1 >= argc) return Usage(("missing value of " + flag).c_str());
    std::string value = argv[++i];
    if (flag == "--workload")
      a.workload = value;
    else if (flag == "--tasks")
      a.tasks = std::atoi(value.c_str());
    else if (flag == "--processes")
      a.processes = std::atoi(value.c_str());
    else if (flag == "--rounds")
      a.rounds = std::atoi(value.c_str());
    else
      return Usage(("unknown flag " + flag).c_str());
  }
  if (a.workload != "rendezvous" && a.workload != "barrier" && a.workload != "fanout") {
    return Usage("--workload must be rendezvous, barrier or fanout");
  }
  if (a.tasks < 2 || a.processes < 1 || a.rounds < 1)
    return Usage("--tasks >= 2, --processes >= 1, --rounds >= 1");
  rlimit files{65536, 65536};
  setrlimit(RLIMIT_NOFILE, &files);

  // The server, in its own process: it writes its port to a pipe, then waits to be killed.
  int port_pipe[2];
  if (pipe(port_pipe) != 0) return 1;
  pid_t server = fork();
  if (server == 0) {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.waitWorkers = false;
    o.timeout = std::chrono::minutes(10);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    uint16_t port = store->getPort();
    if (write(port_pipe[1], &port, sizeof port) != sizeof port) _exit(1);
    pause();
    _exit(0);
  }
  uint16_t port = 0;
  if (read(port_pipe[0], &port, sizeof port) != sizeof port)
    return Usage("the TCPStore server did not start");

  const int first = a.workload == "fanout" ? 1 : 0;
  const int n = a.tasks - first;
  const int64_t connect_start_ns = NowNs();
  std::vector<pid_t> clients;
  std::vector<int> result_fds, ready_fds, go_fds;
  for (int p = 0; p < a.processes; ++p) {
    int fds[2], ready[2], go[2];
    if (pipe(fds) != 0 || pipe(ready) != 0 || pipe(go) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int begin = first + n * p / a.processes, end = first + n * (p + 1) / a.processes;
      std::mutex mu;
      std::ostringstream out;
      std::latch connected(end - begin);
      std::promise<int64_t> start;
      std::shared_future<int64_t> start_future = start.get_future().share();
      std::vector<std::thread> threads;
      for (int t = begin; t < end; ++t) {
        threads.emplace_back(RunTask, std::cref(a), port, t, std::ref(connected), start_future,
                             std::ref(mu), std::ref(out));
      }
      connected.wait();  // Tell the harness, and get the common start instant from it.
      char r = 'R';
      int64_t start_ns = 0;
      if (write(ready[1], &r, 1) != 1 || read(go[0], &start_ns, sizeof start_ns) != sizeof start_ns)
        _exit(1);
      start.set_value(start_ns);
      for (auto& th : threads) th.join();
      std::string text = out.str();
      for (size_t done = 0; done < text.size();) {
        ssize_t w = write(fds[1], text.data() + done, text.size() - done);
        if (w <= 0) _exit(1);
        done += static_cast<size_t>(w);
      }
      _exit(0);  // Skip the clients' teardown.
    }
    close(fds[1]);
    clients.push_back(pid);
    result_fds.push_back(fds[0]);
    ready_fds.push_back(ready[0]);
    go_fds.push_back(go[1]);
  }
  for (int fd : ready_fds) {
    char r;
    if (read(fd, &r, 1) != 1) return Usage("a client process died while connecting");
  }
  const int64_t start_ns = NowNs() + 100'000'000;
  const double connect_seconds = (NowNs() - connect_start_ns) / 1e9;
  for (int fd : go_fds) {
    if (write(fd, &start_ns, sizeof start_ns) != sizeof start_ns) return 1;
  }

  int64_t set_ns = 0;
  if (a.workload == "fanout") {
    SleepUntil(start_ns);
    auto setter = Connect(port);
    while (setter->add("waiting", 0) < a.tasks - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // The last gets reach the server.
    set_ns = NowNs();
    setter->set("fanout", std::vector<uint8_t>(128, 'x'));
  }

  std::vector<std::vector<int64_t>> rows;
  for (int fd : result_fds) {
    std::string text;
    char buf[65536];
    for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(r));
    close(fd);
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::vector<int64_t> row;
      for (int64_t v; fields >> v;) row.push_back(v);
      rows.push_back(row);
    }
  }
  for (pid_t c : clients) waitpid(c, nullptr, 0);
  if (static_cast<int>(rows.size()) != n) {
    std::cerr << "tcpstore-bench: " << rows.size() << " of " << n << " tasks reported\n";
    return 1;
  }
  std::ostringstream json;
  json << "{\"implementation\":\"torch-tcpstore-libuv-cpp-client\",\"workload\":\"" << a.workload
       << "\",\"tasks\":" << a.tasks << ",\"client_processes\":" << a.processes;
  auto max_col = [&](size_t col) {
    int64_t m = 0;
    for (const auto& r : rows) m = std::max(m, r[col]);
    return m;
  };
  if (a.workload == "rendezvous") {
    // connect_seconds: until the last client had connected (part of `seconds`).
    json << ",\"seconds\":" << (max_col(1) - start_ns) / 1e9;
  } else if (a.workload == "fanout") {
    json << ",\"seconds\":" << (max_col(1) - set_ns) / 1e9;
  } else {
    int64_t prev = max_col(0), begin = prev;
    std::vector<double> durations;
    for (int r = 0; r < a.rounds; ++r) {
      int64_t end = max_col(2 + r);
      durations.push_back((end - prev) / 1e9);
      prev = end;
    }
    double mean = 0;
    for (double d : durations) mean += d / durations.size();
    std::sort(durations.begin(), durations.end());
    json << ",\"rounds\":" << a.rounds << ",\"seconds\":" << (prev - begin) / 1e9
         << ",\"mean_round_seconds\":" << mean << ",\"p99_round_seconds\":"
         << durations[std::min(durations.size() - 1, size_t(0.99 * durations.size()))];
  }
  json << ",\"connect_seconds\":" << connect_seconds
       << ",\"service_peak_rss_bytes\":" << PeakRssBytes(server) << "}";
  std::cout << json.str() << std::endl;
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  return 0;
}

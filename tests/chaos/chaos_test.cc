// Chaos trials of cohort-run jobs: in each, a random process of the job (a trainer or a sidecar,
// of any rank; with one sidecar per rank, or pods of two ranks sharing one) gets kill -9 or
// SIGTERM at a random moment from startup to shutdown. Each trial
// checks what docs/faults.md promises:
//   - nothing of the job is left running once cohort-run has exited;
//   - after a SIGKILL, the job ends within --max-end (2 s) of the kill and cohort-run names the
//     killed process (or the job had already done its work);
//   - after a SIGTERM, every rank saves a checkpoint at the same step (a preemption), or, when
//     the signal came before the process could take it as a notice, the job ends as for a kill;
//   - every surviving rank is told of a failure within --max-told (1 s); the median and maximum
//     are printed.
//
//   chaos-test --trials 40            # what `make test` runs (ctest label "chaos")
//   chaos-test --trials 500 --seed 7  # by hand; a failing trial prints the seed that replays it
//
// Exit status: 0 when every trial passed, 1 otherwise.

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace cohort::chaos {
namespace {

struct Flags {
  int trials = 40;
  uint64_t seed = 0;  // 0: from the clock (printed).
  std::string bin_dir = COHORT_BIN_DIR;
  double max_end_s = 2.0;
  double max_told_s = 1.0;
  double window_s = 1.2;  // Kills land in [0, window) after the start.
  int steps = 40;
  bool verbose = false;
};

struct Line {
  absl::Time at;
  std::string text;
};

// The processes of one job: every process whose environment names the job's token file.
std::vector<pid_t> JobProcesses(const std::string& token_file) {
  std::vector<pid_t> pids;
  const std::string needle = absl::StrCat("COHORT_TOKEN_FILE=", token_file);
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (absl::string_view var : absl::StrSplit(env, '\0')) {
      if (var == needle) {
        pids.push_back(pid);
        break;
      }
    }
  }
  closedir(proc);
  return pids;
}

std::string Cmdline(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

std::string EnvOf(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (absl::string_view var : absl::StrSplit(env, '\0')) {
    if (absl::StartsWith(var, name + "=")) return std::string(var.substr(name.size() + 1));
  }
  return "";
}

// The victim's pid: rank `rank`'s trainer or sidecar, if it is running now.
std::optional<pid_t> FindVictim(const std::string& token_file, bool trainer, int rank) {
  for (pid_t pid : JobProcesses(token_file)) {
    if (EnvOf(pid, "COHORT_PROCESS_ID") != absl::StrCat(rank)) continue;
    bool is_sidecar = absl::StrContains(Cmdline(pid), "cohort-sidecar");
    if (is_sidecar != trainer) return pid;
  }
  return std::nullopt;
}

struct Trial {
  int index = 0;
  uint64_t seed = 0;
  int ranks = 0;
  int per_pod = 1;  // Ranks per sidecar (cohort-run --processes-per-pod).
  bool trainer = true;
  int rank = 0;
  int sig = SIGKILL;
  double at_s = 0;
  // Outcome.
  bool victim_found = false;
  bool initialized_before = false;  // The victim's rank printed INITIALIZED before the signal.
  int exit_code = -1;
  double end_s = -1;           // From the signal to cohort-run's exit.
  std::vector<double> told_s;  // From the signal to each survivor's fate-sharing line.
  std::vector<std::string> problems;
  std::vector<Line> lines;

  // cohort-run's name for the victim: a sidecar is named after its pod.
  std::string Victim() const {
    return trainer ? absl::StrCat("rank ", rank) : absl::StrCat("sidecar ", rank / per_pod);
  }
  std::string Describe() const {
    return absl::StrFormat("trial %d (seed %d): %d ranks, %d per sidecar, %s of %s at %.3f s",
                           index, seed, ranks, per_pod, sig == SIGKILL ? "SIGKILL" : "SIGTERM",
                           Victim(), at_s);
  }
};

bool HasLine(const Trial& t, const std::string& text) {
  for (const Line& l : t.lines) {
    if (absl::StrContains(l.text, text)) return true;
  }
  return false;
}

void RunTrial(const Flags& f, Trial& t) {
  std::string work_dir = (std::filesystem::temp_directory_path() /
                          absl::StrCat("cohort-chaos-", getpid(), "-", t.index))
                             .string();
  std::filesystem::remove_all(work_dir);
  std::string token_file = work_dir + "/token";
  std::vector<std::string> argv = {f.bin_dir + "/cohort-run",
                                   "-n",
                                   absl::StrCat(t.ranks),
                                   "--processes-per-pod",
                                   absl::StrCat(t.per_pod),
                                   "--work-dir",
                                   work_dir,
                                   "--grace-period",
                                   "10s",
                                   "--initialization-timeout",
                                   "60s",
                                   "--",
                                   f.bin_dir + "/test-trainer",
                                   "chaos",
                                   absl::StrCat(f.steps)};
  if (t.per_pod == 1) argv.erase(argv.begin() + 3, argv.begin() + 5);  // A sidecar per rank.
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(Subprocess::Options{argv, {}});
  if (!launcher.ok()) {
    t.problems.push_back(absl::StrCat("cannot start cohort-run: ", launcher.status().message()));
    return;
  }
  fcntl(launcher->output_fd(), F_SETFL, O_NONBLOCK);
  const absl::Time started = absl::Now();
  const absl::Time kill_at = started + absl::Seconds(t.at_s);
  std::optional<absl::Time> signalled;
  LineReader reader(launcher->output_fd());
  bool open = true;
  std::optional<int> status;
  const absl::Time hang_deadline = started + absl::Seconds(60);
  while ((open || !status) && absl::Now() < hang_deadline) {
    if (!signalled && absl::Now() >= kill_at) {
      for (const Line& l : t.lines) {
        if (absl::StrContains(l.text, absl::StrCat("[rank ", t.rank, "] INITIALIZED"))) {
          t.initialized_before = true;
        }
      }
      std::optional<pid_t> victim = FindVictim(token_file, t.trainer, t.rank);
      signalled = absl::Now();
      if (victim) {
        t.victim_found = kill(*victim, t.sig) == 0;
      }
    }
    pollfd fd{launcher->output_fd(), POLLIN, 0};
    if (open) poll(&fd, 1, 5);
    if (open) {
      std::vector<std::string> got;
      open = reader.Read(&got);
      for (std::string& l : got) {
        if (f.verbose) std::fprintf(stderr, "  %s\n", l.c_str());
        t.lines.push_back(Line{absl::Now(), std::move(l)});
      }
    } else {
      usleep(2000);
    }
    if (!status) {
      status = launcher->Poll();
      if (status && signalled) t.end_s = absl::ToDoubleSeconds(absl::Now() - *signalled);
    }
  }
  if (!status) {
    t.problems.push_back("HANG: cohort-run still running 60 s after the start");
    launcher->Signal(SIGKILL);
    status = launcher->Wait();
  }
  t.exit_code = Subprocess::ExitCodeOf(*status);
  // Nothing of the job may be left: cohort-run reaps its children, and they die with it.
  std::vector<pid_t> left = JobProcesses(token_file);
  for (pid_t pid : left) {
    t.problems.push_back(absl::StrCat("LEFTOVER: pid ", pid, " (", Cmdline(pid), ")"));
    kill(pid, SIGKILL);
  }
  std::filesystem::remove_all(work_dir);

  // Told: each rank's fate-sharing line ("cohort: the job failed", or its initialize() failing
  // because of the failure), measured from the signal.
  if (signalled) {
    for (int r = 0; r < t.ranks; ++r) {
      if (t.trainer && r == t.rank) continue;
      std::string prefix = absl::StrCat("[rank ", r, "] ");
      for (const Line& l : t.lines) {
        if (!absl::StartsWith(l.text, prefix)) continue;
        if (absl::StrContains(l.text, "cohort: the job failed") ||
            absl::StrContains(l.text, "INIT_FAILED")) {
          t.told_s.push_back(absl::ToDoubleSeconds(l.at - *signalled));
          break;
        }
      }
    }
  }
}

// What the trial's outcome must be.
void Judge(const Flags& f, Trial& t) {
  if (!t.problems.empty()) return;
  if (!t.victim_found) return;  // Not running at that moment: only the leftover check applies.
  bool all_done = true;
  std::optional<std::string> checkpoint_step;
  bool checkpoints_agree = true;
  int checkpoints = 0;
  for (int r = 0; r < t.ranks; ++r) {
    all_done &= HasLine(t, absl::StrCat("[rank ", r, "] DONE rank=", r));
    for (const Line& l : t.lines) {
      std::string prefix = absl::StrCat("[rank ", r, "] CHECKPOINT rank=", r, " step=");
      if (!absl::StartsWith(l.text, prefix)) continue;
      ++checkpoints;
      std::string step = l.text.substr(prefix.size());
      if (checkpoint_step && *checkpoint_step != step) checkpoints_agree = false;
      checkpoint_step = step;
    }
  }
  if (!checkpoints_agree) t.problems.push_back("ranks checkpointed at different steps");
  if (t.exit_code == 0) {
    // A preemption: every rank checkpointed at one step, or the notice came too late to matter.
    bool preempted = checkpoints == t.ranks && checkpoints_agree;
    if (t.sig == SIGKILL && !all_done) {
      t.problems.push_back("exit 0 after a SIGKILL before every rank finished its steps");
    }
    if (t.sig == SIGTERM && !preempted && !all_done) {
      t.problems.push_back(absl::StrCat("exit 0 after a SIGTERM, but ", checkpoints, " of ",
                                        t.ranks, " ranks checkpointed"));
    }
    return;
  }
  // A failure: prompt, and the victim named as its cause.
  if (t.end_s > f.max_end_s) {
    t.problems.push_back(absl::StrFormat("the job ended %.3f s after the signal (bound %.1f s)",
                                         t.end_s, f.max_end_s));
  }
  // The cause's own status: the signal's (a crash elsewhere would show as another one).
  if (t.exit_code != 128 + t.sig) {
    t.problems.push_back(absl::StrCat("cohort-run exited ", t.exit_code, ", not ", 128 + t.sig,
                                      " (the status of the signalled process)"));
  }
  if (!HasLine(t, absl::StrCat("cohort-run: FAILED: ", t.Victim(), " "))) {
    t.problems.push_back(absl::StrCat("cohort-run did not name ", t.Victim(), " as the cause"));
  }
  // After its steps a rank has shut libdist down, which gives SIGTERM back to the program: a
  // death then, with nothing left to checkpoint.
  if (t.sig == SIGTERM && t.trainer && t.initialized_before && !all_done) {
    t.problems.push_back("a SIGTERM after initialize() failed the job instead of preempting it");
  }
  for (double told : t.told_s) {
    if (told > f.max_told_s) {
      t.problems.push_back(absl::StrFormat("a rank was told %.3f s after the signal (bound %.1f s)",
                                           told, f.max_told_s));
    }
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"chaos-test: randomized kills of cohort-run jobs at any moment"};
  app.add_option("--trials", f.trials, "Number of trials")->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the first trial (default: from the clock)");
  app.add_option("--bin-dir", f.bin_dir, "Where cohort-run and test-trainer are")
      ->capture_default_str();
  app.add_option("--max-end", f.max_end_s, "Bound on signal -> job ended, seconds")
      ->capture_default_str();
  app.add_option("--max-told", f.max_told_s, "Bound on signal -> every rank told, seconds")
      ->capture_default_str();
  app.add_option("--window", f.window_s, "Signals land this many seconds after the start")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "Training steps of each rank")->capture_default_str();
  app.add_flag("-v,--verbose", f.verbose, "Echo every job's output");
  CLI11_PARSE(app, argc, argv);
  if (f.seed == 0) f.seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) % 1000000007;
  std::printf("chaos-test: %d trials, seed %llu (replay one: --seed <its seed> --trials 1)\n",
              f.trials, static_cast<unsigned long long>(f.seed));
  std::fflush(stdout);

  int failed = 0, missed = 0, failures = 0, preemptions = 0;
  std::vector<double> ends, told;
  for (int i = 0; i < f.trials; ++i) {
    Trial t;
    t.index = i;
    t.seed = f.seed + i;
    std::mt19937_64 rng(t.seed);
    t.ranks = std::uniform_int_distribution<int>(2, 4)(rng);
    t.trainer = std::bernoulli_distribution(0.5)(rng);
    t.rank = std::uniform_int_distribution<int>(0, t.ranks - 1)(rng);
    t.sig = std::bernoulli_distribution(0.7)(rng) ? SIGKILL : SIGTERM;
    t.at_s = std::uniform_real_distribution<double>(0, f.window_s)(rng);
    // Half the jobs of an even size are pods of two ranks sharing a sidecar (the GPU node's
    // shape); a sidecar victim is then its pod's sidecar, found by its first rank.
    t.per_pod = t.ranks % 2 == 0 && std::bernoulli_distribution(0.5)(rng) ? 2 : 1;
    if (!t.trainer) t.rank -= t.rank % t.per_pod;
    RunTrial(f, t);
    Judge(f, t);
    if (!t.victim_found) ++missed;
    if (t.victim_found && t.exit_code != 0) {
      ++failures;
      if (t.end_s >= 0) ends.push_back(t.end_s);
      told.insert(told.end(), t.told_s.begin(), t.told_s.end());
    }
    if (t.victim_found && t.exit_code == 0 && t.sig == SIGTERM) ++preemptions;
    std::string verdict = t.problems.empty() ? "ok" : "FAILED";
    std::printf("%s: %s, exit %d", t.Describe().c_str(), verdict.c_str(), t.exit_code);
    if (!t.victim_found) std::printf(" (not running then)");
    if (t.end_s >= 0 && t.exit_code != 0) std::printf(", ended in %.3f s", t.end_s);
    if (!t.told_s.empty()) {
      std::printf(", told in max %.3f s", *std::max_element(t.told_s.begin(), t.told_s.end()));
    }
    std::printf("\n");
    if (!t.problems.empty()) {
      ++failed;
      for (const std::string& p : t.problems) std::printf("    %s\n", p.c_str());
      std::printf("    its output:\n");
      for (const Line& l : t.lines) std::printf("      %s\n", l.text.c_str());
    }
    std::fflush(stdout);
  }
  std::printf(
      "chaos-test: %d trials, %d failed; %d failures, %d preemptions, %d missed (the victim was "
      "not running); job ended after the signal: median %.3f s, max %.3f s; ranks told: "
      "median %.3f s, max %.3f s (%zu ranks)\n",
      f.trials, failed, failures, preemptions, missed, Percentile(ends, 0.5), Percentile(ends, 1),
      Percentile(told, 0.5), Percentile(told, 1), told.size());
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cohort::chaos

int main(int argc, char** argv) { return cohort::chaos::Main(argc, argv); }

// A small data-parallel training program for libdist: each rank computes the gradient of a
// linear model on its shard of a synthetic data set, the ranks average their gradients with an
// all-reduce and apply the same update, so the parameters stay identical (checked with
// AssertEqual at every checkpoint). At the preemption sync step it checkpoints the parameters;
// started again, it resumes from them (at another world size too: an elastic job keeps its global
// batch, see ShareOfBatch). `make demo` runs four of it as a DistributedJob and evicts one pod
// mid-run.
//
//   cohort-run -n 4 -- demo-trainer --steps 300 --checkpoint-dir /tmp/ckpt
//
// After a preemption checkpoint it exits with --preempted-exit-code (libdist's
// kPreemptedExitCode, 76: "checkpointed, restart me"), which cohort-operator restarts without
// counting a failure; pass 0 under cohort-run, which has no one to restart it.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

namespace {

constexpr int kFeatures = 16;
constexpr int kSamples = 8192;
constexpr int kBatchPerRank = 32;

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "demo-trainer: %s: %s\n", what, std::string(s.message()).c_str());
  return 1;
}

// The data set every rank can generate: y = x . w_true + noise, the same on every rank.
struct DataSet {
  std::vector<float> x, y;
  DataSet() : x(kSamples * kFeatures), y(kSamples) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w_true(kFeatures);
    for (int j = 0; j < kFeatures; ++j) w_true[j] = static_cast<float>(j % 5) - 2.0f;
    for (int i = 0; i < kSamples; ++i) {
      float dot = 0;
      for (int j = 0; j < kFeatures; ++j) {
        x[i * kFeatures + j] = normal(rng);
        dot += x[i * kFeatures + j] * w_true[j];
      }
      y[i] = dot + 0.1f * normal(rng);
    }
  }
};

// The global batch, and this rank's part of it. An elastic job (spec.elastic) may run fewer
// replica groups than it wants (COHORT_REPLICA_GROUPS of COHORT_DESIRED_REPLICA_GROUPS): the global
// batch stays what the whole job would take, kBatchPerRank per rank of the full size, and each
// rank of the smaller job works through a larger share of it in micro-batches of kBatchPerRank
// (gradient accumulation). Step `step`'s batch is the same samples whatever the world size.
struct BatchShare {
  int64_t global = 0;  // Samples per step, every rank together.
  int64_t first = 0;   // This rank's first sample in the step's batch,
  int64_t count = 0;   // and how many it takes.
  int64_t micro_batches = 0;
  int groups = 1, desired_groups = 1;
};

BatchShare ShareOfBatch(int rank, int ranks) {
  BatchShare b;
  const char* groups = std::getenv("COHORT_REPLICA_GROUPS");
  const char* desired = std::getenv("COHORT_DESIRED_REPLICA_GROUPS");
  if (groups != nullptr && desired != nullptr && std::atoi(groups) > 0 &&
      std::atoi(desired) >= std::atoi(groups)) {
    b.groups = std::atoi(groups);
    b.desired_groups = std::atoi(desired);
  }
  b.global = int64_t{kBatchPerRank} * ranks * b.desired_groups / b.groups;
  const int64_t base = b.global / ranks, extra = b.global % ranks;
  b.count = base + (rank < extra ? 1 : 0);
  b.first = rank * base + std::min<int64_t>(rank, extra);
  b.micro_batches = (b.count + kBatchPerRank - 1) / kBatchPerRank;
  return b;
}

// This rank's share of step `step`'s squared errors: the sums of their gradients (kFeatures
// values) and of the errors, so that one all-reduce (a sum) over the ranks, divided by the global
// batch, gives the mean gradient and loss of the whole batch.
std::vector<float> LocalGradient(const DataSet& data, const std::vector<float>& w,
                                 const BatchShare& share, int64_t step) {
  std::vector<float> g(kFeatures + 1, 0.0f);
  for (int64_t m = 0; m < share.micro_batches; ++m) {  // Accumulated micro-batch by micro-batch.
    for (int64_t b = m * kBatchPerRank; b < std::min<int64_t>((m + 1) * kBatchPerRank, share.count);
         ++b) {
      const int64_t i = (step * share.global + share.first + b) % kSamples;
      float err = -data.y[i];
      for (int j = 0; j < kFeatures; ++j) err += data.x[i * kFeatures + j] * w[j];
      for (int j = 0; j < kFeatures; ++j) g[j] += 2.0f * err * data.x[i * kFeatures + j];
      g[kFeatures] += err * err;
    }
  }
  return g;
}

std::string CheckpointPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank-", rank, ".ckpt");
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  int step_ms = 20;
  int barrier_every = 10;
  int barrier_timeout_s = 60;
  float learning_rate = 0.05f;
  std::string checkpoint_dir = "checkpoints";
  int preempted_exit_code = dist::kPreemptedExitCode;
  CLI::App app{"demo-trainer: data-parallel training with libdist"};
  app.add_option("--steps", steps, "Training steps")->capture_default_str();
  app.add_option("--step-ms", step_ms, "Extra simulated compute per step (ms)")
      ->capture_default_str();
  app.add_option("--barrier-every", barrier_every, "Barrier every N steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--barrier-timeout-s", barrier_timeout_s,
                 "How long a rank waits at a step barrier for the others before it fails the job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--learning-rate", learning_rate, "SGD step size")->capture_default_str();
  app.add_option("--checkpoint-dir", checkpoint_dir, "Where checkpoints go")->capture_default_str();
  app.add_option("--preempted-exit-code", preempted_exit_code,
                 "Exit status after the preemption checkpoint")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  absl::Time t0 = absl::Now();
  if (absl::Status s = dist::Initialize(); !s.ok()) {
    Fail("initialize", s);
    // Another process (or the coordination service) failed while this one was joining: this
    // one only follows (docs/libdist.md "Fate sharing").
    return absl::IsAborted(s) || absl::IsUnavailable(s) ? dist::kPeerFailureExitCode : 1;
  }
  const int rank = dist::ProcessIndex();
  const int n = dist::ProcessCount();
  absl::Duration init_time = absl::Now() - t0;
  std::printf("joined as rank %d of %d in %s\n", rank, n,
              absl::FormatDuration(absl::Trunc(init_time, absl::Milliseconds(1))).c_str());
  std::fflush(stdout);
  absl::StatusOr<std::unique_ptr<dist::Communicator>> comm = dist::Communicator::Create();
  if (!comm.ok()) return Fail("communicator", comm.status());
  std::printf("collectives: %s\n", (*comm)->Describe().c_str());
  const BatchShare share = ShareOfBatch(rank, n);
  std::printf(
      "global batch %lld: %d ranks (%d of %d replica groups), this rank %lld samples in %lld "
      "micro-batches of %d\n",
      static_cast<long long>(share.global), n, share.groups, share.desired_groups,
      static_cast<long long>(share.count), static_cast<long long>(share.micro_batches),
      kBatchPerRank);
  std::fflush(stdout);  // Seen now, not after the first step: these lines say the job formed.

  // A checkpoint from an earlier restart attempt: carry on after it with its parameters. Every
  // rank's holds the same parameters (data parallel), so after a resize a rank whose own is older
  // (or missing: it had another rank before) takes rank 0's.
  std::vector<float> w(kFeatures, 0.0f);
  int64_t resumed_from = -1;
  for (int from : {rank, 0}) {
    std::ifstream saved(CheckpointPath(checkpoint_dir, from));
    std::string word;
    int64_t at = -1;
    if (!(saved >> word >> at) || word != "step" || at <= resumed_from || !(saved >> word) ||
        word != "params") {
      continue;
    }
    resumed_from = at;
    for (float& v : w) {
      std::string hex;
      saved >> hex;
      v = std::strtof(hex.c_str(), nullptr);
    }
  }
  if (resumed_from >= 0) {
    std::printf("resumed from the checkpoint at step %lld\n", static_cast<long long>(resumed_from));
  }
  dist::HostArray params = dist::HostArray::Of(dist::DataType::kFloat32, {kFeatures}, w);
  if (absl::Status s =
          dist::AssertEqual(**comm, params, "ranks resumed with different parameters.");
      !s.ok()) {
    return Fail("parameters after start", s);
  }

  const DataSet data;
  absl::Time train_start = absl::Now();
  int64_t step = resumed_from + 1;
  int64_t checkpoint_step = -1;
  int barriers = 0;
  float loss = NAN;
  for (; step < steps; ++step) {
    std::vector<float> g = LocalGradient(data, w, share, step);
    if (absl::Status s = (*comm)->AllReduce(g.data(), g.data(), g.size(), dist::DataType::kFloat32,
                                            dist::ReduceOp::kSum);
        !s.ok()) {
      return Fail("all-reduce of the gradients", s);
    }
    for (float& v : g) v /= static_cast<float>(share.global);
    for (int j = 0; j < kFeatures; ++j) w[j] -= learning_rate * g[j];
    loss = g[kFeatures];
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // The rest of "compute".
    absl::StatusOr<bool> sync = dist::ReachedPreemptionSyncPoint(step);
    if (!sync.ok()) return Fail("preemption sync", sync.status());
    if (*sync) {
      params = dist::HostArray::Of(dist::DataType::kFloat32, {kFeatures}, w);
      if (absl::Status s = dist::AssertEqual(**comm, params, "parameters diverged."); !s.ok()) {
        return Fail("parameters at the checkpoint", s);
      }
      std::filesystem::create_directories(checkpoint_dir);
      std::ofstream out(CheckpointPath(checkpoint_dir, rank));
      out << "step " << step << "\nparams";
      for (float v : w) {
        char hex[32];
        std::snprintf(hex, sizeof(hex), " %a", v);
        out << hex;
      }
      out << "\n";
      checkpoint_step = step;
      std::printf("preemption: checkpoint written at step %lld (loss %.4f)\n",
                  static_cast<long long>(step), loss);
      break;
    }
    if ((step + 1) % barrier_every == 0) {
      if (absl::Status s = dist::Barrier("demo/step", absl::Seconds(barrier_timeout_s)); !s.ok()) {
        return Fail("step barrier", s);
      }
      ++barriers;
      if (rank == 0 && ((step + 1) % (barrier_every * 5) == 0 || step + 1 == barrier_every)) {
        std::printf("step %lld/%d loss %.4f\n", static_cast<long long>(step + 1), steps, loss);
      }
    }
    std::fflush(stdout);
  }
  params = dist::HostArray::Of(dist::DataType::kFloat32, {kFeatures}, w);
  if (absl::Status s = dist::AssertEqual(**comm, params, "parameters diverged."); !s.ok()) {
    return Fail("parameters at the end", s);
  }
  uint64_t hash = 1469598103934665603ull;
  for (uint8_t b : params.bytes) hash = (hash ^ b) * 1099511628211ull;
  absl::Duration train_time = absl::Now() - train_start;
  comm->reset();
  if (absl::Status s = dist::Shutdown(); !s.ok()) return Fail("shutdown", s);
  std::printf(
      "RESULT rank=%d steps=%lld checkpoint_step=%lld resumed_from=%lld barriers=%d loss=%.4f "
      "params=%016llx init_ms=%lld train_ms=%lld\n",
      rank, static_cast<long long>(checkpoint_step >= 0 ? checkpoint_step : step),
      static_cast<long long>(checkpoint_step), static_cast<long long>(resumed_from), barriers, loss,
      static_cast<unsigned long long>(hash),
      static_cast<long long>(absl::ToInt64Milliseconds(init_time)),
      static_cast<long long>(absl::ToInt64Milliseconds(train_time)));
  return checkpoint_step >= 0 ? preempted_exit_code : 0;
}

// Fuzz target: a DistributedJob object as the API server returns it (JSON; a cluster whose CRD has
// no schema passes anything through), read by the operator: ParseDistributedJob, Validate, the
// status written back, and for a valid job the children it creates and the first decisions.
//
// The input is JSON text (corpus/distributed_job/ has examples; input that is not JSON is
// ignored). Invariants:
//  - nothing throws (an exception would end the operator's worker) and parsing is deterministic;
//  - every validation error names its field (starts with "metadata" or "spec");
//  - the status round-trips: StatusToJson -> ParseDistributedJob gives the same status;
//  - for a valid job: its pods carry the rank, restart attempt and environment contract
//    (common/env.h, docs/operator.md), have DNS-label names, the sidecar first among the init
//    containers, restartPolicy Never, and ObservePod reads back the rank and restart attempt;
//  - Decide() on no pods and on the job's own pods never throws, creates only ranks 0..replicas-1,
//    each once, and writes a status that serializes (valid UTF-8).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "common/log.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/job_decision.h"
#include "tests/fuzz/fuzz_util.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

constexpr int32_t kMaxPodsBuilt = 64;
const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

// Runs `fn`; an exception is a finding.
template <typename Fn>
auto NoThrow(const char* what, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    fuzz::Fail(__FILE__, __LINE__, absl::StrCat(what, " threw: ", e.what()));
  }
}

bool SameStatus(const DistributedJobStatus& a, const DistributedJobStatus& b) {
  return a.phase == b.phase && a.conditions == b.conditions && a.replicas == b.replicas &&
         a.ready == b.ready && a.active == b.active && a.succeeded == b.succeeded &&
         a.failed == b.failed && a.restarts == b.restarts && a.preemptions == b.preemptions &&
         a.restart_attempt == b.restart_attempt && a.coordinator_address == b.coordinator_address &&
         a.observed_generation == b.observed_generation && a.start_time == b.start_time &&
         a.completion_time == b.completion_time;
}

// `json.dump()` throws on a string that is not UTF-8, and every object the operator writes is
// dumped by its HTTP client.
void CheckSerializes(const json& object, const char* what) {
  NoThrow(what, [&] { return object.dump(); });
}

// The env entries of a container named `name`.
std::vector<const json*> EnvNamed(const json& container, const std::string& name) {
  std::vector<const json*> out;
  if (!container.contains("env") || !container["env"].is_array()) return out;
  for (const json& e : container["env"]) {
    if (e.is_object() && e.contains("name") && e["name"] == name) out.push_back(&e);
  }
  return out;
}

void CheckContract(const json& container, const DistributedJob& job, int32_t rank,
                   int32_t attempt) {
  auto expect = [&](const char* name, const std::string& value) {
    std::vector<const json*> entries = EnvNamed(container, name);
    FUZZ_CHECK(entries.size() == 1, "container ", container.value("name", "?"), " has ",
               entries.size(), " ", name, " entries");
    FUZZ_CHECK((*entries[0]).value("value", "") == value, "container ",
               container.value("name", "?"), ": ", name, "=", entries[0]->dump(), ", expected ",
               value);
  };
  expect(env::kProcessId, absl::StrCat(rank));
  expect(env::kNumProcesses, absl::StrCat(job.spec.replicas));
  expect(env::kRestartAttempt, absl::StrCat(attempt));
  expect(env::kCoordinatorAddress, CoordinatorAddress(job));
}

void CheckPod(const json& pod, const DistributedJob& job, int32_t rank, int32_t attempt) {
  CheckSerializes(pod, "a pod's JSON");
  const std::string name = PodName(job, rank);
  FUZZ_CHECK(name.size() <= 63, "pod name '", name,
             "' of a valid job is longer than 63 characters");
  FUZZ_CHECK(pod["metadata"]["name"] == name, "pod named ", pod["metadata"]["name"].dump());
  const json& labels = pod["metadata"]["labels"];
  FUZZ_CHECK(labels[kRankLabel] == absl::StrCat(rank), "rank label ", labels[kRankLabel].dump());
  FUZZ_CHECK(labels[kRestartAttemptLabel] == absl::StrCat(attempt), "restart attempt label ",
             labels[kRestartAttemptLabel].dump());
  FUZZ_CHECK(labels[kJobNameLabel] == job.name, "job label ", labels[kJobNameLabel].dump());
  const json& spec = pod["spec"];
  FUZZ_CHECK(spec["restartPolicy"] == "Never", "restartPolicy ", spec["restartPolicy"].dump());
  FUZZ_CHECK(spec["hostname"] == name && spec["subdomain"] == job.name, "hostname ",
             spec["hostname"].dump(), " subdomain ", spec["subdomain"].dump());
  FUZZ_CHECK(spec["initContainers"].is_array() && !spec["initContainers"].empty() &&
                 spec["initContainers"][0]["name"] == "cohort-sidecar",
             "the sidecar is not the first init container: ", spec["initContainers"].dump());
  CheckContract(spec["initContainers"][0], job, rank, attempt);
  FUZZ_CHECK(spec["containers"].is_array() && !spec["containers"].empty(),
             "a pod without containers");
  for (const json& c : spec["containers"]) CheckContract(c, job, rank, attempt);

  std::optional<ObservedPod> seen = NoThrow("ObservePod", [&] { return ObservePod(pod); });
  FUZZ_CHECK(seen.has_value(), "ObservePod does not recognize a pod the operator built");
  FUZZ_CHECK(seen->rank == rank && seen->restart_attempt == attempt, "ObservePod read rank ",
             seen->rank, " attempt ", seen->restart_attempt, " from a pod built for rank ", rank,
             " attempt ", attempt);
  FUZZ_CHECK(seen->name == name, "ObservePod read name ", seen->name);
}

void CheckDecision(const DistributedJob& job, const std::vector<ObservedPod>& pods) {
  Decision d = NoThrow("Decide", [&] { return Decide(job, pods, kNow); });
  std::set<int32_t> ranks;
  for (int32_t r : d.create_ranks) {
    FUZZ_CHECK(r >= 0 && r < job.spec.replicas, "Decide creates rank ", r, " of ",
               job.spec.replicas);
    FUZZ_CHECK(ranks.insert(r).second, "Decide creates rank ", r, " twice");
  }
  DistributedJob updated = job;
  updated.status = d.status;
  json status = NoThrow("StatusToJson", [&] { return StatusToJson(updated); });
  CheckSerializes(status, "the decided status");
  for (const Event& e : d.events) {
    CheckSerializes(json{{"reason", e.reason}, {"message", e.message}}, "an Event");
  }
}

void Fuzz(const json& object) {
  absl::StatusOr<DistributedJob> parsed =
      NoThrow("ParseDistributedJob", [&] { return ParseDistributedJob(object); });
  absl::StatusOr<DistributedJob> again =
      NoThrow("ParseDistributedJob", [&] { return ParseDistributedJob(object); });
  FUZZ_CHECK(parsed.ok() == again.ok(), "parsing the same object twice disagrees");
  if (!parsed.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()) && !parsed.status().message().empty(),
               "parse error ", parsed.status().ToString());
    return;
  }
  const DistributedJob& job = *parsed;
  std::vector<std::string> errors = NoThrow("Validate", [&] { return Validate(job); });
  FUZZ_CHECK(errors == NoThrow("Validate", [&] { return Validate(*again); }),
             "Validate is not deterministic");
  for (const std::string& e : errors) {
    FUZZ_CHECK(absl::StartsWith(e, "metadata") || absl::StartsWith(e, "spec"),
               "a validation error that names no field: ", e);
  }

  // The status the operator writes reads back the same.
  json status = NoThrow("StatusToJson", [&] { return StatusToJson(job); });
  CheckSerializes(status, "StatusToJson");
  json written = {{"metadata", {{"name", job.name}}}, {"status", status}};
  absl::StatusOr<DistributedJob> reread =
      NoThrow("ParseDistributedJob", [&] { return ParseDistributedJob(written); });
  FUZZ_CHECK(reread.ok(), "the written status does not parse: ", reread.status().ToString());
  FUZZ_CHECK(SameStatus(reread->status, job.status),
             "the status does not round-trip: ", status.dump());

  CheckDecision(job, {});
  if (!errors.empty()) return;

  FUZZ_CHECK(
      CoordinatorAddress(job) == absl::StrCat(job.name, "-0.", job.name, ".",
                                              job.namespace_.empty() ? "default" : job.namespace_,
                                              ".svc:", job.spec.coordinator_port),
      "coordinator address ", CoordinatorAddress(job));
  CheckSerializes(NoThrow("BuildService", [&] { return BuildService(job); }), "BuildService");
  CheckSerializes(NoThrow("BuildTokenSecret", [&] { return BuildTokenSecret(job, "token"); }),
                  "BuildTokenSecret");
  const int32_t attempt = job.status.restart_attempt;
  std::vector<ObservedPod> pods;
  for (int32_t rank = 0; rank < job.spec.replicas && rank < kMaxPodsBuilt; ++rank) {
    json pod = NoThrow("BuildPod", [&] { return BuildPod(job, rank, attempt); });
    CheckPod(pod, job, rank, attempt);
    pods.push_back(*ObservePod(pod));
  }
  if (job.spec.replicas > kMaxPodsBuilt) {
    int32_t last = job.spec.replicas - 1;
    CheckPod(NoThrow("BuildPod", [&] { return BuildPod(job, last, attempt); }), job, last, attempt);
  }
  CheckDecision(job, pods);
}

}  // namespace
}  // namespace cohort::op

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cohort::SetLogLevel(cohort::LogLevel::kNone);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json object =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  cohort::op::Fuzz(object);
  return 0;
}

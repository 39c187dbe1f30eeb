// Fuzz target: the Kubernetes JSON the operator reads from the API server: error bodies (Status
// objects), watch streams, lists, pods, and the DistributedJob, through the same code the operator
// runs (kube/api_response.h, Informer, ObservePod, Reconciler) over an in-memory client.
//
// The input has sections, each starting with a header line (corpus/kube_json/ has examples):
//   === status CODE METHOD    an HTTP error response's body
//   === watch                 a watch response body (one JSON event per line)
//   === pods                  the pod list the API server returns ({"items": [...]})
//   === job                   the DistributedJob the reconciler gets
//
// Invariants:
//  - nothing throws or crashes (an exception ends the operator's worker or watch thread);
//  - an error response is never OK, maps its code as KubeClient documents, names the code, and
//    quotes a Status object's message;
//  - a watch stream gives the same events, in the same order, and the same outcome however it is
//    split into chunks; an ERROR event with code 410 reads as Gone (relist); a handler returning
//    false stops delivery at once;
//  - the informer delivers lists and events without throwing, with ADDED/MODIFIED/DELETED for a
//    list's changes;
//  - a reconcile pass over the job and pods never throws, never writes an object that cannot be
//    serialized (invalid UTF-8), names every pod it creates or deletes, and writes the status at
//    most once.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/log.h"
#include "kube/api_response.h"
#include "kube/informer.h"
#include "kube/json_fields.h"
#include "kube/kube_client.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/job_decision.h"
#include "operator/reconciler/reconciler.h"
#include "tests/fuzz/fuzz_util.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

template <typename Fn>
auto NoThrow(const char* what, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    fuzz::Fail(__FILE__, __LINE__, absl::StrCat(what, " threw: ", e.what()));
  }
}

struct Section {
  std::vector<std::string> header;  // "status", "409", "PUT"
  std::string body;
};

std::vector<Section> ParseSections(absl::string_view input) {
  std::vector<Section> sections;
  size_t pos = 0;
  while (pos < input.size()) {
    size_t end = input.find('\n', pos);
    if (end == absl::string_view::npos) end = input.size();
    absl::string_view line = input.substr(pos, end - pos);
    pos = end + 1;
    if (absl::StartsWith(line, "=== ")) {
      sections.push_back(Section{absl::StrSplit(line.substr(4), ' ', absl::SkipEmpty()), ""});
    } else if (!sections.empty()) {
      absl::StrAppend(&sections.back().body, line, end < input.size() ? "\n" : "");
    }
  }
  return sections;
}

// --- Error responses --------------------------------------------------------------------------

absl::StatusCode ExpectedCode(const std::string& method, int code) {
  switch (code) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return method == "POST" ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    default:
      return code == 429 || code >= 500 ? absl::StatusCode::kUnavailable
                                        : absl::StatusCode::kUnknown;
  }
}

void FuzzStatus(const Section& s) {
  int code = 500;
  if (s.header.size() > 1 && !absl::SimpleAtoi(s.header[1], &code)) code = 500;
  std::string method = s.header.size() > 2 ? s.header[2] : "GET";
  absl::Status st = NoThrow("StatusFromResponse", [&] {
    return kube::StatusFromResponse(method, "/api/v1/x", code, s.body);
  });
  FUZZ_CHECK(!st.ok(), "HTTP ", code, " read as OK");
  FUZZ_CHECK(st.code() == ExpectedCode(method, code), "HTTP ", code, " ", method, " read as ",
             st.ToString());
  FUZZ_CHECK(absl::StrContains(st.message(), absl::StrCat("(HTTP ", code, ")")),
             "the error does not name HTTP ", code, ": ", st.message());
  json body = json::parse(s.body, nullptr, false);
  if (body.is_object() && body.contains("message") && body["message"].is_string()) {
    FUZZ_CHECK(absl::StrContains(st.message(), body["message"].get<std::string>()),
               "the error does not quote the Status message: ", st.message());
  }
}

// --- Watch streams ----------------------------------------------------------------------------

struct Decoded {
  std::vector<json> events;
  absl::Status status;
  bool ended = false;  // Feed returned false.
};

// Feeds `body` in chunks ending at `cuts` (ascending offsets); `stop_after` events, the handler
// returns false (0: never).
Decoded Decode(const std::string& body, const std::vector<size_t>& cuts, size_t stop_after) {
  Decoded out;
  kube::WatchStreamDecoder decoder("/api/v1/pods?watch=1");
  auto on_event = [&](const json& e) {
    FUZZ_CHECK(e.is_object(), "a watch event that is not an object: ", e.dump());
    out.events.push_back(e);
    return stop_after == 0 || out.events.size() < stop_after;
  };
  size_t start = 0;
  for (size_t i = 0; i <= cuts.size() && !out.ended; ++i) {
    size_t end = i < cuts.size() ? std::min(cuts[i], body.size()) : body.size();
    if (end < start) continue;
    bool more = NoThrow("WatchStreamDecoder::Feed", [&] {
      return decoder.Feed(absl::string_view(body).substr(start, end - start), on_event);
    });
    if (!more) {
      out.ended = true;
      FUZZ_CHECK(!decoder.Feed("{}\n", on_event), "Feed goes on after the stream ended");
    }
    start = end;
  }
  FUZZ_CHECK(!out.ended || decoder.cancelled() || !decoder.status().ok(),
             "Feed returned false with neither a cancellation nor an error");
  out.status = decoder.status();
  return out;
}

std::vector<json> FuzzWatch(const std::string& body) {
  Decoded whole = Decode(body, {}, 0);
  // The same bytes in other chunkings: every byte alone (short streams), and cut at the positions
  // of a simple generator seeded by the size.
  std::vector<std::vector<size_t>> chunkings;
  if (body.size() <= 512) {
    std::vector<size_t> each;
    for (size_t i = 1; i < body.size(); ++i) each.push_back(i);
    chunkings.push_back(each);
  }
  std::vector<size_t> cuts;
  uint64_t x = body.size() * 2654435761u + 1;
  for (size_t at = 0; at < body.size();) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    at += 1 + (x >> 33) % 64;
    cuts.push_back(at);
  }
  chunkings.push_back(cuts);
  for (const auto& c : chunkings) {
    Decoded d = Decode(body, c, 0);
    FUZZ_CHECK(d.events == whole.events, "a watch stream split differently gives ", d.events.size(),
               " events instead of ", whole.events.size());
    FUZZ_CHECK(d.status == whole.status && d.ended == whole.ended,
               "a watch stream split differently ends with ", d.status.ToString(), " instead of ",
               whole.status.ToString());
  }
  if (!whole.status.ok()) {
    FUZZ_CHECK(whole.ended, "an ERROR event did not end the stream");
  }
  // A handler that says stop is obeyed at once.
  if (whole.events.size() > 1) {
    Decoded stopped = Decode(body, cuts, 1);
    FUZZ_CHECK(stopped.events.size() == 1 && stopped.ended, "after the handler said stop, ",
               stopped.events.size(), " events were delivered");
  }
  return whole.events;
}

void CheckGone(const std::string& body, const absl::Status& status) {
  // The first ERROR event among the complete lines ends the stream.
  std::vector<absl::string_view> lines = absl::StrSplit(body, '\n');
  lines.pop_back();  // After the last newline: not a complete line.
  for (absl::string_view line : lines) {
    json e = json::parse(line, nullptr, false);
    if (!e.is_object() || kube::StringMember(e, "type") != "ERROR") continue;
    if (kube::IntMember(kube::Member(e, "object"), "code") == 410) {
      FUZZ_CHECK(kube::IsGone(status),
                 "a 410 ERROR event does not read as Gone: ", status.ToString());
    }
    break;
  }
}

// --- An API server in memory ------------------------------------------------------------------

// Serves the fuzzed job, pod list and watch events, and checks what the operator writes.
class FuzzKubeClient final : public kube::KubeClient {
 public:
  std::optional<json> job;
  json pods = json{{"items", json::array()}};
  std::vector<json> events;
  absl::Status watch_end;
  int status_writes = 0;

  absl::StatusOr<json> Get(const kube::Resource& r, const std::string& ns,
                           const std::string& name) override {
    if (r.plural == kDistributedJobs.plural && job.has_value()) return *job;
    return absl::NotFoundError(absl::StrCat(r.plural, "/", name, " not found"));
  }
  absl::StatusOr<json> List(const kube::Resource& r, const std::string& ns,
                            const std::string& selector, ListFields fields) override {
    return pods;
  }
  absl::StatusOr<json> Create(const kube::Resource& r, const std::string& ns,
                              const json& object) override {
    return Write("create", r, object);
  }
  absl::StatusOr<json> Update(const kube::Resource& r, const std::string& ns,
                              const json& object) override {
    return Write("update", r, object);
  }
  absl::StatusOr<json> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                    const json& object) override {
    ++status_writes;
    return Write("update status of", r, object);
  }
  absl::StatusOr<json> MergePatch(const kube::Resource& r, const std::string& ns,
                                  const std::string& name, const json& patch,
                                  bool status) override {
    FUZZ_CHECK(!name.empty(), "a patch of ", r.plural, " without a name");
    return Write("patch", r, patch);
  }
  absl::Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                      std::optional<int64_t> grace_period_seconds) override {
    FUZZ_CHECK(!name.empty(), "a delete of ", r.plural,
               " without a name (that addresses the collection)");
    return absl::OkStatus();
  }
  absl::Status Watch(const kube::Resource& r, const std::string& ns,
                     const kube::WatchOptions& options,
                     const std::function<bool(const json&)>& on_event) override {
    for (const json& e : events) {
      if (!on_event(e)) return absl::CancelledError("watch cancelled");
    }
    return watch_end;
  }

 private:
  absl::StatusOr<json> Write(const char* verb, const kube::Resource& r, const json& object) {
    // What the HTTP client sends: dump() throws on a string that is not UTF-8.
    std::string text = NoThrow("serializing a written object", [&] { return object.dump(); });
    if (r.plural != kube::kEvents.plural) {
      FUZZ_CHECK(!kube::StringMember(kube::Member(object, "metadata"), "name").empty(), verb, " ",
                 r.plural, " without a name: ", text.substr(0, 200));
    }
    return object;
  }
};

void FuzzInformer(FuzzKubeClient& client) {
  kube::Informer informer(&client, kube::kPods, "ml", "",
                          [&](const std::string& type, const json& object) {
                            (void)NoThrow("ObservePod", [&] { return ObservePod(object); });
                            (void)kube::ObjectKey(object);
                          });
  for (int i = 0; i < 2; ++i) {
    absl::Status s = NoThrow("Informer::RunOnce", [&] { return informer.RunOnce(); });
    (void)s;
  }
}

// A job of thousands of pods takes the reconciler the same paths as one of 64, only slower: under
// ASan the 4,102 pods of one input took 87 s, far past libFuzzer's per-input timeout (10 s), so a
// run that drew such an input failed. Larger values are cut to kMaxReplicas.
constexpr int64_t kMaxReplicas = 64;
void CapReplicas(nlohmann::json& job) {
  if (!job.is_object() || !job.contains("spec") || !job["spec"].is_object()) return;
  nlohmann::json& spec = job["spec"];
  // As a number of any kind: the API reads 4102.0 as 4102.
  if (spec.contains("replicas") && spec["replicas"].is_number() &&
      spec["replicas"].get<double>() > kMaxReplicas) {
    spec["replicas"] = kMaxReplicas;
  }
}

void FuzzReconcile(FuzzKubeClient& client) {
  FakeClock clock;
  Reconciler reconciler(
      &client, &clock, [] { return std::string("token"); }, /*pod_create_parallelism=*/1);
  for (int pass = 0; pass < 2; ++pass) {
    int writes = client.status_writes;
    ReconcileReport report;
    absl::StatusOr<std::optional<absl::Duration>> r =
        NoThrow("Reconcile", [&] { return reconciler.Reconcile("ml", "train", &report); });
    FUZZ_CHECK(client.status_writes - writes <= 1, "one reconcile pass wrote the status ",
               client.status_writes - writes, " times");
    clock.Advance(absl::Seconds(30));
  }
}

}  // namespace
}  // namespace cohort::op

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cohort::SetLogLevel(cohort::LogLevel::kNone);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::op;
  namespace kube = cohort::kube;
  std::vector<Section> sections =
      ParseSections(absl::string_view(reinterpret_cast<const char*>(data), size));
  FuzzKubeClient client;
  for (const Section& s : sections) {
    if (s.header.empty()) continue;
    const std::string& kind = s.header[0];
    if (kind == "status") {
      FuzzStatus(s);
    } else if (kind == "watch") {
      client.events = FuzzWatch(s.body);
      kube::WatchStreamDecoder decoder("/w");
      decoder.Feed(s.body, [](const nlohmann::json&) { return true; });
      client.watch_end = decoder.status();
      CheckGone(s.body, client.watch_end);
    } else if (kind == "pods") {
      nlohmann::json pods = nlohmann::json::parse(s.body, nullptr, false);
      if (!pods.is_discarded()) client.pods = pods;
      for (const nlohmann::json& p : kube::ArrayMember(pods, "items")) {
        (void)NoThrow("ObservePod", [&] { return ObservePod(p); });
      }
    } else if (kind == "job") {
      nlohmann::json job = nlohmann::json::parse(s.body, nullptr, false);
      CapReplicas(job);
      if (!job.is_discarded()) client.job = job;
    }
  }
  FuzzInformer(client);
  FuzzReconcile(client);
  return 0;
}

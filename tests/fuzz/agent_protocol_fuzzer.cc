// Fuzz target: the agent protocol (proto/cohort/agent/v1/agent.proto), what a trainer sends its
// sidecar over the Unix socket, as far down as it goes without sockets: each request message is
// taken through its wire encoding, the Session stream's framing (coordination/wire/
// session_framing.h) where it has one, and then to this rank's Agent the way AgentRpcService
// forwards it, with the coordination service's real handler behind the Agent (in process, the
// stub the Agent's unit tests use). AgentRpcService itself needs a live gRPC call for every method
// (its reactors and the Attach stream), so its request -> Agent mapping is repeated here (Forward
// and Attach in sidecar/agent/agent_rpc_service.cc); keep the two in step.
//
// The input is a script, one line per message (corpus/agent_protocol/ has examples):
//   job N [attempt]                          first line only: the sidecar serves rank 0 of N (1..4)
//   <Method> <text-format request>           e.g.  InsertKeyValue kv { key: "a" value: "b" }
//                                            (an empty request: the method alone, "ShutdownTask")
//   peer R barrier ID | peer R set KEY VALUE | peer R error | peer R preempt | peer R shutdown
//   detach                                   the trainer's attach stream broke
// <Method> is one of the Agent service's RPCs; the request is its request type in protobuf text
// format (what does not parse is skipped, as gRPC would refuse it). Ranks 1..N-1 register directly
// with the service before the script runs.
//
// Invariants:
//  - every request survives its wire encoding unchanged, and every key-value or barrier request and
//    its response survive the Session framing (SetCall/PutResult/TakeResult) unchanged;
//  - every call completes exactly once (by the end, when the agent is destroyed); a trainer whose
//    rank joined gets a Connected event with a nonzero incarnation, then at most one failure and at
//    most one preemption notice; one whose rank could not join gets no events;
//  - key-value reads return what rank 0 or a peer wrote; a barrier rank 0 passes was called by
//    every peer as often; a second wait in a barrier already in progress fails at once.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cohort/agent/v1/agent.pb.h"
#include "common/clock.h"
#include "common/log.h"
#include "coordination/client/agent.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/rpc_handler.h"
#include "coordination/wire/proto_convert.h"
#include "coordination/wire/session_framing.h"
#include "tests/coordination/client/in_process_stub.h"
#include "tests/fuzz/fuzz_util.h"

namespace cohort::coordination {
namespace {

namespace agentpb = ::cohort::agent::v1;
using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

constexpr size_t kMaxLines = 200;
constexpr int kMaxTasks = 4;

class QuietErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

// The request, as the server would receive it from the wire. False when it does not parse.
bool ParseRequest(const std::string& text, Message* out) {
  google::protobuf::TextFormat::Parser parser;
  QuietErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, out)) return false;
  std::string wire = out->SerializeAsString();
  std::unique_ptr<Message> reread(out->New());
  // A proto3 string that is not UTF-8 is refused when parsed (gRPC answers INTERNAL): such a
  // request never reaches the sidecar's handlers.
  if (!reread->ParseFromString(wire)) return false;
  FUZZ_CHECK(MessageDifferencer::Equals(*out, *reread), out->GetTypeName(),
             " changed on the wire: ", out->ShortDebugString(), " -> ", reread->ShortDebugString());
  return true;
}

// A key-value or barrier request travels in its own field of SessionRequest.
template <typename Request>
void CheckSessionRequest(const Request& request) {
  pb::SessionRequest framed;
  framed.set_call_id(7);
  SetCall(&framed, request);
  pb::SessionRequest received;
  FUZZ_CHECK(received.ParseFromString(framed.SerializeAsString()),
             "a SessionRequest does not parse");
  const google::protobuf::OneofDescriptor* call = received.GetDescriptor()->FindOneofByName("call");
  const google::protobuf::FieldDescriptor* field =
      received.GetReflection()->GetOneofFieldDescriptor(received, call);
  FUZZ_CHECK(field != nullptr && field->message_type() == Request::descriptor(),
             Request::descriptor()->name(), " travels in the Session stream's field ",
             field ? field->name() : "(none)");
  FUZZ_CHECK(
      MessageDifferencer::Equals(received.GetReflection()->GetMessage(received, field), request),
      Request::descriptor()->name(), " changed in the Session stream");
}

// ... and its result comes back in the response's.
template <typename Response>
void CheckSessionResponse(const Response& response) {
  pb::SessionResponse framed;
  PutResult(&framed, response);
  pb::SessionResponse received;
  FUZZ_CHECK(received.ParseFromString(framed.SerializeAsString()),
             "a SessionResponse does not parse");
  Response out;
  TakeResult(&received, &out);
  if constexpr (std::is_same_v<Response, pb::InsertKeyValueResponse> ||
                std::is_same_v<Response, pb::DeleteKeyValueResponse> ||
                std::is_same_v<Response, pb::CancelBarrierResponse>) {
    return;  // No result travels.
  } else {
    FUZZ_CHECK(MessageDifferencer::Equals(out, response), Response::descriptor()->name(),
               " changed in the Session stream: ", response.ShortDebugString(), " -> ",
               out.ShortDebugString());
  }
}

std::string Normalize(const std::string& key) {
  std::vector<std::string> parts = absl::StrSplit(key, '/', absl::SkipEmpty());
  return absl::StrJoin(parts, "/");
}

struct Call {
  std::string what;
  int completions = 0;
  absl::Status status;
  std::optional<std::string> value;  // Reads.
  std::string key;                   // Reads: normalized.
  int64_t barrier_instance = -1;     // Barriers: rank 0's call count of the id before this one.
  std::string barrier_id;
  std::set<TaskId> participants;
};

class Harness {
 public:
  Harness(int n, std::optional<int32_t> attempt) : n_(n), attempt_(attempt) {
    ServiceConfig config;
    config.num_tasks = n;
    config.restart_attempt = attempt;
    service_ = std::make_unique<CoordinationService>(config, &clock_);
    handler_ = std::make_unique<CoordinationRpcHandler>(service_.get(), ReplyBudget::Create());
    for (TaskId t = 1; t < n; ++t) {
      RegisterArgs args{t, PeerIncarnation(t), n, "peer", 200 + t, attempt, {}, {}, {}};
      service_->RegisterTask(args, [](absl::Status) {});
    }
  }

  ~Harness() {
    // The agent stops first (it fails what still waits and withdraws from the service), then the
    // service; each call must have completed exactly once.
    agent_.reset();
    service_.reset();
    for (const auto& c : calls_) {
      FUZZ_CHECK(c->completions == 1, c->what, " completed ", c->completions, " times");
    }
    absl::MutexLock lock(&events_mu_);
    if (connect_status_.has_value() && !connect_status_->ok()) {
      // Attach ends with the error (AgentRpcService finishes the stream with it): no events.
      FUZZ_CHECK(failures_ == 0 && preemptions_ == 0, "an agent that could not join (",
                 connect_status_->ToString(), ") delivered events");
    }
  }

  void Run(const fuzz::Words& w, const std::string& rest) {
    const std::string& method = w[0];
    if (method == "peer") return Peer(w);
    if (method == "detach") return Detach();
    if (method == "Attach") {
      agentpb::AttachRequest req;
      if (ParseRequest(rest, &req)) Attach(req);
      return;
    }
    // Forwarded calls, as AgentRpcService::Forward does them.
    if (method == "InsertKeyValue") {
      Forward<pb::InsertKeyValueRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        CheckSessionResponse(pb::InsertKeyValueResponse());
        std::string key = Normalize(req.kv().key());
        std::string value = req.kv().value();
        in_flight_[key] = value;  // A waiting get of the key completes before this call does.
        agent_->InsertKeyValue(req.kv().key(), req.kv().value(), req.allow_overwrite(),
                               [this, call, key, value](absl::Status s) {
                                 in_flight_.erase(key);
                                 if (s.ok()) kv_[key] = value;
                                 Complete(call, s);
                               });
      });
    } else if (method == "GetKeyValue") {
      Forward<pb::GetKeyValueRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        call->key = Normalize(req.key());
        std::string key = req.key();
        agent_->GetKeyValue(key, absl::Milliseconds(req.timeout_ms()),
                            [this, call, key](absl::StatusOr<std::string> v) {
                              pb::GetKeyValueResponse resp;
                              if (v.ok()) {
                                resp.mutable_kv()->set_key(key);
                                resp.mutable_kv()->set_value(*v);
                                call->value = *v;
                              }
                              CheckSessionResponse(resp);
                              Complete(call, v.status());
                            });
      });
    } else if (method == "TryGetKeyValue") {
      Forward<pb::TryGetKeyValueRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        call->key = Normalize(req.key());
        std::string key = req.key();
        agent_->TryGetKeyValue(key, [this, call, key](absl::StatusOr<std::string> v) {
          pb::TryGetKeyValueResponse resp;
          if (v.ok()) {
            resp.mutable_kv()->set_key(key);
            resp.mutable_kv()->set_value(*v);
            call->value = *v;
          }
          CheckSessionResponse(resp);
          Complete(call, v.status());
        });
      });
    } else if (method == "GetKeyValueDir") {
      Forward<pb::GetKeyValueDirRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        std::string dir = req.directory();
        agent_->GetKeyValueDir(dir, [this, call, dir](absl::StatusOr<KeyValueEntries> e) {
          pb::GetKeyValueDirResponse resp;
          if (e.ok()) {
            std::string prefix = Normalize(dir);
            if (!prefix.empty()) prefix += "/";
            for (const auto& [k, v] : *e) {
              FUZZ_CHECK(k.compare(0, prefix.size(), prefix) == 0, "dir '", dir, "' listed '", k,
                         "'");
              auto it = kv_.find(k);
              FUZZ_CHECK(it != kv_.end() && it->second == v, "dir listed '", k,
                         "' with a value nobody wrote");
            }
            ToProto(*std::move(e), resp.mutable_kvs());
          }
          CheckSessionResponse(resp);
          Complete(call, e.status());
        });
      });
    } else if (method == "DeleteKeyValue") {
      Forward<pb::DeleteKeyValueRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        CheckSessionResponse(pb::DeleteKeyValueResponse());
        std::string key = Normalize(req.key());
        agent_->DeleteKeyValue(req.key(), [this, call, key](absl::Status s) {
          if (s.ok() && !key.empty()) {
            kv_.erase(key);
            std::string prefix = key + "/";
            for (auto it = kv_.lower_bound(prefix);
                 it != kv_.end() && it->first.rfind(prefix, 0) == 0;) {
              it = kv_.erase(it);
            }
          }
          Complete(call, s);
        });
      });
    } else if (method == "IncrementKeyValue") {
      Forward<pb::IncrementKeyValueRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        std::string key = Normalize(req.key());
        in_flight_[key] = std::nullopt;  // Its value is known only when it completes.
        agent_->IncrementKeyValue(req.key(), req.increment(),
                                  [this, call, key](absl::StatusOr<int64_t> v) {
                                    in_flight_.erase(key);
                                    pb::IncrementKeyValueResponse resp;
                                    if (v.ok()) {
                                      resp.set_value(*v);
                                      kv_[key] = absl::StrCat(*v);
                                    }
                                    CheckSessionResponse(resp);
                                    Complete(call, v.status());
                                  });
      });
    } else if (method == "Barrier") {
      Forward<pb::BarrierRequest>(method, rest,
                                  [&](const auto& req, const auto& call) { Barrier(req, call); });
    } else if (method == "CancelBarrier") {
      Forward<pb::CancelBarrierRequest>(method, rest, [&](const auto& req, const auto& call) {
        CheckSessionRequest(req);
        CheckSessionResponse(pb::CancelBarrierResponse());
        agent_->CancelBarrier(req.barrier_id(),
                              [this, call](absl::Status s) { Complete(call, s); });
      });
    } else if (method == "ReportProgress") {
      Forward<agentpb::ReportProgressRequest>(method, rest, [&](const auto& req, const auto& call) {
        agent_->ReportProgress(FromProto(req.progress()),
                               [this, call](absl::Status s) { Complete(call, s); });
      });
    } else if (method == "ReportStep") {
      Forward<agentpb::ReportStepRequest>(method, rest, [&](const auto& req, const auto& call) {
        agent_->ReportStep(req.step(), [this, call](absl::Status s) { Complete(call, s); });
      });
    } else if (method == "GetJobProgress") {
      Forward<pb::GetJobProgressRequest>(method, rest, [&](const auto&, const auto& call) {
        agent_->GetJobProgress([this, call](absl::StatusOr<std::vector<TaskProgress>> tasks) {
          if (tasks.ok()) {
            FUZZ_CHECK(tasks->size() == static_cast<size_t>(n_), "GetJobProgress lists ",
                       tasks->size(), " tasks");
            pb::GetJobProgressResponse resp;
            ToProto(*tasks, &resp);
            FUZZ_CHECK(FromProto(resp).size() == tasks->size(),
                       "GetJobProgress lost tasks on the wire");
          }
          Complete(call, tasks.status());
        });
      });
    } else if (method == "ReportPreemption") {
      Forward<pb::ReportPreemptionRequest>(method, rest, [&](const auto&, const auto& call) {
        agent_->ReportPreemption([this, call](absl::Status s) { Complete(call, s); });
      });
    } else if (method == "ReportError") {
      Forward<pb::ReportErrorRequest>(method, rest, [&](const auto& req, const auto& call) {
        agent_->ReportError(FromProto(req.cause()), req.message(),
                            [this, call](absl::Status s) { Complete(call, s); });
      });
    } else if (method == "ShutdownTask") {
      Forward<pb::ShutdownTaskRequest>(method, rest, [&](const auto&, const auto& call) {
        agent_->Shutdown([this, call](absl::Status s) {
          if (s.ok()) shut_down_ = true;
          Complete(call, s);
        });
      });
    }
  }

 private:
  static Incarnation PeerIncarnation(TaskId t) { return 5000 + t; }

  // Parses the request (skipped if it does not parse) and runs `body` with it, once this rank is
  // connected (AgentRpcService::ConnectedAgent); before that the call fails at once.
  template <typename Request, typename Body>
  void Forward(const std::string& method, const std::string& text, Body body) {
    Request req;
    if (!ParseRequest(text, &req)) return;
    std::shared_ptr<Call> call =
        NewCall(absl::StrCat(method, " ", req.ShortDebugString().substr(0, 200)));
    if (agent_ == nullptr || !agent_->connected()) {
      Complete(call, absl::FailedPreconditionError("this rank is not connected to the job yet"));
      return;
    }
    body(req, call);
  }

  void Barrier(const pb::BarrierRequest& req, const std::shared_ptr<Call>& call) {
    CheckSessionRequest(req);
    const std::string id = req.barrier_id();
    const bool in_progress = barriers_waiting_[id] > 0;
    call->barrier_id = id;
    call->barrier_instance = barrier_calls_[{0, id}];
    for (int32_t p : req.task_ids()) call->participants.insert(p);
    if (call->participants.empty() || call->participants.size() == static_cast<size_t>(n_)) {
      for (TaskId t = 0; t < n_; ++t) call->participants.insert(t);
    }
    ++barriers_waiting_[id];
    agent_->Barrier(id, absl::Milliseconds(req.timeout_ms()),
                    {req.task_ids().begin(), req.task_ids().end()},
                    [this, call, id](absl::Status s) {
                      pb::BarrierResponse resp;
                      resp.set_counter(call->barrier_instance);
                      CheckSessionResponse(resp);
                      --barriers_waiting_[id];
                      Complete(call, s);
                    });
    if (in_progress) {
      FUZZ_CHECK(call->completions == 1 && absl::IsFailedPrecondition(call->status),
                 "a second wait in barrier '", id, "' got ", call->status.ToString());
    } else {
      ++barrier_calls_[{0, id}];
    }
  }

  std::shared_ptr<Call> NewCall(std::string what) {
    auto c = std::make_shared<Call>();
    c->what = std::move(what);
    calls_.push_back(c);
    return c;
  }

  void Complete(const std::shared_ptr<Call>& call, const absl::Status& s) {
    FUZZ_CHECK(call->completions == 0, call->what, " completed twice: ", call->status.ToString(),
               ", then ", s.ToString());
    ++call->completions;
    call->status = s;
    if (s.ok() && call->value.has_value()) {
      auto it = kv_.find(call->key);
      auto writing = in_flight_.find(call->key);
      bool written =
          (it != kv_.end() && it->second == *call->value) ||
          (writing != in_flight_.end() && (!writing->second || *writing->second == *call->value));
      FUZZ_CHECK(written, call->what, " read ", call->value->size(), " bytes that nobody wrote");
    }
    if (s.ok() && call->barrier_instance >= 0) {
      for (TaskId t : call->participants) {
        if (t == 0) continue;
        const int64_t peer_calls = barrier_calls_[std::pair(t, call->barrier_id)];
        FUZZ_CHECK(peer_calls > call->barrier_instance, call->what, " passed, but rank ", t,
                   " called it only ", peer_calls, " times");
      }
    }
  }

  // AgentRpcService::Attach: the trainer's view of its rank must match the sidecar's.
  void Attach(const agentpb::AttachRequest& req) {
    if (req.process_id() != 0 || req.num_processes() != n_ ||
        (req.has_restart_attempt() && attempt_ && req.restart_attempt() != *attempt_) ||
        attached_) {
      return;  // Refused (InvalidArgument, AlreadyExists): no agent.
    }
    attached_ = true;
    AgentOptions options;
    options.coordinator_address = "in-process";
    options.task = 0;
    options.num_tasks = n_;
    options.restart_attempt = attempt_;
    options.pid = req.pid();
    if (req.initialization_timeout_ms() > 0) {
      options.initialization_timeout = absl::Milliseconds(req.initialization_timeout_ms());
    }
    // The real clock: the heartbeat thread waits a quarter of the heartbeat timeout before its
    // first beat, longer than a fuzz input runs, and stops at once when the agent does.
    agent_ = std::make_unique<Agent>(
        options, std::make_unique<testing::InProcessStub>(handler_.get()), Clock::Real());
    connect_status_ = agent_->Connect([this](const JobEvent& e) { OnEvent(e); });
    if (!connect_status_->ok()) return;
    // The Connected event AgentRpcService sends first.
    agentpb::AgentEvent connected;
    connected.mutable_connected()->set_process_id(0);
    connected.mutable_connected()->set_num_processes(n_);
    connected.mutable_connected()->set_incarnation(agent_->incarnation());
    FUZZ_CHECK(connected.connected().incarnation() != 0,
               "the Connected event carries incarnation 0");
  }

  void OnEvent(const JobEvent& e) {
    absl::MutexLock lock(&events_mu_);
    agentpb::AgentEvent event;
    *event.mutable_job_event() = ToProto(e);
    if (std::holds_alternative<TaskFailure>(e)) {
      FUZZ_CHECK(++failures_ == 1, "the trainer was told of ", failures_, " failures");
    } else {
      FUZZ_CHECK(++preemptions_ == 1, "the trainer was told of ", preemptions_,
                 " preemption notices");
    }
    agentpb::AgentEvent received;
    FUZZ_CHECK(received.ParseFromString(event.SerializeAsString()) &&
                   MessageDifferencer::Equals(event, received),
               "an AgentEvent changed on the wire");
  }

  // AgentRpcService::OnTrainerGone, in short: a trainer gone without shutting down fails the job.
  void Detach() {
    if (agent_ == nullptr || shut_down_) return;
    auto call = NewCall("report of the trainer's exit");
    agent_->ReportError(
        agent_->preemption_reported() ? FailureCause::kPreempted : FailureCause::kProcessExited,
        "it exited without calling shutdown()",
        [this, call](absl::Status s) { Complete(call, s); });
  }

  void Peer(const fuzz::Words& w) {
    TaskId t = static_cast<TaskId>(fuzz::Int(w, 1, 1));
    if (t < 1 || t >= n_) return;
    const std::string op = fuzz::Word(w, 2);
    const Incarnation inc = PeerIncarnation(t);
    if (op == "barrier") {
      std::string id = fuzz::Word(w, 3);
      const int64_t counter =
          barrier_calls_[{t, id}]++;  // Counted before the call completes rank 0's.
      service_->Barrier(BarrierArgs{t, inc, id, counter, absl::Seconds(60), {}},
                        [](absl::Status) {});
    } else if (op == "set") {
      std::string key = fuzz::Word(w, 3), value = fuzz::Word(w, 4);
      // A peer's key came over gRPC too: one that is not UTF-8 never reaches the store.
      pb::InsertKeyValueRequest wire;
      wire.mutable_kv()->set_key(key);
      if (!pb::InsertKeyValueRequest().ParseFromString(wire.SerializeAsString())) return;
      in_flight_[Normalize(key)] = value;
      if (service_->InsertKeyValue(t, inc, key, value, true).ok()) kv_[Normalize(key)] = value;
      in_flight_.erase(Normalize(key));
    } else if (op == "error") {
      service_->ReportError(t, inc, FailureCause::kReportedError, "peer error").IgnoreError();
    } else if (op == "preempt") {
      service_->ReportPreemption(t, inc).IgnoreError();
    } else if (op == "shutdown") {
      service_->ShutdownTask(t, inc, [](absl::Status) {});
    }
  }

  const int n_;
  const std::optional<int32_t> attempt_;
  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinationRpcHandler> handler_;
  std::unique_ptr<Agent> agent_;
  bool attached_ = false;
  bool shut_down_ = false;
  std::optional<absl::Status> connect_status_;  // Of the attached trainer's agent.
  std::vector<std::shared_ptr<Call>> calls_;
  std::map<std::string, std::string> kv_;                            // What was written.
  std::map<std::string, std::optional<std::string>> in_flight_;      // Writes not yet answered.
  std::map<std::pair<TaskId, std::string>, int64_t> barrier_calls_;  // Calls per rank and id.
  std::map<std::string, int> barriers_waiting_;                      // Rank 0's waits per id.
  absl::Mutex events_mu_;  // Events come on the agent's watch thread.
  int failures_ ABSL_GUARDED_BY(events_mu_) = 0;
  int preemptions_ ABSL_GUARDED_BY(events_mu_) = 0;
};

}  // namespace
}  // namespace cohort::coordination

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cohort::SetLogLevel(cohort::LogLevel::kNone);
  google::protobuf::SetLogHandler(nullptr);  // Its complaints about non-UTF-8 strings.
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::coordination;
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<absl::string_view> lines = absl::StrSplit(input, '\n');
  if (lines.size() > kMaxLines) lines.resize(kMaxLines);
  int n = 1;
  std::optional<int32_t> attempt;
  size_t first = 0;
  if (!lines.empty()) {
    std::vector<cohort::fuzz::Words> head = cohort::fuzz::ParseScript(lines[0], 1);
    cohort::fuzz::Words w = head.empty() ? cohort::fuzz::Words{} : head[0];
    if (!w.empty() && w[0] == "job") {
      n = static_cast<int>(std::clamp<int64_t>(cohort::fuzz::Int(w, 1, 1), 1, kMaxTasks));
      if (w.size() > 2) attempt = static_cast<int32_t>(cohort::fuzz::Int(w, 2, 0));
      first = 1;
    }
  }
  Harness harness(n, attempt);
  for (size_t i = first; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    size_t space = line.find(' ');
    std::string rest(space == absl::string_view::npos ? "" : line.substr(space + 1));
    std::vector<cohort::fuzz::Words> words = cohort::fuzz::ParseScript(line, 1);
    if (words.empty()) continue;
    harness.Run(words[0], rest);
  }
  return 0;
}

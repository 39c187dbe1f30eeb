#include "coordination/attempts/attempt_hub.h"

#include <set>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/attempts/attempt_layout_proto.h"

namespace cohort::coordination {

AttemptHub::AttemptHub(int32_t first_attempt, std::string token)
    : token_(std::move(token)),
      incarnation_(absl::Uniform<uint64_t>(absl::BitGen())),
      ledger_(first_attempt) {}

AttemptHub::~AttemptHub() { Close(); }

void AttemptHub::Close() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, sink] : streams_)
    sink->FinishWith(absl::UnavailableError("the attempt hub stopped"));
  for (auto& sink : observers_) sink->FinishWith(absl::UnavailableError("the attempt hub stopped"));
  streams_.clear();
  slots_.DropStreams();
  observers_.clear();
}

void AttemptHub::FollowLocally(std::function<void(const attemptspb::AttemptOrder&)> order) {
  attemptspb::AttemptOrder now;
  {
    absl::MutexLock lock(&mu_);
    local_followers_.push_back(order);
    slots_.FollowLocally();
    now = OrderLocked();
  }
  order(now);
}

attemptspb::AttemptOrder AttemptHub::OrderLocked() const {
  attemptspb::AttemptOrder o;
  o.set_attempt(ledger_.attempt());
  o.set_hub_incarnation(incarnation_);
  if (uint64_t dump = ledger_.wanted_dump(); dump != 0) o.set_dump_id(dump);
  if (const std::optional<AttemptLayout>& layout = ledger_.layout())
    *o.mutable_layout() = LayoutToProto(*layout);
  return o;
}

void AttemptHub::set_hang_detection(HangTimeout timeout, std::string dumps_base,
                                    std::function<void(uint64_t, int32_t)> dump_locally) {
  absl::MutexLock lock(&mu_);
  ledger_.set_hang_detection(timeout, std::move(dumps_base));
  dump_locally_ = std::move(dump_locally);
}

void AttemptHub::RecordHealth(const attemptspb::ReportHealthRequest& report, absl::Time now) {
  absl::MutexLock lock(&mu_);
  switch (ledger_.RecordHealth(report, now)) {
    case AttemptLedger::Evidence::kNone:
      return;
    case AttemptLedger::Evidence::kComplete:
      LogInfo("attempt hub: every pod collected the evidence of hang ", ledger_.hang()->id());
      [[fallthrough]];
    case AttemptLedger::Evidence::kDumped:
      PublishLocked();
  }
}

void AttemptHub::CheckHang(absl::Time now) {
  uint64_t dump_id = 0;
  int32_t attempt = 0;
  std::function<void(uint64_t, int32_t)> dump_locally;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t before = ledger_.hang() ? ledger_.hang()->id() : 0;
    switch (ledger_.CheckHang(now, static_cast<int32_t>(slots_.Following().size()))) {
      case AttemptLedger::HangChange::kNone:
        return;
      case AttemptLedger::HangChange::kCleared:
        LogInfo("attempt hub: the ranks of hang ", before, " make progress again");
        PublishLocked();
        return;
      case AttemptLedger::HangChange::kGaveUp: {
        const attemptspb::HangReport& hang = *ledger_.hang();
        LogWarning("attempt hub: ", hang.pods_total() - hang.pods_dumped(),
                   " pod(s) did not collect the evidence of hang ", hang.id(), " within ",
                   absl::FormatDuration(AttemptLedger::kDumpPatience), ": going on without it");
        PublishLocked();
        return;
      }
      case AttemptLedger::HangChange::kFound:
        break;
    }
    const attemptspb::HangReport& hang = *ledger_.hang();
    std::string named;
    for (const attemptspb::HungRank& r : hang.outliers()) {
      absl::StrAppend(&named, named.empty() ? "" : "; ", "rank ", r.rank(), ": ", r.where());
    }
    LogWarning("attempt hub: hang ", hang.id(), " in restart attempt ", hang.attempt(), ": ", named,
               "; asking every pod for its processes' stacks");
    PushToFollowersLocked(OrderLocked());
    PublishLocked();
    dump_id = hang.id();
    attempt = hang.attempt();
    dump_locally = dump_locally_;
  }
  if (dump_locally) dump_locally(dump_id, attempt);
}

attemptspb::AttemptState AttemptHub::StateLocked() const {
  attemptspb::AttemptState s;
  s.set_hub_incarnation(incarnation_);
  s.set_attempt(ledger_.attempt());
  if (ledger_.started() != absl::InfinitePast())
    s.set_started_unix_ms(absl::ToUnixMillis(ledger_.started()));
  for (const auto& [pod, end] : ledger_.ends()) *s.add_ends() = end;
  const std::set<int32_t> following = slots_.Following();
  for (int32_t pod : following) s.add_following(pod);
  s.set_pods_following(static_cast<int32_t>(following.size()));
  if (ledger_.hang()) *s.mutable_hang() = *ledger_.hang();
  for (const auto& [name, stream] : slots_.spares()) s.add_spares(name);
  if (const std::optional<AttemptLayout>& layout = ledger_.layout())
    *s.mutable_layout() = LayoutToProto(*layout);
  return s;
}

attemptspb::AttemptState AttemptHub::State() const {
  absl::MutexLock lock(&mu_);
  return StateLocked();
}

void AttemptHub::PublishLocked() {
  attemptspb::AttemptState state = StateLocked();
  std::vector<std::shared_ptr<StateSink>> alive;
  for (auto& sink : observers_) {
    if (sink->Push(state)) alive.push_back(sink);
  }
  observers_ = std::move(alive);
}

bool AttemptHub::PushLocked(SlotRegistry::StreamId stream, const attemptspb::AttemptOrder& order) {
  auto it = streams_.find(stream);
  if (it != streams_.end() && it->second->Push(order)) return true;
  if (it != streams_.end()) streams_.erase(it);
  slots_.Gone(stream);
  return false;
}

void AttemptHub::PushToFollowersLocked(const attemptspb::AttemptOrder& order,
                                       const std::set<int32_t>& skip) {
  const std::map<int32_t, SlotRegistry::StreamId> followers = slots_.followers();
  for (const auto& [pod, stream] : followers) {
    if (!skip.contains(pod)) PushLocked(stream, order);
  }
}

void AttemptHub::EndLocked(const SlotRegistry::Ending& ending) {
  auto it = streams_.find(ending.stream);
  if (it == streams_.end()) return;
  it->second->FinishWith(ending.why);
  streams_.erase(it);
}

std::set<int32_t> AttemptHub::GiveSlotsLocked(
    const std::vector<attemptspb::SpareAssignment>& assignments,
    const attemptspb::AttemptOrder& order) {
  std::set<int32_t> taken;  // Pod indices a spare took: it heard the attempt with its index.
  for (const attemptspb::SpareAssignment& a : assignments) {
    std::optional<SlotRegistry::StreamId> spare = slots_.SpareStream(a.spare());
    attemptspb::AttemptOrder with_index = order;
    with_index.set_pod_index(a.pod_index());
    if (!spare || !PushLocked(*spare, with_index)) {
      LogWarning("attempt hub: spare ", a.spare(), " went before restart attempt ", order.attempt(),
                 " gave it pod index ", a.pod_index());
      slots_.DropSpare(a.spare());
      continue;
    }
    // Only now is the pod that held the index let go: the spare heard it is the pod.
    if (std::optional<SlotRegistry::Ending> old =
            slots_.GiveSlot(a.pod_index(), a.spare(), order.attempt())) {
      EndLocked(*old);
    }
    taken.insert(a.pod_index());
    LogInfo("attempt hub: spare ", a.spare(), " takes pod index ", a.pod_index(),
            " in restart attempt ", order.attempt());
  }
  return taken;
}

absl::Status AttemptHub::Start(int32_t attempt,
                               const std::vector<attemptspb::SpareAssignment>& assignments,
                               std::optional<AttemptLayout> layout) {
  if (layout) {
    if (std::string why = layout->Problem(); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("restart attempt ", attempt, "'s layout: ", why));
    }
  }
  std::vector<std::function<void(const attemptspb::AttemptOrder&)>> locals;
  // What the followers will hear, for the attempt's coordination service before they do.
  attemptspb::AttemptOrder upcoming;
  upcoming.set_attempt(attempt);
  upcoming.set_hub_incarnation(incarnation_);
  if (layout) *upcoming.mutable_layout() = LayoutToProto(*layout);
  attemptspb::AttemptOrder order;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<bool> next = ledger_.MayStart(attempt);
    if (!next.ok()) return next.status();
    if (!*next) return absl::OkStatus();  // Ordered twice: the first one stands.
    if (std::string why = slots_.CheckAssignments(assignments); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("restart attempt ", attempt, ": ", why));
    }
  }
  // The attempt's coordination service first, outside the lock (it takes a while to bind).
  if (before_start_) before_start_(upcoming);
  {
    absl::MutexLock lock(&mu_);
    if (!ledger_.Start(attempt, absl::Now(), std::move(layout)))
      return absl::OkStatus();  // A concurrent order won.
    order = OrderLocked();
    PushToFollowersLocked(order, GiveSlotsLocked(assignments, order));
    const std::map<std::string, SlotRegistry::StreamId> spares = slots_.spares();
    for (const auto& [name, stream] : spares) PushLocked(stream, order);
    locals = local_followers_;
    PublishLocked();
  }
  LogInfo("attempt hub: restart attempt ", attempt, " ordered",
          order.has_layout() ? absl::StrCat(": ", LayoutFromProto(order.layout())->Describe())
                             : std::string());
  for (auto& local : locals) local(order);
  return absl::OkStatus();
}

absl::Status AttemptHub::Drain(int32_t attempt, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (attempt != ledger_.attempt()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot drain restart attempt ", attempt,
                                                        ": the job's processes run attempt ",
                                                        ledger_.attempt()));
    }
    if (drained_ == attempt) return absl::OkStatus();  // Asked before: the notice went out.
    drained_ = attempt;
  }
  LogInfo("attempt hub: draining restart attempt ", attempt, " (", reason,
          "): every rank stops at the preemption sync point");
  if (on_drain_) on_drain_(attempt, reason);
  return absl::OkStatus();
}

void AttemptHub::ReportEnd(const attemptspb::AttemptEnd& end) {
  {
    absl::MutexLock lock(&mu_);
    if (!ledger_.RecordEnd(end)) return;
    PublishLocked();
  }
  if (on_end_) on_end_(end);
}

grpc::ServerWriteReactor<attemptspb::AttemptOrder>* AttemptHub::FollowAttempts(
    grpc::CallbackServerContext* ctx, const attemptspb::FollowAttemptsRequest* req) {
  auto* stream = new EventStream<attemptspb::AttemptOrder>();
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) {
    stream->sink()->FinishWith(auth);
    return stream;
  }
  SlotRegistry::StreamId id;
  {
    absl::MutexLock lock(&mu_);
    id = ++last_stream_;
    SlotRegistry::Admission admitted =
        slots_.Follow(id, req->pod_index(), req->spare(), req->pod_name());
    if (!admitted.refused.ok()) {
      stream->sink()->FinishWith(admitted.refused);
      return stream;
    }
    for (const SlotRegistry::Ending& ending : admitted.endings) EndLocked(ending);
    stream->sink()->Push(OrderLocked());
    streams_[id] = stream->sink();
    PublishLocked();  // Who follows changed.
  }
  // Its sidecar went (or its connection broke): it follows no more, as a pod or as a spare (it
  // may have taken a slot since).
  stream->set_on_end([this, id] {
    absl::MutexLock lock(&mu_);
    streams_.erase(id);
    if (slots_.Gone(id)) PublishLocked();
  });
  return stream;
}

grpc::ServerUnaryReactor* AttemptHub::ReportAttemptEnd(
    grpc::CallbackServerContext* ctx, const attemptspb::ReportAttemptEndRequest* req,
    attemptspb::ReportAttemptEndResponse*) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  ReportEnd(req->end());
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<attemptspb::AttemptState>* AttemptHub::ObserveAttempts(
    grpc::CallbackServerContext* ctx, const attemptspb::ObserveAttemptsRequest*) {
  auto* stream = new EventStream<attemptspb::AttemptState>();
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) {
    stream->sink()->FinishWith(auth);
    return stream;
  }
  absl::MutexLock lock(&mu_);
  stream->sink()->Push(StateLocked());
  observers_.push_back(stream->sink());
  return stream;
}

grpc::ServerUnaryReactor* AttemptHub::StartAttempt(grpc::CallbackServerContext* ctx,
                                                   const attemptspb::StartAttemptRequest* req,
                                                   attemptspb::StartAttemptResponse*) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  return FinishUnary(ctx,
                     Start(req->attempt(), {req->assignments().begin(), req->assignments().end()},
                           LayoutFromProto(req->layout())));
}

grpc::ServerUnaryReactor* AttemptHub::ReportHealth(grpc::CallbackServerContext* ctx,
                                                   const attemptspb::ReportHealthRequest* req,
                                                   attemptspb::ReportHealthResponse*) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  RecordHealth(*req, absl::Now());
  return FinishUnary(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* AttemptHub::DrainAttempt(grpc::CallbackServerContext* ctx,
                                                   const attemptspb::DrainAttemptRequest* req,
                                                   attemptspb::DrainAttemptResponse*) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  return FinishUnary(ctx, Drain(req->attempt(), req->reason()));
}

absl::StatusOr<std::unique_ptr<AttemptHubServer>> AttemptHubServer::Start(
    const std::string& listen_address, int32_t first_attempt, std::string token) {
  auto server = std::make_unique<AttemptHubServer>();
  server->hub_ = std::make_unique<AttemptHub>(first_attempt, std::move(token));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->hub_.get());
  AllowClientKeepalive(&builder);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen_address,
                     " for the attempt hub (coordinator port + 3): the port is in use; "
                     "pick another coordinatorPort"));
  }
  return server;
}

AttemptHubServer::~AttemptHubServer() {
  hub_->Close();
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    server_->Wait();
  }
}

}  // namespace cohort::coordination

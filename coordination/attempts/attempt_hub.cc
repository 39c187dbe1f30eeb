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

namespace cohort::coordination {

absl::StatusOr<std::string> AttemptControlAddress(const std::string& coordinator_address) {
  absl::StatusOr<int> port = env::CoordinatorPort(coordinator_address);
  if (!port.ok()) return port.status();
  return absl::StrCat(coordinator_address.substr(0, coordinator_address.rfind(':')), ":",
                      *port + env::kAttemptControlPortOffset);
}

AttemptHub::AttemptHub(int32_t first_attempt, std::string token)
    : token_(std::move(token)),
      incarnation_(absl::Uniform<uint64_t>(absl::BitGen())),
      attempt_(first_attempt) {}

AttemptHub::~AttemptHub() { Close(); }

void AttemptHub::Close() {
  absl::MutexLock lock(&mu_);
  for (auto& [pod, sink] : followers_)
    sink->FinishWith(absl::UnavailableError("the attempt hub stopped"));
  for (auto& [name, sink] : spares_)
    sink->FinishWith(absl::UnavailableError("the attempt hub stopped"));
  for (auto& sink : observers_) sink->FinishWith(absl::UnavailableError("the attempt hub stopped"));
  followers_.clear();
  spares_.clear();
  observers_.clear();
}

void AttemptHub::FollowLocally(std::function<void(int32_t attempt)> order) {
  int32_t now;
  {
    absl::MutexLock lock(&mu_);
    local_followers_.push_back(order);
    now = attempt_;
  }
  order(now);
}

attemptspb::AttemptOrder AttemptHub::OrderLocked() const {
  attemptspb::AttemptOrder o;
  o.set_attempt(attempt_);
  o.set_hub_incarnation(incarnation_);
  if (hang_ && !hang_->dumps_complete()) o.set_dump_id(hang_->id());
  return o;
}

void AttemptHub::set_hang_detection(HangTimeout timeout, std::string dumps_base,
                                    std::function<void(uint64_t, int32_t)> dump_locally) {
  absl::MutexLock lock(&mu_);
  detector_ = HangDetector(timeout);
  dumps_base_ = std::move(dumps_base);
  dump_locally_ = std::move(dump_locally);
}

void AttemptHub::ReportHealth(const attemptspb::ReportHealthRequest& report, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (report.attempt() != attempt_) return;
  detector_.Update(report.pod_index(), report, now);
  if (hang_ && report.dumped_id() == hang_->id() && dumped_.insert(report.pod_index()).second) {
    hang_->set_pods_dumped(static_cast<int32_t>(dumped_.size()));
    if (!hang_->dumps_complete() && hang_->pods_dumped() >= hang_->pods_total()) {
      hang_->set_dumps_complete(true);
      LogInfo("attempt hub: every pod collected the evidence of hang ", hang_->id());
    }
    PublishLocked();
  }
}

void AttemptHub::CheckHang(absl::Time now) {
  uint64_t dump_id = 0;
  int32_t attempt = 0;
  std::function<void(uint64_t, int32_t)> dump_locally;
  {
    absl::MutexLock lock(&mu_);
    std::optional<HangFinding> finding = detector_.Check(now);
    if (!finding) {
      if (hang_) {
        LogInfo("attempt hub: the ranks of hang ", hang_->id(), " make progress again");
        hang_.reset();
        PublishLocked();
      }
      return;
    }
    if (hang_) {
      if (!hang_->dumps_complete() && now - hang_found_ >= kDumpPatience) {
        hang_->set_dumps_complete(true);
        LogWarning("attempt hub: ", hang_->pods_total() - hang_->pods_dumped(),
                   " pod(s) did not collect the evidence of hang ", hang_->id(), " within ",
                   absl::FormatDuration(kDumpPatience), ": going on without it");
        PublishLocked();
      }
      return;
    }
    hang_.emplace();
    hang_found_ = now;
    dumped_.clear();
    // Unique and increasing across hubs of the job (a restarted rank 0 pod starts a new hub).
    hang_->set_id(static_cast<uint64_t>(absl::ToUnixMillis(now)));
    hang_->set_attempt(attempt_);
    hang_->set_detected_unix_ms(absl::ToUnixMillis(now));
    *hang_->mutable_outliers() = std::move(finding->outliers);
    *hang_->mutable_groups() = std::move(finding->groups);
    hang_->set_pods_total(static_cast<int32_t>(FollowingLocked().size()));
    hang_->set_dumps_dir(absl::StrCat(dumps_base_, "/attempt-", attempt_));
    std::string named;
    for (const attemptspb::HungRank& r : hang_->outliers()) {
      absl::StrAppend(&named, named.empty() ? "" : "; ", "rank ", r.rank(), ": ", r.where());
    }
    LogWarning("attempt hub: hang ", hang_->id(), " in restart attempt ", attempt_, ": ", named,
               "; asking every pod for its processes' stacks");
    attemptspb::AttemptOrder order = OrderLocked();
    for (auto it = followers_.begin(); it != followers_.end();) {
      it = it->second->Push(order) ? std::next(it) : followers_.erase(it);
    }
    PublishLocked();
    dump_id = hang_->id();
    attempt = attempt_;
    dump_locally = dump_locally_;
  }
  if (dump_locally) dump_locally(dump_id, attempt);
}

std::set<int32_t> AttemptHub::FollowingLocked() const {
  std::set<int32_t> following;
  if (!local_followers_.empty()) following.insert(0);  // Rank 0's own sidecar.
  for (const auto& [pod, sink] : followers_) following.insert(pod);
  return following;
}

attemptspb::AttemptState AttemptHub::StateLocked() const {
  attemptspb::AttemptState s;
  s.set_hub_incarnation(incarnation_);
  s.set_attempt(attempt_);
  s.set_started_unix_ms(started_unix_ms_);
  for (const auto& [pod, end] : ends_) *s.add_ends() = end;
  const std::set<int32_t> following = FollowingLocked();
  for (int32_t pod : following) s.add_following(pod);
  s.set_pods_following(static_cast<int32_t>(following.size()));
  if (hang_) *s.mutable_hang() = *hang_;
  for (const auto& [name, sink] : spares_) s.add_spares(name);
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

std::string AttemptHub::CheckAssignmentsLocked(
    const std::vector<attemptspb::SpareAssignment>& assignments) const {
  std::set<int32_t> pods;
  std::set<std::string> spares;
  for (const attemptspb::SpareAssignment& a : assignments) {
    if (a.pod_index() <= 0) {
      return absl::StrCat("pod index ", a.pod_index(), " cannot go to a spare: ",
                          a.pod_index() == 0
                              ? "rank 0's pod hosts the coordination service and this hub"
                              : "there is no such pod");
    }
    if (!spares_.contains(a.spare())) {
      return absl::StrCat("spare '", a.spare(),
                          "' does not follow the attempt hub (it is not ready, or gone)");
    }
    if (!pods.insert(a.pod_index()).second)
      return absl::StrCat("pod index ", a.pod_index(), " is given twice");
    if (!spares.insert(a.spare()).second)
      return absl::StrCat("spare '", a.spare(), "' is given two slots");
  }
  return "";
}

absl::Status AttemptHub::Start(int32_t attempt,
                               const std::vector<attemptspb::SpareAssignment>& assignments) {
  std::vector<std::function<void(int32_t)>> locals;
  {
    absl::MutexLock lock(&mu_);
    if (attempt == attempt_) return absl::OkStatus();  // Ordered twice: the first one stands.
    if (attempt != attempt_ + 1) {
      return absl::FailedPreconditionError(absl::StrCat("the job's processes run attempt ",
                                                        attempt_, ": the next one is ",
                                                        attempt_ + 1, ", not ", attempt));
    }
    if (std::string why = CheckAssignmentsLocked(assignments); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("restart attempt ", attempt, ": ", why));
    }
  }
  // The attempt's coordination service first, outside the lock (it takes a while to bind).
  if (before_start_) before_start_(attempt);
  {
    absl::MutexLock lock(&mu_);
    if (attempt_ >= attempt) return absl::OkStatus();  // A concurrent order won.
    attempt_ = attempt;
    started_unix_ms_ = absl::ToUnixMillis(absl::Now());
    ends_.clear();
    detector_.Reset();  // The new processes start from nothing.
    hang_.reset();
    attemptspb::AttemptOrder order = OrderLocked();
    std::set<int32_t> taken;  // Pod indices a spare took: it heard the attempt with its index.
    for (const attemptspb::SpareAssignment& a : assignments) {
      auto spare = spares_.find(a.spare());
      if (spare == spares_.end()) {
        LogWarning("attempt hub: spare ", a.spare(), " went before restart attempt ", attempt,
                   " gave it pod index ", a.pod_index());
        continue;
      }
      attemptspb::AttemptOrder with_index = order;
      with_index.set_pod_index(a.pod_index());
      const bool told = spare->second->Push(with_index);
      if (told) {
        // Only now is the pod that held the index let go: the spare heard it is the pod.
        if (auto old = followers_.find(a.pod_index()); old != followers_.end()) {
          old->second->FinishWith(absl::FailedPreconditionError(
              absl::StrCat("pod index ", a.pod_index(), " was given to spare ", a.spare(),
                           " in restart attempt ", attempt)));
        }
        followers_[a.pod_index()] = spare->second;
        held_by_spare_[a.pod_index()] = a.spare();
        displaced_[a.pod_index()].merge(seen_names_[a.pod_index()]);
        taken.insert(a.pod_index());
        LogInfo("attempt hub: spare ", a.spare(), " takes pod index ", a.pod_index(),
                " in restart attempt ", attempt);
      } else {
        LogWarning("attempt hub: spare ", a.spare(), " went before restart attempt ", attempt,
                   " gave it pod index ", a.pod_index());
      }
      spares_.erase(spare);
    }
    for (auto it = followers_.begin(); it != followers_.end();) {
      const bool alive = taken.contains(it->first) || it->second->Push(order);
      it = alive ? std::next(it) : followers_.erase(it);
    }
    for (auto it = spares_.begin(); it != spares_.end();) {
      it = it->second->Push(order) ? std::next(it) : spares_.erase(it);
    }
    locals = local_followers_;
    PublishLocked();
  }
  LogInfo("attempt hub: restart attempt ", attempt, " ordered");
  for (auto& order : locals) order(attempt);
  return absl::OkStatus();
}

void AttemptHub::ReportEnd(const attemptspb::AttemptEnd& end) {
  {
    absl::MutexLock lock(&mu_);
    if (end.attempt() != attempt_) return;
    ends_[end.pod_index()] = end;
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
  std::weak_ptr<OrderSink> mine = stream->sink();
  {
    absl::MutexLock lock(&mu_);
    const int32_t pod = req->pod_index();
    const std::string& spare = req->spare();
    const std::string& name = req->pod_name();
    auto refuse = [&](const std::string& why) {
      stream->sink()->FinishWith(absl::FailedPreconditionError(why));
    };
    auto holder = held_by_spare_.find(pod);
    if (!spare.empty() && pod > 0) {
      // A spare that took the slot, back after a broken stream or restarted as the slot's sidecar.
      if (holder == held_by_spare_.end() || holder->second != spare) {
        refuse(absl::StrCat("spare ", spare, " does not hold pod index ", pod,
                            holder == held_by_spare_.end()
                                ? std::string()
                                : absl::StrCat(" (spare ", holder->second, " does)")));
        return stream;
      }
      if (auto other = followers_.find(pod); other != followers_.end()) {
        other->second->FinishWith(absl::FailedPreconditionError(
            absl::StrCat("pod index ", pod, " is held by spare ", spare)));
      }
    } else if (spare.empty()) {
      if (auto d = displaced_.find(pod);
          d != displaced_.end() && !name.empty() && d->second.contains(name)) {
        refuse(absl::StrCat("pod ", name, " no longer holds pod index ", pod,
                            ": a spare took its slot"));
        return stream;
      }
      if (holder != held_by_spare_.end()) {
        if (followers_.contains(pod)) {
          refuse(absl::StrCat("pod index ", pod, " is held by spare ", holder->second,
                              ", which took it in a restart"));
          return stream;
        }
        held_by_spare_.erase(
            holder);  // The spare is gone: a pod of its own (a replacement) takes the slot.
      }
      if (!name.empty()) seen_names_[pod].insert(name);
    }
    stream->sink()->Push(OrderLocked());
    if (!spare.empty() && pod == 0) {
      if (auto old = spares_.find(spare); old != spares_.end()) {
        old->second->FinishWith(
            absl::AlreadyExistsError(absl::StrCat("spare ", spare, " follows anew")));
      }
      spares_[spare] = stream->sink();
    } else {
      followers_[pod] = stream->sink();
    }
    PublishLocked();  // Who follows changed.
  }
  // Its sidecar went (or its connection broke): it follows no more, as a pod or as a spare (it
  // may have taken a slot since).
  stream->set_on_end([this, mine] {
    const std::shared_ptr<OrderSink> gone = mine.lock();
    absl::MutexLock lock(&mu_);
    bool changed = false;
    for (auto it = followers_.begin(); it != followers_.end();) {
      changed |= it->second == gone;
      it = it->second == gone ? followers_.erase(it) : std::next(it);
    }
    for (auto it = spares_.begin(); it != spares_.end();) {
      changed |= it->second == gone;
      it = it->second == gone ? spares_.erase(it) : std::next(it);
    }
    if (changed) PublishLocked();
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
                     Start(req->attempt(), {req->assignments().begin(), req->assignments().end()}));
}

grpc::ServerUnaryReactor* AttemptHub::ReportHealth(grpc::CallbackServerContext* ctx,
                                                   const attemptspb::ReportHealthRequest* req,
                                                   attemptspb::ReportHealthResponse*) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  ReportHealth(*req, absl::Now());
  return FinishUnary(ctx, absl::OkStatus());
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

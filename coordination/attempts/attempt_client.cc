#include "coordination/attempts/attempt_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/attempts/attempt_layout_proto.h"

namespace cohort::coordination {

absl::StatusOr<std::string> AttemptControlAddress(const std::string& coordinator_address) {
  absl::StatusOr<int> port = env::CoordinatorPort(coordinator_address);
  if (!port.ok()) return port.status();
  return absl::StrCat(coordinator_address.substr(0, coordinator_address.rfind(':')), ":",
                      *port + env::kAttemptControlPortOffset);
}
namespace {

// Reconnecting: quickly at first (rank 0's sidecar may be a moment behind), at most every 2 s.
constexpr absl::Duration kRetryInitial = absl::Milliseconds(50);
constexpr absl::Duration kRetryCap = absl::Seconds(2);

std::shared_ptr<grpc::Channel> HubChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   DefaultChannelArguments());
}

// Reads `open`'s stream into `on_message` until it breaks or `stop` is notified; reconnects.
template <typename Msg>
void KeepReading(
    StreamControl& control, const std::string& token,
    const std::function<std::unique_ptr<grpc::ClientReader<Msg>>(grpc::ClientContext*)>& open,
    const std::function<void(const Msg&)>& on_message,
    const std::function<void(const absl::Status&)>& on_broken) {
  Backoff backoff(kRetryInitial, kRetryCap);
  absl::Notification& stop = control.stop;
  while (!stop.HasBeenNotified()) {
    grpc::ClientContext ctx;
    AddToken(&ctx, token);
    {
      absl::MutexLock lock(&control.mu);
      if (stop.HasBeenNotified()) return;
      control.current = &ctx;
    }
    std::unique_ptr<grpc::ClientReader<Msg>> reader = open(&ctx);
    Msg msg;
    bool delivered = false;
    while (reader->Read(&msg)) {
      delivered = true;
      backoff.Reset();
      if (on_message) on_message(msg);
    }
    absl::Status status = FromGrpcStatus(reader->Finish());
    {
      absl::MutexLock lock(&control.mu);
      control.current = nullptr;
    }
    if (stop.HasBeenNotified()) return;
    if (delivered && on_broken) on_broken(status);
    stop.WaitForNotificationWithTimeout(backoff.Next());
  }
}

attemptspb::FollowAttemptsRequest AsPod(int32_t pod_index, std::string pod_name) {
  attemptspb::FollowAttemptsRequest req;
  req.set_pod_index(pod_index);
  req.set_pod_name(std::move(pod_name));
  return req;
}

}  // namespace

void StreamControl::Stop() {
  absl::MutexLock lock(&mu);
  if (!stop.HasBeenNotified()) stop.Notify();
  if (current != nullptr) current->TryCancel();
}

AttemptFollower::AttemptFollower(std::string hub_address, std::string token, int32_t pod_index,
                                 std::function<void(const attemptspb::AttemptOrder&)> on_order,
                                 std::string pod_name)
    : AttemptFollower(std::move(hub_address), std::move(token),
                      AsPod(pod_index, std::move(pod_name)), std::move(on_order)) {}

AttemptFollower::AttemptFollower(std::string hub_address, std::string token,
                                 attemptspb::FollowAttemptsRequest identity,
                                 std::function<void(const attemptspb::AttemptOrder&)> on_order)
    : token_(std::move(token)),
      identity_(std::move(identity)),
      on_order_(std::move(on_order)),
      channel_(HubChannel(hub_address)),
      stub_(attemptspb::AttemptControl::NewStub(channel_)) {
  thread_ = std::thread([this] { Loop(); });
}

std::unique_ptr<AttemptFollower> AttemptFollower::Spare(
    std::string hub_address, std::string token, std::string spare_name,
    std::function<void(const attemptspb::AttemptOrder&)> on_order, int32_t pod_index) {
  attemptspb::FollowAttemptsRequest identity;
  identity.set_pod_name(spare_name);
  identity.set_spare(std::move(spare_name));
  identity.set_pod_index(pod_index);
  return std::unique_ptr<AttemptFollower>(new AttemptFollower(
      std::move(hub_address), std::move(token), std::move(identity), std::move(on_order)));
}

AttemptFollower::~AttemptFollower() {
  control_.Stop();
  thread_.join();
}

void AttemptFollower::Loop() {
  pthread_setname_np(pthread_self(), "attempt-follow");
  KeepReading<attemptspb::AttemptOrder>(
      control_, token_,
      [&](grpc::ClientContext* ctx) { return stub_->FollowAttempts(ctx, identity_); },
      [&](const attemptspb::AttemptOrder& order) {
        if (order.has_pod_index())
          identity_.set_pod_index(order.pod_index());  // The spare took a slot.
        if (on_order_) on_order_(order);
      },
      [](const absl::Status& s) {
        LogWarning("lost the attempt hub (", s.ToString(), "); reconnecting");
      });
}

absl::Status AttemptFollower::ReportEnd(const attemptspb::AttemptEnd& end,
                                        absl::Duration patience) {
  const absl::Time give_up = absl::Now() + patience;
  Backoff backoff(kRetryInitial, kRetryCap);
  attemptspb::ReportAttemptEndRequest req;
  *req.mutable_end() = end;
  while (true) {
    grpc::ClientContext ctx;
    AddToken(&ctx, token_);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    attemptspb::ReportAttemptEndResponse resp;
    absl::Status s = FromGrpcStatus(stub_->ReportAttemptEnd(&ctx, req, &resp));
    if (s.ok() || absl::Now() >= give_up || control_.stop.HasBeenNotified()) return s;
    control_.stop.WaitForNotificationWithTimeout(backoff.Next());
  }
}

absl::Status AttemptFollower::ReportHealth(const attemptspb::ReportHealthRequest& report,
                                           absl::Duration timeout) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  attemptspb::ReportHealthResponse resp;
  return FromGrpcStatus(stub_->ReportHealth(&ctx, report, &resp));
}

AttemptObserver::AttemptObserver(std::string hub_address, std::string token,
                                 std::function<void(const attemptspb::AttemptState&)> on_state,
                                 std::function<void(const absl::Status&)> on_broken)
    : address_(std::move(hub_address)),
      token_(std::move(token)),
      on_state_(std::move(on_state)),
      on_broken_(std::move(on_broken)),
      channel_(HubChannel(address_)),
      stub_(attemptspb::AttemptControl::NewStub(channel_)) {
  thread_ = std::thread([this] { Loop(); });
}

AttemptObserver::~AttemptObserver() {
  control_.Stop();
  thread_.join();
}

void AttemptObserver::Loop() {
  pthread_setname_np(pthread_self(), "attempt-observe");
  attemptspb::ObserveAttemptsRequest req;
  KeepReading<attemptspb::AttemptState>(
      control_, token_, [&](grpc::ClientContext* ctx) { return stub_->ObserveAttempts(ctx, req); },
      on_state_, on_broken_);
}

absl::Status AttemptObserver::Start(int32_t attempt, absl::Duration timeout) {
  return Start(attempt, {}, timeout);
}

absl::Status AttemptObserver::Start(int32_t attempt,
                                    const std::vector<attemptspb::SpareAssignment>& assignments,
                                    absl::Duration timeout) {
  return Start(attempt, assignments, std::nullopt, timeout);
}

absl::Status AttemptObserver::Start(int32_t attempt,
                                    const std::vector<attemptspb::SpareAssignment>& assignments,
                                    const std::optional<AttemptLayout>& layout,
                                    absl::Duration timeout) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  attemptspb::StartAttemptRequest req;
  req.set_attempt(attempt);
  for (const attemptspb::SpareAssignment& a : assignments) *req.add_assignments() = a;
  if (layout) *req.mutable_layout() = LayoutToProto(*layout);
  attemptspb::StartAttemptResponse resp;
  absl::Status s = FromGrpcStatus(stub_->StartAttempt(&ctx, req, &resp));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("ordering restart attempt ", attempt, " from the attempt hub at ",
                               address_, ": ", s.message()));
  }
  return s;
}

absl::Status AttemptObserver::Drain(int32_t attempt, const std::string& reason,
                                    absl::Duration timeout) {
  grpc::ClientContext ctx;
  AddToken(&ctx, token_);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  attemptspb::DrainAttemptRequest req;
  req.set_attempt(attempt);
  req.set_reason(reason);
  attemptspb::DrainAttemptResponse resp;
  absl::Status s = FromGrpcStatus(stub_->DrainAttempt(&ctx, req, &resp));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("draining restart attempt ", attempt, " through the attempt hub at ",
                               address_, ": ", s.message()));
  }
  return s;
}

}  // namespace cohort::coordination

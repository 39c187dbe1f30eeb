// libdist's SidecarClient against a fake cohort-sidecar: the Agent gRPC service, in this process,
// on a Unix socket in a temporary directory, as the real sidecar serves it (sidecar/sidecar.cc).
// The fake checks the job token as the real one does (cohort::CheckToken), says "connected" (at
// once, or when the test says), pushes job events, and keeps a key-value map whose blocking gets
// it times out itself, as the coordination service does.

#include "libdist/src/sidecar_client.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cohort/agent/v1/agent.grpc.pb.h"
#include "common/grpc_util.h"
#include "common/token.h"
#include "coordination/client/await.h"
#include "coordination/client/job_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

namespace pb = ::cohort::coordination::v1;
using cohort::coordination::Await;
using cohort::coordination::JobEvent;
using cohort::coordination::PreemptionNotice;
using cohort::coordination::TaskFailure;
using ::testing::HasSubstr;

constexpr char kToken[] = "the-token";
// A bound on every wait of a test, so that a broken client fails the test instead of hanging it.
constexpr absl::Duration kWait = absl::Seconds(20);

// The Agent service of a cohort-sidecar, reduced to what SidecarClient's tests need: Attach (its
// answer chosen by the test), InsertKeyValue and GetKeyValue; every other method is
// UNIMPLEMENTED. Thread-safe.
class FakeSidecar final : public agentpb::Agent::CallbackService {
 public:
  explicit FakeSidecar(std::string token) : token_(std::move(token)) {
    expiry_thread_ = std::thread([this] { ExpireGets(); });
  }
  ~FakeSidecar() override { Stop(); }

  // Attach finishes with `status` instead of reporting the job connected.
  void FailAttachWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    attach_error_ = std::move(status);
  }
  // Attach reports the job connected only when SendConnected() is called.
  void ConnectOnlyWhenTold() {
    absl::MutexLock lock(&mu_);
    connect_on_attach_ = false;
  }
  // "Every process registered": the first event of the attach stream.
  void SendConnected() {
    absl::MutexLock lock(&mu_);
    agentpb::AgentEvent event;
    event.mutable_connected()->set_process_id(attach_request_.process_id());
    event.mutable_connected()->set_num_processes(attach_request_.num_processes());
    event.mutable_connected()->set_incarnation(0x5eedULL);
    ASSERT_NE(attach_stream_, nullptr) << "nobody attached";
    ASSERT_TRUE(attach_stream_->Push(std::move(event)));
  }
  // A job event down the attach stream, as the real sidecar forwards the service's.
  bool PushJobEvent(pb::JobEvent job_event) {
    absl::MutexLock lock(&mu_);
    if (attach_stream_ == nullptr) return false;
    agentpb::AgentEvent event;
    *event.mutable_job_event() = std::move(job_event);
    return attach_stream_->Push(std::move(event));
  }

  // The job's hang detector asks for evidence, as the real sidecar does
  // (AgentRpcService::RequestDump).
  bool PushDump(uint64_t id, const std::string& directory) {
    absl::MutexLock lock(&mu_);
    if (attach_stream_ == nullptr) return false;
    agentpb::AgentEvent event;
    event.mutable_dump()->set_id(id);
    event.mutable_dump()->set_directory(directory);
    return attach_stream_->Push(std::move(event));
  }

  // Ends every call waiting here (UNAVAILABLE) and refuses later ones: before the server shuts
  // down, which waits for every call to finish.
  void Stop() {
    std::vector<Waiter> waiters;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      waiters.swap(waiting_);
      wake_.Signal();
    }
    if (expiry_thread_.joinable()) expiry_thread_.join();
    for (Waiter& w : waiters) {
      w.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the sidecar is stopping"));
    }
  }

  // Notified when an Attach call arrived (and was answered as configured).
  const absl::Notification& attach_received() const { return attach_received_; }
  // Notified when the attach stream ended from the client's side (cancelled, or the client went).
  const absl::Notification& attach_ended() const { return attach_ended_; }
  // Notified when a GetKeyValue still waiting here was cancelled by the client.
  const absl::Notification& get_cancelled() const { return get_cancelled_; }

  agentpb::AttachRequest attach_request() const {
    absl::MutexLock lock(&mu_);
    return attach_request_;
  }
  // The 'authorization' metadata the last call of `method` carried; nullopt when none did.
  std::optional<std::string> token_seen(const std::string& method) const {
    absl::MutexLock lock(&mu_);
    auto it = tokens_seen_.find(method);
    if (it == tokens_seen_.end()) return std::nullopt;
    return it->second;
  }
  struct GetSeen {
    pb::GetKeyValueRequest request;
    absl::Time received;
    absl::Time deadline;  // The call's gRPC deadline.
  };
  std::vector<GetSeen> gets_seen() const {
    absl::MutexLock lock(&mu_);
    return gets_seen_;
  }
  // Waits (bounded) until `n` gets wait for their key here.
  bool AwaitWaitingGets(size_t n) const {
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_.size() >= n; };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
  }

  grpc::ServerWriteReactor<agentpb::AgentEvent>* Attach(
      grpc::CallbackServerContext* ctx, const agentpb::AttachRequest* req) override {
    auto* stream = new AttachStream(this);
    RecordToken("Attach", *ctx);
    absl::MutexLock lock(&mu_);
    if (absl::Status auth = cohort::CheckToken(*ctx, token_); !auth.ok()) {
      stream->FinishWith(cohort::ToGrpcStatus(auth));
    } else {
      attach_request_ = *req;
      attach_stream_ = stream;
      if (attach_error_) {
        stream->FinishWith(cohort::ToGrpcStatus(*attach_error_));
      } else if (connect_on_attach_) {
        agentpb::AgentEvent event;
        event.mutable_connected()->set_process_id(req->process_id());
        event.mutable_connected()->set_num_processes(req->num_processes());
        event.mutable_connected()->set_incarnation(0x5eedULL);
        stream->Push(std::move(event));
      }
    }
    attach_received_.Notify();
    return stream;
  }

  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::InsertKeyValueRequest* req,
                                           pb::InsertKeyValueResponse*) override {
    RecordToken("InsertKeyValue", *ctx);
    if (absl::Status auth = cohort::CheckToken(*ctx, token_); !auth.ok()) {
      return cohort::FinishUnary(ctx, auth);
    }
    std::vector<Waiter> woken;
    {
      absl::MutexLock lock(&mu_);
      const std::string& key = req->kv().key();
      if (kv_.contains(key) && !req->allow_overwrite()) {
        return cohort::FinishUnary(
            ctx, absl::AlreadyExistsError(absl::StrCat("key '", key, "' already exists")));
      }
      kv_[key] = req->kv().value();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->key == key) {
          it->response->mutable_kv()->set_key(key);
          it->response->mutable_kv()->set_value(req->kv().value());
          woken.push_back(*it);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Waiter& w : woken) w.reactor->Finish(grpc::Status::OK);
    return cohort::FinishUnary(ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const pb::GetKeyValueRequest* req,
                                        pb::GetKeyValueResponse* resp) override {
    RecordToken("GetKeyValue", *ctx);
    if (absl::Status auth = cohort::CheckToken(*ctx, token_); !auth.ok()) {
      return cohort::FinishUnary(ctx, auth);
    }
    auto* reactor = new PendingGet(this);
    const absl::Time now = absl::Now();
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu_);
      gets_seen_.push_back(GetSeen{*req, now, absl::FromChrono(ctx->deadline())});
      if (stopping_) {
        finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the sidecar is stopping");
      } else if (auto it = kv_.find(req->key()); it != kv_.end()) {
        resp->mutable_kv()->set_key(it->first);
        resp->mutable_kv()->set_value(it->second);
      } else {
        // The service enforces the get's own timeout (the client's deadline has slack on top).
        waiting_.push_back(
            Waiter{reactor, req->key(), resp, now + absl::Milliseconds(req->timeout_ms())});
        wake_.Signal();
        return reactor;
      }
    }
    reactor->Finish(finish);
    return reactor;
  }

 private:
  // The server side of the attach stream. Not common/grpc_event_stream.h's EventStream: that one
  // expects a write in flight at a cancellation to complete with ok=false, but it may complete
  // with ok=true, and then the call is never finished (and the server's Shutdown waits forever).
  // Finish is called exactly once, and only with no write in flight, so OnDone (which deletes
  // the stream) cannot race a StartWrite. Push and FinishWith are called under the fake's mu_,
  // which OnDone takes to forget the stream.
  class AttachStream final : public grpc::ServerWriteReactor<agentpb::AgentEvent> {
   public:
    explicit AttachStream(FakeSidecar* fake) : fake_(fake) {}

    // Queues an event; false once the stream is ending.
    bool Push(agentpb::AgentEvent event) {
      const agentpb::AgentEvent* next = nullptr;
      {
        absl::MutexLock lock(&mu_);
        if (ending_) return false;
        queue_.push_back(std::move(event));
        if (writing_) return true;
        writing_ = true;
        next = &queue_.front();
      }
      StartWrite(next);
      return true;
    }
    // Ends the stream with `status` (events still queued are dropped).
    void FinishWith(grpc::Status status) {
      {
        absl::MutexLock lock(&mu_);
        if (ending_) return;
        ending_ = true;
        status_ = std::move(status);
        if (!FinishNowLocked()) return;
      }
      Finish(status_);
    }

    void OnWriteDone(bool ok) override {
      const agentpb::AgentEvent* next = nullptr;
      {
        absl::MutexLock lock(&mu_);
        queue_.pop_front();
        if (!ok && !ending_) {
          ending_ = true;
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "attach stream broke");
        }
        if (!ending_ && !queue_.empty()) {
          next = &queue_.front();
        } else {
          writing_ = false;
          if (!FinishNowLocked()) return;
        }
      }
      if (next != nullptr) {
        StartWrite(next);
      } else {
        Finish(status_);
      }
    }
    void OnCancel() override {
      fake_->AttachEnded();
      {
        absl::MutexLock lock(&mu_);
        if (!ending_) {
          ending_ = true;
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "attach stream cancelled");
        }
        if (!FinishNowLocked()) return;
      }
      Finish(status_);
    }
    void OnDone() override {
      fake_->ForgetAttachStream(this);
      delete this;
    }

   private:
    // Whether to call Finish now (once: when ending, with no write in flight).
    bool FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!ending_ || writing_ || finished_) return false;
      finished_ = true;
      return true;
    }

    FakeSidecar* const fake_;
    absl::Mutex mu_;
    std::deque<agentpb::AgentEvent> queue_ ABSL_GUARDED_BY(mu_);  // Front: the write in flight.
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool ending_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
    grpc::Status status_;  // Set once, when ending_ is.
  };

  void AttachEnded() {
    if (!attach_ended_.HasBeenNotified()) attach_ended_.Notify();
  }
  void ForgetAttachStream(AttachStream* stream) {
    absl::MutexLock lock(&mu_);
    if (attach_stream_ == stream) attach_stream_ = nullptr;
  }

  // A blocking get waiting here; told when the client cancels it.
  class PendingGet final : public grpc::ServerUnaryReactor {
   public:
    explicit PendingGet(FakeSidecar* fake) : fake_(fake) {}
    void OnCancel() override { fake_->OnGetCancelled(this); }
    void OnDone() override { delete this; }

   private:
    FakeSidecar* const fake_;
  };

  struct Waiter {
    PendingGet* reactor;
    std::string key;
    pb::GetKeyValueResponse* response;
    absl::Time deadline;
  };

  void RecordToken(const std::string& method, const grpc::CallbackServerContext& ctx) {
    const auto& metadata = ctx.client_metadata();
    auto it = metadata.find(cohort::kTokenMetadataKey);
    absl::MutexLock lock(&mu_);
    if (it == metadata.end()) {
      tokens_seen_.erase(method);
    } else {
      tokens_seen_[method] = std::string(it->second.data(), it->second.size());
    }
  }

  void OnGetCancelled(PendingGet* reactor) {
    bool found = false;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if (it->reactor == reactor) {
          waiting_.erase(it);
          found = true;
          break;
        }
      }
    }
    if (!found) return;  // Already finished.
    reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    if (!get_cancelled_.HasBeenNotified()) get_cancelled_.Notify();
  }

  // The fake's timer: fails each get whose timeout passed, as the coordination service does.
  void ExpireGets() {
    mu_.Lock();
    while (!stopping_) {
      absl::Time next = absl::InfiniteFuture();
      for (const Waiter& w : waiting_) next = std::min(next, w.deadline);
      wake_.WaitWithDeadline(&mu_, next);
      const absl::Time now = absl::Now();
      std::vector<Waiter> expired;
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->deadline <= now) {
          expired.push_back(*it);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      if (expired.empty()) continue;
      mu_.Unlock();
      for (Waiter& w : expired) {
        w.reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                       absl::StrCat("key '", w.key, "' is not set")));
      }
      mu_.Lock();
    }
    mu_.Unlock();
  }

  const std::string token_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> attach_error_ ABSL_GUARDED_BY(mu_);
  bool connect_on_attach_ ABSL_GUARDED_BY(mu_) = true;
  agentpb::AttachRequest attach_request_ ABSL_GUARDED_BY(mu_);
  AttachStream* attach_stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // Until its OnDone.
  absl::flat_hash_map<std::string, std::string> tokens_seen_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<GetSeen> gets_seen_ ABSL_GUARDED_BY(mu_);
  absl::Notification attach_received_;
  absl::Notification attach_ended_;
  absl::Notification get_cancelled_;
  std::thread expiry_thread_;
};

// The job events a client delivers to on_event.
class Events {
 public:
  SidecarClient::EventCallback Callback() {
    return [this](const JobEvent& e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(e);
    };
  }
  // Waits (bounded) until `n` events arrived; then returns every event so far.
  std::vector<JobEvent> AwaitAtLeast(size_t n) {
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return events_.size() >= n; };
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
    return events_;
  }
  std::vector<JobEvent> Get() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<JobEvent> events_ ABSL_GUARDED_BY(mu_);
};

class SidecarClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "sidecar_client_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr) << "cannot create a directory under " << dir;
    dir_ = dir;
    socket_ = dir_ + "/agent.sock";
    ASSERT_LT(socket_.size(), 100u) << "too long for a Unix socket: " << socket_;
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket_), grpc::InsecureServerCredentials());
    builder.RegisterService(&fake_);
    cohort::AllowClientKeepalive(&builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "cannot serve " << socket_;
  }

  void TearDown() override {
    client_.reset();
    KillSidecar();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The sidecar goes away: its calls end, the attach stream included, and nothing listens.
  void KillSidecar() {
    if (server_ == nullptr) return;
    fake_.Stop();
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_.reset();
  }

  // A client of the fake, attached as process 1 of 4.
  void Attach(std::string token = kToken) {
    client_ = std::make_unique<SidecarClient>(socket_, std::move(token));
    ASSERT_TRUE(client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback()).ok());
  }

  absl::Status Insert(const std::string& key, const std::string& value,
                      bool allow_overwrite = false) {
    return Await<absl::Status>(
        [&](auto done) { client_->InsertKeyValue(key, value, allow_overwrite, std::move(done)); });
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) {
    return Await<absl::StatusOr<std::string>>(
        [&](auto done) { client_->GetKeyValue(key, timeout, std::move(done)); });
  }

  std::string dir_;
  std::string socket_;
  FakeSidecar fake_{kToken};
  std::unique_ptr<grpc::Server> server_;
  Events events_;
  std::unique_ptr<SidecarClient> client_;
};

TEST_F(SidecarClientTest, Attach_EveryProcessRegistered_ReturnsOkAfterConnected) {
  fake_.ConnectOnlyWhenTold();
  client_ = std::make_unique<SidecarClient>(socket_, kToken);
  std::atomic<bool> returned{false};
  absl::Status attached;
  std::thread trainer([&] {
    attached = client_->Attach(2, 4, 3, absl::Seconds(30), events_.Callback());
    returned = true;
  });

  const bool received = fake_.attach_received().WaitForNotificationWithTimeout(kWait);
  EXPECT_TRUE(received);
  if (received) {
    EXPECT_FALSE(returned) << "Attach returned before the sidecar said every process registered";
    fake_.SendConnected();
  }
  trainer.join();
  EXPECT_TRUE(attached.ok()) << attached;

  agentpb::AttachRequest req = fake_.attach_request();
  EXPECT_EQ(req.process_id(), 2);
  EXPECT_EQ(req.num_processes(), 4);
  EXPECT_EQ(req.pid(), getpid());
  EXPECT_EQ(req.initialization_timeout_ms(), 30'000);
  ASSERT_TRUE(req.has_restart_attempt());
  EXPECT_EQ(req.restart_attempt(), 3);
}

TEST_F(SidecarClientTest, Attach_NoRestartAttempt_SendsNone) {
  Attach();
  EXPECT_FALSE(fake_.attach_request().has_restart_attempt());
}

TEST_F(SidecarClientTest, Attach_JobEventPushed_ReachesOnEvent) {
  Attach();
  pb::JobEvent failure;
  failure.mutable_task_failure()->set_task_id(3);
  failure.mutable_task_failure()->set_cause(pb::FAILURE_CAUSE_REPORTED_ERROR);
  failure.mutable_task_failure()->set_message("process 3 reported an error: loss is NaN");
  ASSERT_TRUE(fake_.PushJobEvent(failure));
  pb::JobEvent preemption;
  preemption.mutable_preemption()->set_task_id(0);
  preemption.mutable_preemption()->set_notice_unix_ms(1'700'000'000'123);
  ASSERT_TRUE(fake_.PushJobEvent(preemption));

  std::vector<JobEvent> events = events_.AwaitAtLeast(2);
  ASSERT_EQ(events.size(), 2u);
  const auto* f = std::get_if<TaskFailure>(&events[0]);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->task, 3);
  EXPECT_EQ(f->cause, FailureCause::kReportedError);
  EXPECT_EQ(f->message, "process 3 reported an error: loss is NaN");
  const auto* p = std::get_if<PreemptionNotice>(&events[1]);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->task, 0);
  EXPECT_EQ(p->time, absl::FromUnixMillis(1'700'000'000'123));
}

// The sidecar has no way into the trainer's container: the process writes its own evidence.
TEST_F(SidecarClientTest, DumpRequested_StacksAndFlightRecorderWrittenThenDumped) {
  Attach();
  const std::string dump_dir = dir_ + "/dumps/attempt-0/rank-1";
  std::filesystem::create_directories(dump_dir);
  ASSERT_TRUE(fake_.PushDump(42, dump_dir));

  const std::string dumped = dump_dir + "/dumped";
  const absl::Time deadline = absl::Now() + kWait;
  while (!std::filesystem::exists(dumped) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(dumped)) << "no answer within " << kWait;
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_THAT(read(dumped), ::testing::StartsWith("42 native stacks of every thread"));
  // Written before the answer, never after it.
  const std::string stacks = read(dump_dir + "/stacks.txt");
  EXPECT_THAT(stacks, HasSubstr(absl::StrCat("native stacks of process ", getpid())));
  EXPECT_THAT(stacks, HasSubstr("(dist-events)")) << "the attach stream's reader thread, by name";
  EXPECT_THAT(read(dump_dir + "/flight_recorder.txt"), HasSubstr("cohort flight recorder"));
  EXPECT_TRUE(events_.Get().empty()) << "a dump is no job event";
}

TEST_F(SidecarClientTest, Attach_SidecarRefuses_ReturnsItsError) {
  const std::string message =
      "the trainer says it is process 1 of 4 but its sidecar serves process 2 of 4; the trainer "
      "and the sidecar must see the same COHORT_PROCESS_ID and COHORT_NUM_PROCESSES";
  fake_.FailAttachWith(absl::InvalidArgumentError(message));
  client_ = std::make_unique<SidecarClient>(socket_, kToken);

  absl::Status s = client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
  client_.reset();
  EXPECT_TRUE(events_.Get().empty()) << "a refused attach is no job event";
}

// The sidecar's registration timeout (Agent::Connect's DeadlineExceeded, which names what to
// look at) must reach the trainer, not a guess of libdist's.
TEST_F(SidecarClientTest, Attach_RegistrationTimeout_ReturnsTheSidecarsMessage) {
  const std::string message =
      "reached the coordinator at cohort-0.cohort:8476 but not every process registered within "
      "30s; the coordinator's log and its cohort_task_state metric name the missing ranks";
  fake_.FailAttachWith(absl::DeadlineExceededError(message));
  client_ = std::make_unique<SidecarClient>(socket_, kToken);

  absl::Status s = client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(message));
}

TEST_F(SidecarClientTest, Attach_FirstEventNotConnected_IsInternal) {
  fake_.ConnectOnlyWhenTold();
  client_ = std::make_unique<SidecarClient>(socket_, kToken);
  std::thread sidecar([this] {
    if (!fake_.attach_received().WaitForNotificationWithTimeout(kWait)) return;
    pb::JobEvent failure;
    failure.mutable_task_failure()->set_task_id(0);
    failure.mutable_task_failure()->set_cause(pb::FAILURE_CAUSE_PROCESS_EXITED);
    fake_.PushJobEvent(failure);
  });

  absl::Status s = client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback());
  sidecar.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("'connected'"));
  client_.reset();
  EXPECT_TRUE(events_.Get().empty()) << "an attach that failed delivers no job event";
}

// COHORT_INITIALIZATION_TIMEOUT=inf parses (absl::ParseDuration) and must mean "no limit" (a
// wait_for(seconds::max()) would overflow and time out at once).
TEST_F(SidecarClientTest, Attach_InfiniteTimeout_WaitsForConnected) {
  fake_.ConnectOnlyWhenTold();
  client_ = std::make_unique<SidecarClient>(socket_, kToken);
  std::thread sidecar([this] {
    if (fake_.attach_received().WaitForNotificationWithTimeout(kWait)) fake_.SendConnected();
  });

  absl::Status s =
      client_->Attach(1, 4, std::nullopt, absl::InfiniteDuration(), events_.Callback());
  sidecar.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(SidecarClientTest, Attach_SidecarUnavailable_ReturnsItsMessageNamingTheSocket) {
  fake_.FailAttachWith(absl::UnavailableError("the coordination service is gone"));
  client_ = std::make_unique<SidecarClient>(socket_, kToken);

  absl::Status s = client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(socket_));
  EXPECT_THAT(std::string(s.message()), HasSubstr("the coordination service is gone"));
}

TEST_F(SidecarClientTest, Calls_CarryTheJobToken) {
  Attach();
  ASSERT_TRUE(Insert("k", "v").ok());

  EXPECT_EQ(fake_.token_seen("Attach"), std::optional<std::string>("Bearer the-token"));
  EXPECT_EQ(fake_.token_seen("InsertKeyValue"), std::optional<std::string>("Bearer the-token"));
}

TEST_F(SidecarClientTest, Attach_WrongToken_IsUnauthenticated) {
  client_ = std::make_unique<SidecarClient>(socket_, "another-jobs-token");

  absl::Status s = client_->Attach(1, 4, std::nullopt, absl::Seconds(30), events_.Callback());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("wrong job token"));
  EXPECT_EQ(fake_.token_seen("Attach"), std::optional<std::string>("Bearer another-jobs-token"));
}

TEST_F(SidecarClientTest, KeyValue_InsertThenGet_RoundTrips) {
  Attach();
  ASSERT_TRUE(Insert("config/lr", "0.125").ok());

  absl::StatusOr<std::string> value = Get("config/lr", absl::Seconds(5));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "0.125");
  std::vector<FakeSidecar::GetSeen> gets = fake_.gets_seen();
  ASSERT_EQ(gets.size(), 1u);
  EXPECT_EQ(gets[0].request.key(), "config/lr");
  EXPECT_EQ(gets[0].request.timeout_ms(), 5'000);

  absl::Status again = Insert("config/lr", "1.0");
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  ASSERT_TRUE(Insert("config/lr", "1.0", /*allow_overwrite=*/true).ok());
  EXPECT_EQ(Get("config/lr", absl::Seconds(5)).value_or("<error>"), "1.0");
}

TEST_F(SidecarClientTest, GetKeyValue_KeyNeverSet_IsDeadlineExceeded) {
  Attach();

  absl::StatusOr<std::string> value = Get("never/set", absl::Milliseconds(200));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_THAT(std::string(value.status().message()), HasSubstr("never/set"));
  std::vector<FakeSidecar::GetSeen> gets = fake_.gets_seen();
  ASSERT_EQ(gets.size(), 1u);
  EXPECT_EQ(gets[0].request.timeout_ms(), 200);
  // The call's own deadline leaves the sidecar time to answer first.
  const absl::Duration transport_deadline = gets[0].deadline - gets[0].received;
  EXPECT_GT(transport_deadline,
            absl::Milliseconds(200) + cohort::coordination::kWaitingCallSlack - absl::Seconds(2));
  // (gRPC's timeout header rounds up.)
  EXPECT_LT(transport_deadline,
            absl::Milliseconds(200) + cohort::coordination::kWaitingCallSlack + absl::Seconds(1));
}

TEST_F(SidecarClientTest, SidecarGone_ArrivesAsServiceUnreachable) {
  Attach();

  KillSidecar();

  std::vector<JobEvent> events = events_.AwaitAtLeast(1);
  ASSERT_EQ(events.size(), 1u);
  const auto* f = std::get_if<TaskFailure>(&events[0]);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->cause, FailureCause::kServiceUnreachable);
  EXPECT_EQ(f->task, -1);
  EXPECT_THAT(f->message, HasSubstr(socket_));
  // Later calls fail at once instead of waiting for a sidecar that is gone.
  EXPECT_EQ(Insert("k", "v").code(), absl::StatusCode::kUnavailable);
}

TEST_F(SidecarClientTest, Detach_EndsTheStreamWithoutAFailure) {
  Attach();

  client_->Detach();

  EXPECT_TRUE(fake_.attach_ended().WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(events_.Get().empty()) << "a detach is no loss of the sidecar";
}

TEST_F(SidecarClientTest, Destructor_CallPendingAtSidecar_ReturnsPromptly) {
  Attach();
  absl::Notification done;
  absl::Status status;
  client_->GetKeyValue("never/set", absl::Hours(1), [&](absl::StatusOr<std::string> v) {
    status = v.status();
    done.Notify();
  });
  ASSERT_TRUE(fake_.AwaitWaitingGets(1));

  const absl::Time start = absl::Now();
  client_.reset();
  const absl::Duration took = absl::Now() - start;

  EXPECT_LT(took, absl::Seconds(5));
  ASSERT_TRUE(done.HasBeenNotified()) << "the destructor returned before the call's callback ran";
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(fake_.get_cancelled().WaitForNotificationWithTimeout(kWait))
      << "the sidecar never heard that the call was cancelled";
  EXPECT_TRUE(fake_.attach_ended().WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(events_.Get().empty());
}

}  // namespace
}  // namespace dist::internal

#include "coordination/client/session_client.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"

namespace cohort::coordination {

SessionClient::SessionClient(pb::CoordinationService::Stub* stub, const std::string& token) {
  AddToken(&ctx_, token);
  ctx_.set_wait_for_ready(true);
  stub->async()->Session(&ctx_, this);
  // The hold keeps the call open while writes may still start from outside reactions; it is
  // released once the stream is broken and no write is in flight.
  AddHold();
  StartRead(&response_);
  StartCall();
}

SessionClient::~SessionClient() {
  std::future<void> done = done_.get_future();
  ctx_.TryCancel();
  done.wait();
}

bool SessionClient::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

void SessionClient::Call(pb::SessionRequest req, Done done) {
  const pb::SessionRequest* next = nullptr;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (broken_ && !end_status_.ok()) {
      refused = end_status_;
    } else if (broken_) {
      // The stream is ending but its status is not known yet (the server may have refused it,
      // e.g. a wrong token): the call waits for OnDone, which fails it with that status.
      pending_.emplace(++next_id_, std::move(done));
    } else {
      uint64_t id = ++next_id_;
      req.set_call_id(id);
      pending_.emplace(id, std::move(done));
      next = writer_.Push(std::move(req));
    }
  }
  if (!refused.ok()) {
    pb::SessionResponse none;
    done(refused, none);
    return;
  }
  if (next != nullptr) StartWrite(next);
}

void SessionClient::OnWriteDone(bool ok) {
  const pb::SessionRequest* next = nullptr;
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) broken_ = true;
    if (broken_) {
      writer_.Clear();  // Their calls are failed by FailAll.
    } else {
      next = writer_.WriteDone();
    }
    if (next == nullptr) {
      release = broken_ && !hold_released_;
      if (release) hold_released_ = true;
    }
  }
  if (next != nullptr) StartWrite(next);
  if (release) RemoveHold();
}

void SessionClient::OnReadDone(bool ok) {
  if (!ok) {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      release = !writer_.writing() && !hold_released_;
      if (release) hold_released_ = true;
    }
    if (release) RemoveHold();
    return;
  }
  Done done;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(response_.call_id());
    if (it != pending_.end()) {
      done = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (done) {
    absl::Status s =
        response_.code() == 0
            ? absl::OkStatus()
            : absl::Status(static_cast<absl::StatusCode>(response_.code()), response_.message());
    done(s, response_);
  }
  StartRead(&response_);
}

void SessionClient::OnDone(const grpc::Status& status) {
  absl::Status end = status.ok()
                         ? absl::UnavailableError("the session stream ended")
                         : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                        absl::StrCat("session stream to the coordination service: ",
                                                     status.error_message()));
  FailAll(end);
  done_.set_value();
}

void SessionClient::Abort(const absl::Status& status) {
  FailAll(status);
  ctx_.TryCancel();
}

void SessionClient::FailAll(const absl::Status& status) {
  absl::flat_hash_map<uint64_t, Done> pending;
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
    if (end_status_.ok()) end_status_ = status;
    pending.swap(pending_);
  }
  pb::SessionResponse none;
  for (auto& [id, done] : pending) done(status, none);
}

}  // namespace cohort::coordination

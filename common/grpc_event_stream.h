#pragma once

#include <functional>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/ordered_writer.h"

namespace cohort {

// A server-streaming reactor that writes messages pushed from any thread, one at a time, in
// order. Producers hold a shared_ptr to its Sink, so a push that races with the end of the
// stream is dropped instead of touching a freed reactor. `on_end` runs once when the client
// goes away or the stream fails (not when the server finishes it).
//
// Lifecycle: new EventStream -> handler returns it -> Push()... -> FinishWith() or client
// cancel -> OnDone deletes it.
template <typename Msg>
class EventStream final : public grpc::ServerWriteReactor<Msg> {
 public:
  class Sink {
   public:
    // Queues a message; false when the stream has ended.
    bool Push(Msg msg) {
      const Msg* next = nullptr;
      EventStream* stream = nullptr;
      {
        absl::MutexLock lock(&mu_);
        if (stream_ == nullptr || finished_) return false;
        next = writer_.Push(std::move(msg));
        stream = stream_;
      }
      if (next != nullptr) stream->StartWrite(next);
      return true;
    }
    // Ends the stream with `status` once queued messages are written.
    void FinishWith(const absl::Status& status) {
      EventStream* stream = nullptr;
      {
        absl::MutexLock lock(&mu_);
        if (stream_ == nullptr || finished_) return;
        finish_status_ = status;
        finish_requested_ = true;
        if (writer_.writing()) return;  // OnWriteDone finishes.
        finished_ = true;
        stream = stream_;
      }
      stream->Finish(ToGrpcStatus(status));
    }

   private:
    friend class EventStream;
    absl::Mutex mu_;
    EventStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
    OrderedWriter<Msg> writer_ ABSL_GUARDED_BY(mu_);
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
    bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // The client went away (OnCancel).
    absl::Status finish_status_ ABSL_GUARDED_BY(mu_);
  };

  explicit EventStream(std::function<void()> on_end = nullptr)
      : sink_(std::make_shared<Sink>()), on_end_(std::move(on_end)) {
    absl::MutexLock lock(&sink_->mu_);
    sink_->stream_ = this;
  }
  std::shared_ptr<Sink> sink() const { return sink_; }
  // Sets the end hook; runs it at once if the stream already ended.
  void set_on_end(std::function<void()> on_end) {
    {
      absl::MutexLock lock(&sink_->mu_);
      if (!ended_) {
        on_end_ = std::move(on_end);
        return;
      }
    }
    on_end();
  }

  void OnWriteDone(bool ok) override {
    const Msg* next = nullptr;
    bool finish = false;
    bool broke = false;
    absl::Status status;
    {
      absl::MutexLock lock(&sink_->mu_);
      // A write in flight at a cancel may still complete with ok=true (seen 3 times in 300
      // runs): finish here then too, or the call is never finished and Server::Shutdown hangs.
      if (!ok || sink_->cancelled_) {
        broke = true;
        sink_->writer_.Clear();
        finish = !sink_->finished_;
        sink_->finished_ = true;
        status = absl::CancelledError("event stream broke");
      } else {
        next = sink_->writer_.WriteDone();
        if (next == nullptr && sink_->finish_requested_ && !sink_->finished_) {
          sink_->finished_ = true;
          finish = true;
          status = sink_->finish_status_;
        }
      }
    }
    if (next != nullptr) this->StartWrite(next);
    if (broke) RunOnEnd();
    if (finish) this->Finish(ToGrpcStatus(status));
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&sink_->mu_);
      sink_->cancelled_ = true;
      // With a write in flight, its OnWriteDone (ok or not) follows and finishes the call.
      if (!sink_->writer_.writing() && !sink_->finished_) {
        sink_->finished_ = true;
        finish = true;
      }
    }
    RunOnEnd();
    if (finish) this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override {
    RunOnEnd();
    {
      absl::MutexLock lock(&sink_->mu_);
      sink_->stream_ = nullptr;
    }
    delete this;
  }

 private:
  void RunOnEnd() {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&sink_->mu_);
      ended_ = true;
      fn = std::move(on_end_);
      on_end_ = nullptr;
    }
    if (fn) fn();
  }

  std::shared_ptr<Sink> sink_;
  std::function<void()> on_end_;  // Guarded by sink_->mu_.
  bool ended_ = false;            // Guarded by sink_->mu_.
};

}  // namespace cohort

#pragma once

#include <deque>
#include <utility>

namespace cohort {

// The write side of a gRPC stream reactor (server or client, streaming or bidirectional): gRPC
// allows one write in flight per stream, so messages pushed from any thread queue here and go
// out one at a time, in order. The queue is a std::deque, whose elements keep their addresses
// on push_back, so the message handed to StartWrite stays valid until its OnWriteDone.
//
// Not thread-safe by itself: every method runs under the owning reactor's mutex, which also
// guards the rest of the stream's state. The owner calls StartWrite (outside that mutex) on the
// pointer Push or WriteDone returns:
//
//   const Msg* next;
//   { absl::MutexLock l(&mu_); next = writer_.Push(std::move(msg)); }
//   if (next != nullptr) StartWrite(next);                 // likewise in OnWriteDone(ok)
template <typename Msg>
class OrderedWriter {
 public:
  // Queues `msg`. Returns the message to start writing now, or nullptr while a write is in
  // flight (WriteDone hands out the next one).
  [[nodiscard]] const Msg* Push(Msg msg) {
    queue_.push_back(std::move(msg));
    if (writing_) return nullptr;
    writing_ = true;
    return &queue_.front();
  }

  // The message whose write is in flight, or nullptr: the owner may take from it what must be
  // released outside its mutex before WriteDone drops it.
  Msg* in_flight() { return writing_ ? &queue_.front() : nullptr; }

  // The write in flight completed (OnWriteDone with ok). Returns the next message to write, or
  // nullptr when the queue is empty and the writer idle.
  [[nodiscard]] const Msg* WriteDone() {
    queue_.pop_front();
    if (queue_.empty()) {
      writing_ = false;
      return nullptr;
    }
    return &queue_.front();
  }

  // The stream broke (OnWriteDone with !ok, or the call ended): drops every queued message,
  // including the one whose write just failed, and returns them to the owner (e.g. to release
  // what they hold). No write is in flight afterwards.
  std::deque<Msg> Clear() {
    writing_ = false;
    return std::exchange(queue_, {});
  }

  // A write is in flight: its OnWriteDone is still to come.
  bool writing() const { return writing_; }

 private:
  std::deque<Msg> queue_;
  bool writing_ = false;
};

}  // namespace cohort

#pragma once

#include <future>
#include <memory>
#include <utility>

#include "absl/status/status.h"

namespace dist::internal {

// Runs an asynchronous ControlPlane call and waits for its callback. Every such call carries a
// deadline, so the wait is bounded.
template <typename Resp, typename Call>
std::pair<absl::Status, Resp> Await(Call call) {
  auto promise = std::make_shared<std::promise<std::pair<absl::Status, Resp>>>();
  auto future = promise->get_future();
  call([promise](absl::Status s, const Resp& r) { promise->set_value({s, r}); });
  return future.get();
}

}  // namespace dist::internal

#pragma once

#include <functional>
#include <future>
#include <memory>
#include <utility>

namespace cohort::coordination {

// Runs an asynchronous JobClient call and waits for its callback's value: `call` receives the
// callback (a std::function<void(T)>) to pass on. Every JobClient call is bounded, so the wait
// is too. For callers that block on purpose: libdist's API, tests.
template <typename T, typename Call>
T Await(Call call) {
  // Shared: the callback may still be returning from set_value when the waiter wakes up.
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  call(std::function<void(T)>([promise](T value) { promise->set_value(std::move(value)); }));
  return future.get();
}

}  // namespace cohort::coordination

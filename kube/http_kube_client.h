#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "kube/kube_client.h"
#include "kube/kube_config.h"
#include "kube/rate_limiter.h"

namespace httplib {
class ClientImpl;
}

namespace cohort::kube {

struct HttpKubeClientOptions {
  // Client-side rate limit (--kube-api-qps, --kube-api-burst); qps <= 0 disables it.
  double qps = 500;
  int burst = 1000;
  // Requests in flight at once (watches, which hold a connection each, are not counted);
  // others wait for a connection. <= 0: no limit.
  int max_connections = 16;
  // Retries of 429, 5xx and connection errors, with capped exponential backoff (a 429's
  // Retry-After is honoured up to the cap).
  int max_retries = 5;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(30);
  std::string user_agent = "cohort-operator";
};

// The KubeClient over HTTPS (or HTTP, for a local control plane) with cpp-httplib: a bearer
// token or client certificate, the server verified against the kubeconfig's CA, a pool of
// keep-alive connections so that many threads can call at once, and one rate limiter for all.
// Thread-safe.
class HttpKubeClient final : public KubeClient {
 public:
  // InvalidArgument for a server URL or certificate that cannot be used.
  static absl::StatusOr<std::unique_ptr<HttpKubeClient>> Create(
      const KubeConfig& config, const HttpKubeClientOptions& options, Clock* clock);
  ~HttpKubeClient() override;

  absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                     const std::string& name) override;
  absl::StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns,
                                      const std::string& label_selector,
                                      ListFields fields = ListFields::kAll) override;
  absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                              const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> MergePatch(const Resource& r, const std::string& ns,
                                            const std::string& name, const nlohmann::json& patch,
                                            bool status = false) override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      std::optional<int64_t> grace_period_seconds = std::nullopt) override;
  absl::Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const nlohmann::json& event)>& on_event) override;

  // Any request: `path` with its query. For callers outside the typed calls (discovery).
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const nlohmann::json* body = nullptr,
                                      const std::string& content_type = "application/json");

  // Ends every watch in progress (they return Cancelled) and makes new ones fail at once; for
  // shutdown.
  void CancelWatches();

 private:
  HttpKubeClient(const KubeConfig& config, const HttpKubeClientOptions& options, Clock* clock);

  // Call() whose JSON parse drops what `filter` rejects (nlohmann's parser callback).
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const nlohmann::json* body, const std::string& content_type,
                                      const nlohmann::json::parser_callback_t& filter);

  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> Connect(absl::Duration read_timeout);
  // A connection for one request: an idle one of the pool (`*pooled` true) or a new one.
  std::unique_ptr<httplib::ClientImpl> TakeConnection(bool* pooled);
  void ReturnConnection(std::unique_ptr<httplib::ClientImpl> connection);
  void DropIdleConnections();

  const KubeConfig config_;
  const HttpKubeClientOptions options_;
  Clock* const clock_;
  RateLimiter limiter_;
  bool tls_ = false;
  std::string host_;
  int port_ = 0;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle_ ABSL_GUARDED_BY(mu_);
  int in_use_ ABSL_GUARDED_BY(mu_) = 0;  // Connections taken for a request (watches aside).
  absl::flat_hash_set<httplib::ClientImpl*> watching_ ABSL_GUARDED_BY(mu_);
  bool watches_cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// "a=b,c" -> "a%3Db%2Cc": a query parameter value.
std::string EscapeQueryValue(const std::string& value);

}  // namespace cohort::kube

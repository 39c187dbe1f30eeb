#include "kube/http_kube_client.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <optional>

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/backoff.h"
#include "common/log.h"
#include "kube/api_response.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;

std::chrono::microseconds ToChrono(absl::Duration d) {
  return std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

// Splits "https://host:port[/]" into its parts.
absl::Status ParseServer(const std::string& server, bool* tls, std::string* host, int* port) {
  absl::string_view rest = server;
  if (absl::ConsumePrefix(&rest, "https://")) {
    *tls = true;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    *tls = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("API server address '", server, "' must start with https:// or http://"));
  }
  rest = absl::StripSuffix(rest, "/");
  if (rest.find('/') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "API server address '", server, "' has a path; only scheme://host:port is supported"));
  }
  size_t colon = rest.rfind(':');
  bool bracketed = absl::StartsWith(rest, "[");
  if (colon == absl::string_view::npos || (bracketed && colon < rest.find(']'))) {
    *host = std::string(rest);
    *port = *tls ? 443 : 80;
  } else {
    *host = std::string(rest.substr(0, colon));
    if (!absl::SimpleAtoi(rest.substr(colon + 1), port) || *port <= 0 || *port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("API server address '", server, "' has a bad port"));
    }
  }
  *host = std::string(absl::StripSuffix(absl::StripPrefix(*host, "["), "]"));
  if (host->empty())
    return absl::InvalidArgumentError(
        absl::StrCat("API server address '", server, "' has no host"));
  return absl::OkStatus();
}

bool Retryable(int code) { return code == 429 || code >= 500; }

absl::StatusOr<X509_STORE*> CaStore(const std::string& pem) {
  X509_STORE* store = X509_STORE_new();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++added;
  }
  BIO_free(bio);
  if (added == 0) {
    X509_STORE_free(store);
    return absl::InvalidArgumentError("the certificate authority data holds no PEM certificate");
  }
  return store;
}

}  // namespace

std::string EscapeQueryValue(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

HttpKubeClient::HttpKubeClient(const KubeConfig& config, const HttpKubeClientOptions& options,
                               Clock* clock)
    : config_(config),
      options_(options),
      clock_(clock),
      limiter_(options.qps, options.burst, clock) {}

HttpKubeClient::~HttpKubeClient() = default;

absl::StatusOr<std::unique_ptr<HttpKubeClient>> HttpKubeClient::Create(
    const KubeConfig& config, const HttpKubeClientOptions& options, Clock* clock) {
  std::unique_ptr<HttpKubeClient> client(new HttpKubeClient(config, options, clock));
  if (absl::Status s = ParseServer(config.server, &client->tls_, &client->host_, &client->port_);
      !s.ok()) {
    return s;
  }
  // Fail now, with the cause, rather than on every request.
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> probe =
      client->Connect(options.request_timeout);
  if (!probe.ok()) return probe.status();
  absl::MutexLock lock(&client->mu_);
  client->idle_.push_back(*std::move(probe));
  return client;
}

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> HttpKubeClient::Connect(
    absl::Duration read_timeout) {
  std::unique_ptr<httplib::ClientImpl> c;
  if (tls_) {
    X509* cert = nullptr;
    EVP_PKEY* key = nullptr;
    if (!config_.client_cert_pem.empty()) {
      BIO* bio = BIO_new_mem_buf(config_.client_cert_pem.data(),
                                 static_cast<int>(config_.client_cert_pem.size()));
      cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
      BIO_free(bio);
      bio = BIO_new_mem_buf(config_.client_key_pem.data(),
                            static_cast<int>(config_.client_key_pem.size()));
      key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
      BIO_free(bio);
      if (cert == nullptr || key == nullptr) {
        X509_free(cert);
        EVP_PKEY_free(key);
        return absl::InvalidArgumentError(
            "the client certificate or key is not valid PEM; check client-certificate(-data) and "
            "client-key(-data) in the kubeconfig");
      }
    }
    auto ssl = cert != nullptr ? std::make_unique<httplib::SSLClient>(host_, port_, cert, key)
                               : std::make_unique<httplib::SSLClient>(host_, port_);
    X509_free(cert);
    EVP_PKEY_free(key);
    if (!ssl->is_valid())
      return absl::InvalidArgumentError("could not set up TLS for the API server");
    if (!config_.ca_pem.empty()) {
      absl::StatusOr<X509_STORE*> store = CaStore(config_.ca_pem);
      if (!store.ok()) return store.status();
      ssl->set_ca_cert_store(*store);  // Takes ownership.
    }
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>(host_, port_);
  }
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // Headers and body go in separate writes.
  c->set_connection_timeout(ToChrono(absl::Seconds(10)));
  c->set_read_timeout(ToChrono(read_timeout));
  c->set_write_timeout(ToChrono(options_.request_timeout));
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", options_.user_agent}};
  if (!config_.token.empty())
    headers.emplace("Authorization", absl::StrCat("Bearer ", config_.token));
  c->set_default_headers(headers);
  return c;
}

std::unique_ptr<httplib::ClientImpl> HttpKubeClient::TakeConnection(bool* pooled) {
  *pooled = false;
  {
    absl::MutexLock lock(&mu_);
    // At most max_connections requests at once: each TLS connection costs memory, and more
    // concurrency than this does not make the API server answer faster.
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return options_.max_connections <= 0 || in_use_ < options_.max_connections;
    };
    mu_.Await(absl::Condition(&available));
    ++in_use_;
    if (!idle_.empty()) {
      std::unique_ptr<httplib::ClientImpl> c = std::move(idle_.back());
      idle_.pop_back();
      *pooled = true;
      return c;
    }
  }
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> c = Connect(options_.request_timeout);
  if (!c.ok()) {
    ReturnConnection(nullptr);
    return nullptr;  // Create() proved the settings work.
  }
  return *std::move(c);
}

void HttpKubeClient::DropIdleConnections() {
  std::vector<std::unique_ptr<httplib::ClientImpl>> dropped;
  absl::MutexLock lock(&mu_);
  dropped.swap(idle_);  // Closed outside the lock.
}

void HttpKubeClient::ReturnConnection(std::unique_ptr<httplib::ClientImpl> connection) {
  constexpr size_t kMaxIdle = 64;
  absl::MutexLock lock(&mu_);
  --in_use_;
  if (connection != nullptr && idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

absl::StatusOr<json> HttpKubeClient::Call(const std::string& method, const std::string& path,
                                          const json* body, const std::string& content_type) {
  return Call(method, path, body, content_type, nullptr);
}

absl::StatusOr<json> HttpKubeClient::Call(const std::string& method, const std::string& path,
                                          const json* body, const std::string& content_type,
                                          const json::parser_callback_t& filter) {
  std::string payload = body != nullptr ? body->dump() : "";
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  absl::Status last;
  bool stale_retried = false;  // A request that failed on a pooled connection was sent again.
  bool resend_now = false;
  for (int attempt = 0; attempt <= options_.max_retries; ++attempt) {
    if (attempt > 0 && !resend_now) absl::SleepFor(backoff.Next());
    resend_now = false;
    limiter_.Wait();
    bool pooled = false;
    std::unique_ptr<httplib::ClientImpl> c = TakeConnection(&pooled);
    if (c == nullptr) return absl::InvalidArgumentError("cannot connect to the API server");
    const absl::Time sent = absl::Now();
    httplib::Result res = [&] {
      if (method == "GET") return c->Get(path);
      if (method == "POST") return c->Post(path, payload, content_type);
      if (method == "PUT") return c->Put(path, payload, content_type);
      if (method == "PATCH") return c->Patch(path, payload, content_type);
      return c->Delete(path, payload, content_type);
    }();
    if (LogEnabled(LogLevel::kDebug)) {
      LogDebug(method, " ", path, " -> ",
               res ? absl::StrCat(res->status) : httplib::to_string(res.error()), " in ",
               absl::FormatDuration(absl::Now() - sent));
    }
    if (!res) {
      last = absl::UnavailableError(
          absl::StrCat(method, " ", path, ": cannot reach the API server at ", config_.server, ": ",
                       httplib::to_string(res.error())));
      ReturnConnection(nullptr);  // The connection is dropped, not reused.
      if (pooled && !stale_retried) {
        // A kept-alive connection fails like this when the server closed it while it sat idle
        // (servers close idle connections after seconds; cpp-httplib's after 5). The other idle
        // ones waited as long: drop them all and send the request again at once on a new
        // connection, not counted as a retry, as Go's net/http does. Without this, after a quiet
        // spell every retry took another dead connection and a call failed after seconds of
        // backoff (an in-place restart of 256 ranks waited 5.6 s for it).
        stale_retried = resend_now = true;
        DropIdleConnections();
        --attempt;
      }
      continue;
    }
    ReturnConnection(std::move(c));
    if (res->status >= 200 && res->status < 300) {
      if (res->body.empty()) return json::object();
      json parsed = json::parse(res->body, filter, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        return absl::InternalError(
            absl::StrCat(method, " ", path, ": the API server's response is not JSON"));
      }
      return parsed;
    }
    last = StatusFromResponse(method, path, res->status, res->body);
    if (!Retryable(res->status)) return last;
    if (res->status == 429 && res->has_header("Retry-After")) {
      int seconds = 0;
      if (absl::SimpleAtoi(res->get_header_value("Retry-After"), &seconds)) {
        absl::SleepFor(std::min(absl::Seconds(seconds), options_.max_backoff));
      }
    }
  }
  return last;
}

absl::StatusOr<json> HttpKubeClient::Get(const Resource& r, const std::string& ns,
                                         const std::string& name) {
  return Call("GET", absl::StrCat(r.Path(ns), "/", name));
}

absl::StatusOr<json> HttpKubeClient::List(const Resource& r, const std::string& ns,
                                          const std::string& label_selector, ListFields fields) {
  std::string path = r.Path(ns);
  if (!label_selector.empty())
    absl::StrAppend(&path, "?labelSelector=", EscapeQueryValue(label_selector));
  if (fields == ListFields::kAll) return Call("GET", path);
  // Depth 3 is a key of an item ({"items": [{"spec": ...}]}), depth 4 a key of its spec: of
  // the spec only nodeName and schedulingGates are kept. The callback sees the keys in document
  // order.
  auto in_spec = std::make_shared<bool>(false);
  return Call(
      "GET", path, nullptr, "application/json",
      [in_spec](int depth, json::parse_event_t event, json& parsed) {
        if (event != json::parse_event_t::key) return true;
        if (depth == 3) *in_spec = parsed == "spec";
        return !(depth == 4 && *in_spec && parsed != "nodeName" && parsed != "schedulingGates");
      });
}

absl::StatusOr<json> HttpKubeClient::Create(const Resource& r, const std::string& ns,
                                            const json& object) {
  return Call("POST", r.Path(ns), &object);
}

absl::StatusOr<json> HttpKubeClient::Update(const Resource& r, const std::string& ns,
                                            const json& object) {
  return Call("PUT", absl::StrCat(r.Path(ns), "/", object["metadata"]["name"].get<std::string>()),
              &object);
}

absl::StatusOr<json> HttpKubeClient::UpdateStatus(const Resource& r, const std::string& ns,
                                                  const json& object) {
  return Call(
      "PUT",
      absl::StrCat(r.Path(ns), "/", object["metadata"]["name"].get<std::string>(), "/status"),
      &object);
}

absl::StatusOr<json> HttpKubeClient::MergePatch(const Resource& r, const std::string& ns,
                                                const std::string& name, const json& patch,
                                                bool status) {
  return Call("PATCH", absl::StrCat(r.Path(ns), "/", name, status ? "/status" : ""), &patch,
              "application/merge-patch+json");
}

absl::Status HttpKubeClient::Delete(const Resource& r, const std::string& ns,
                                    const std::string& name,
                                    std::optional<int64_t> grace_period_seconds) {
  json options = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
  if (grace_period_seconds) options["gracePeriodSeconds"] = *grace_period_seconds;
  return Call("DELETE", absl::StrCat(r.Path(ns), "/", name), &options).status();
}

absl::Status HttpKubeClient::Watch(const Resource& r, const std::string& ns,
                                   const WatchOptions& options,
                                   const std::function<bool(const json&)>& on_event) {
  std::string path = absl::StrCat(r.Path(ns), "?watch=1&timeoutSeconds=",
                                  std::max<int64_t>(1, absl::ToInt64Seconds(options.timeout)));
  if (options.bookmarks) absl::StrAppend(&path, "&allowWatchBookmarks=true");
  if (!options.resource_version.empty()) {
    absl::StrAppend(&path, "&resourceVersion=", EscapeQueryValue(options.resource_version));
  }
  if (!options.label_selector.empty()) {
    absl::StrAppend(&path, "&labelSelector=", EscapeQueryValue(options.label_selector));
  }
  limiter_.Wait();
  // A connection of its own: the stream is silent for long stretches, so the read timeout is
  // the watch's own plus a margin.
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> c =
      Connect(options.timeout + absl::Seconds(30));
  if (!c.ok()) return c.status();
  httplib::ClientImpl* conn = c->get();
  {
    absl::MutexLock lock(&mu_);
    if (watches_cancelled_) return absl::CancelledError("the client is shutting down");
    watching_.insert(conn);
  }

  int code = 0;
  std::string error_body;
  WatchStreamDecoder decoder(path);
  httplib::Result res = conn->Get(
      path, httplib::Headers{},
      [&](const httplib::Response& response) {
        code = response.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (code != 200) {
          error_body.append(data, length);
          return true;
        }
        return decoder.Feed(absl::string_view(data, length), on_event);
      });
  bool cancelled = decoder.cancelled();
  {
    absl::MutexLock lock(&mu_);
    watching_.erase(conn);
    if (watches_cancelled_) cancelled = true;
  }
  if (cancelled) return absl::CancelledError("watch cancelled");
  if (!decoder.status().ok()) return decoder.status();
  if (code != 0 && code != 200) return StatusFromResponse("WATCH", path, code, error_body);
  if (!res && res.error() != httplib::Error::Read) {
    return absl::UnavailableError(
        absl::StrCat("WATCH ", path, ": ", httplib::to_string(res.error())));
  }
  return absl::OkStatus();  // The server ended the stream (or it went quiet): resume.
}

void HttpKubeClient::CancelWatches() {
  absl::MutexLock lock(&mu_);
  watches_cancelled_ = true;
  for (httplib::ClientImpl* c : watching_) c->stop();
}

}  // namespace cohort::kube

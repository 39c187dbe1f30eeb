#include "kube/http_kube_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

// A plain-HTTP server that answers the first request of each connection and drops the connection
// at the next one, unanswered: what a client sees of a kept-alive connection the server closed
// while it sat idle, as API servers and load balancers do after a quiet spell. (Over TLS such a
// connection still looks alive to a client's peek, its last record a close_notify unread, so the
// request is sent and its answer never comes.)
class OneRequestPerConnectionServer {
 public:
  OneRequestPerConnectionServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneRequestPerConnectionServer() {
    shutdown(fd_, SHUT_RDWR);                                     // Wakes accept().
    if (int c = current_.load(); c >= 0) shutdown(c, SHUT_RDWR);  // Wakes a read of a connection.
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int connections() const { return connections_; }
  int answered() const { return answered_; }

 private:
  void Serve() {
    for (;;) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections_;
      current_ = c;
      if (ReadRequest(c)) {
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if (write(c, reply.data(), reply.size()) == static_cast<ssize_t>(reply.size())) ++answered_;
        ReadRequest(c);  // The next one on this connection is dropped.
      }
      current_ = -1;
      close(c);
    }
  }

  static bool ReadRequest(int c) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = read(c, buf, sizeof(buf));
      if (n <= 0) return false;
      request.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> answered_{0};
  std::atomic<int> current_{-1};
  std::thread thread_;
};

TEST(HttpKubeClient,
     AKeptConnectionTheServerClosed_TheRequestGoesAgainAtOnceOnANewOne_NotCountedAsARetry) {
  OneRequestPerConnectionServer server;
  // No retries: a request sent on a dead pooled connection must still succeed.
  absl::StatusOr<std::unique_ptr<HttpKubeClient>> client = HttpKubeClient::Create(
      KubeConfig{.server = server.url()}, {.qps = 0, .max_retries = 0}, Clock::Real());
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<nlohmann::json> pod = (*client)->Get(kPods, "default", "p");
    EXPECT_TRUE(pod.ok()) << "request " << i << ": " << pod.status();
  }
  EXPECT_EQ(server.answered(), 3);
  EXPECT_EQ(server.connections(), 3);  // A new one for each request after the first.
}

TEST(HttpKubeClient, TheServerGone_ThePooledConnectionAndTheRetriesFail_TheErrorNamesTheServer) {
  std::optional<OneRequestPerConnectionServer> server(std::in_place);
  const std::string url = server->url();
  absl::StatusOr<std::unique_ptr<HttpKubeClient>> client = HttpKubeClient::Create(
      KubeConfig{.server = url},
      {.qps = 0, .max_retries = 2, .initial_backoff = absl::Milliseconds(1)}, Clock::Real());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Get(kPods, "default", "p").ok());  // A connection in the pool now.
  server.reset();                                           // Nothing listens any more.
  absl::StatusOr<nlohmann::json> pod = (*client)->Get(kPods, "default", "p");
  ASSERT_FALSE(pod.ok());
  EXPECT_EQ(pod.status().code(), absl::StatusCode::kUnavailable) << pod.status();
  EXPECT_NE(pod.status().message().find(url), std::string::npos) << pod.status();
}

}  // namespace
}  // namespace cohort::kube

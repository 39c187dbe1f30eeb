#include "kube/api_response.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST(StatusFromResponse, MapsCodesAndQuotesTheStatusMessage) {
  absl::Status conflict = StatusFromResponse(
      "PUT", "/apis/x", 409,
      R"({"kind":"Status","message":"the object has been modified","code":409})");
  EXPECT_TRUE(absl::IsAborted(conflict));
  EXPECT_THAT(conflict.message(), HasSubstr("the object has been modified (HTTP 409)"));
  EXPECT_TRUE(absl::IsAlreadyExists(StatusFromResponse("POST", "/p", 409, "{}")));
  EXPECT_TRUE(IsGone(StatusFromResponse("GET", "/p", 410, "")));
  EXPECT_TRUE(absl::IsUnavailable(StatusFromResponse("GET", "/p", 503, "<html>busy</html>")));
  EXPECT_THAT(StatusFromResponse("GET", "/p", 503, "<html>busy</html>").message(),
              HasSubstr("<html>busy"));
  // A message that is not a string is no message.
  EXPECT_THAT(StatusFromResponse("GET", "/p", 404, R"({"message": 7})").message(),
              HasSubstr(R"({"message": 7})"));
}

std::vector<json> Feed(WatchStreamDecoder& decoder, const std::vector<std::string>& chunks) {
  std::vector<json> events;
  for (const std::string& c : chunks) {
    if (!decoder.Feed(c, [&](const json& e) {
          events.push_back(e);
          return true;
        })) {
      break;
    }
  }
  return events;
}

TEST(WatchStreamDecoder, EventsSplitAcrossChunks) {
  WatchStreamDecoder decoder("/w");
  std::vector<json> events = Feed(decoder, {R"({"type":"ADDED","obj)",
                                            R"(ect":{}})"
                                            "\n"
                                            R"({"type":"BOOK)",
                                            "MARK\"}\n", "{\"partial\""});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["type"], "ADDED");
  EXPECT_EQ(events[1]["type"], "BOOKMARK");
  EXPECT_TRUE(decoder.status().ok());
}

TEST(WatchStreamDecoder, ErrorEvent410_EndsTheStreamAsGone) {
  WatchStreamDecoder decoder("/w");
  std::vector<json> events =
      Feed(decoder, {"not json\n7\n"
                     R"({"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}})"
                     "\n"
                     R"({"type":"ADDED"})"
                     "\n"});
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(IsGone(decoder.status())) << decoder.status();
  EXPECT_THAT(decoder.status().message(), HasSubstr("too old"));
  EXPECT_FALSE(decoder.Feed("{}\n", [](const json&) { return true; }));
}

// Found by tests/fuzz (kube_json): an ERROR event whose object is not a Status, or a "type" that is
// not a string, threw (nlohmann's value()) in the watch's read loop.
TEST(WatchStreamDecoder, UnexpectedShapes_NoThrow) {
  for (const char* line : {R"({"type":"ERROR","object":"gone"})", R"({"type":"ERROR"})",
                           R"({"type":"ERROR","object":{"code":"410"}})",
                           R"({"type":"ERROR","object":{"code":1e300}})"}) {
    WatchStreamDecoder decoder("/w");
    EXPECT_FALSE(decoder.Feed(std::string(line) + "\n", [](const json&) { return true; })) << line;
    EXPECT_TRUE(absl::IsUnavailable(decoder.status())) << line << ": " << decoder.status();
  }
  WatchStreamDecoder decoder("/w");
  std::vector<json> events = Feed(decoder, {R"({"type":1,"object":[]})"
                                            "\n"});
  EXPECT_EQ(events.size(), 1u);
}

TEST(WatchStreamDecoder, HandlerSaysStop_Cancelled) {
  WatchStreamDecoder decoder("/w");
  int seen = 0;
  EXPECT_FALSE(decoder.Feed("{\"type\":\"ADDED\"}\n{\"type\":\"ADDED\"}\n", [&](const json&) {
    ++seen;
    return false;
  }));
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(decoder.cancelled());
}

}  // namespace
}  // namespace cohort::kube

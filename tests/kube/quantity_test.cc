#include "kube/quantity.h"

#include <gtest/gtest.h>

namespace cohort::kube {
namespace {

TEST(QuantityTest, ParsesWhatKubernetesAcceptsRoundingUp) {
  struct Case {
    const char* text;
    std::optional<int64_t> bytes;
  };
  const Case cases[] = {
      {"4096", 4096},
      {"64Mi", 64 << 20},
      {"1Gi", int64_t{1} << 30},
      {"1.5Gi", int64_t{3} << 29},
      {"100M", 100'000'000},
      {"2k", 2000},
      {"1e9", 1'000'000'000},
      {"5E2", 500},
      {"250m", 1},  // A quarter byte, rounded up to one.
      {"0", 0},
      {"+3Ki", 3072},
      {"8Ei", std::nullopt},  // Beyond int64.
      {"-1Mi", std::nullopt},
      {"", std::nullopt},
      {"Mi", std::nullopt},
      {"64MB", std::nullopt},
      {"64 Mi", std::nullopt},
      {"1.2.3", std::nullopt},
      {"1e", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseQuantity(c.text), c.bytes) << '"' << c.text << '"';
  }
}

}  // namespace
}  // namespace cohort::kube

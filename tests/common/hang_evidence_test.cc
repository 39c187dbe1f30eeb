// Hang evidence's names and waits (common/hang_evidence.h) against
// tests/fixtures/hang_evidence.json, which tests/launcher/hang_evidence_test.py checks the Python
// hook against: a name changed on one side only fails one of the two.
#include "common/hang_evidence.h"

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace cohort::hang_evidence {
namespace {

nlohmann::json Fixture() {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/tests/fixtures/hang_evidence.json");
  return nlohmann::json::parse(in);
}

TEST(HangEvidence, NamesAndWaitsAsTheFixtureHasThem) {
  const nlohmann::json f = Fixture();
  EXPECT_EQ(f["probe_files"]["status"], kStatusFile);
  EXPECT_EQ(f["probe_files"]["dump_request"], kDumpRequestFile);
  EXPECT_EQ(f["probe_files"]["dumped"], kDumpedFile);
  EXPECT_EQ(f["probe_files"]["faulthandler"], kFaulthandlerFile);
  EXPECT_EQ(f["evidence_files"]["stacks"], kStacksFile);
  EXPECT_EQ(f["evidence_files"]["flight_recorder"], kFlightRecorderFile);
  EXPECT_EQ(f["evidence_files"]["torch_flight_recorder"], kTorchFlightRecorderFile);
  std::vector<std::string> read(std::begin(status::kRead), std::end(status::kRead));
  EXPECT_EQ(f["status_fields_read"].get<std::vector<std::string>>(), read);
  std::vector<std::string> probe_files(std::begin(kProbeFiles), std::end(kProbeFiles));
  EXPECT_EQ(probe_files.size(), f["probe_files"].size()) << "every probe file is emptied";
  EXPECT_EQ(f["report_period_s"], absl::ToInt64Seconds(kReportPeriod));
  EXPECT_EQ(f["leftover_status_s"], absl::ToInt64Seconds(kLeftoverStatus));
  EXPECT_EQ(f["evidence_patience_s"], absl::ToInt64Seconds(kEvidencePatience));
}

}  // namespace
}  // namespace cohort::hang_evidence

// The podman command line the podman runtime runs (localcluster/kubelet/podman.h), against a
// stand-in `podman` first on PATH: its output when it succeeds, podman's own reason when it
// fails, and a hung command killed at its deadline instead of holding a kubelet thread for ever.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "localcluster/kubelet/podman.h"

namespace cohort::local {
namespace {

using ::testing::HasSubstr;

class PodmanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("podman-command-", getpid());
    std::filesystem::create_directories(dir_);
    const char* path = getenv("PATH");
    saved_path_ = path ? path : "";
    setenv("PATH", absl::StrCat(dir_.string(), ":", saved_path_).c_str(), 1);
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    std::filesystem::remove_all(dir_);
  }
  // The stand-in podman: a shell script body.
  void FakePodman(const std::string& body) {
    const std::filesystem::path script = dir_ / "podman";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    chmod(script.c_str(), 0755);
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::filesystem::path dir_;
  std::string saved_path_;
};

TEST_F(PodmanCommandTest, Succeeds_ItsOutput_WarningsLeftOutByLogLevel) {
  FakePodman(absl::StrCat("echo \"$@\" > ", (dir_ / "args").string(), "\necho running"));
  absl::StatusOr<std::string> out = Podman({"inspect", "c1"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "running\n");
  EXPECT_EQ(Read("args"), "--log-level error inspect c1\n");
}

TEST_F(PodmanCommandTest, Fails_PodmansOwnReasonAndTheExitCode) {
  FakePodman(
      "echo 'Error: no container with name or ID \"c1\" found: no such container' >&2\nexit 125");
  absl::StatusOr<std::string> out = Podman({"kill", "c1"});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("podman kill failed (exit code 125)"));
  EXPECT_THAT(out.status().message(), HasSubstr("no container with name or ID \"c1\" found"));
}

TEST_F(PodmanCommandTest, Hung_KilledAtItsDeadline_NamingTheCommand) {
  // Writes its pid, then never ends (tail -f of /dev/null waits for data that never comes).
  FakePodman(absl::StrCat("echo $$ > ", (dir_ / "pid").string(), "\nexec tail -f /dev/null"));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> out = Podman({"rm", "-f", "c1"}, absl::Seconds(3));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_THAT(out.status().message(), HasSubstr("podman rm did not finish in 3s and was killed"));
  EXPECT_GE(took, absl::Seconds(3));
  EXPECT_LT(took, absl::Seconds(30));
  // The hung process is gone (killed and reaped), not left running.
  pid_t pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(Read("pid")), &pid)) << Read("pid");
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

// Podman ended, but something it started still holds its output open (as conmon may): what it
// said and its exit status stand; it is not reported as hung.
TEST_F(PodmanCommandTest, EndedWhileItsChildHoldsTheOutput_ItsStatusStands) {
  FakePodman(absl::StrCat("tail -f /dev/null &\necho $! > ", (dir_ / "pid").string(),
                          "\necho created\nexit 0"));
  absl::StatusOr<std::string> out = Podman({"create", "c1"}, absl::Seconds(1));
  pid_t child = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(Read("pid")), &child)) << Read("pid");
  kill(child, SIGKILL);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "created\n");
}

}  // namespace
}  // namespace cohort::local

#include "launcher/python_probe_install.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/hang_evidence.h"
#include "common/shared_dir.h"
#include "launcher/python_probe_files.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;

// The directory of the hook beside cohort-launch.
fs::path ProbeSourceDir(const fs::path& launcher) { return launcher.parent_path() / "python"; }

}  // namespace

absl::Status InstallLauncher(const std::string& destination) {
  std::error_code ec;
  fs::path dest(destination);
  if (dest.has_parent_path()) fs::create_directories(dest.parent_path(), ec);
  fs::path tmp = dest;
  tmp += ".tmp";
  fs::copy_file("/proc/self/exe", tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(tmp, fs::perms(0755), ec);
  if (!ec) fs::rename(tmp, dest, ec);
  const fs::path probe = ProbeSourceDir(fs::absolute(dest));
  if (!ec) fs::create_directories(probe, ec);
  // Writable by the trainer's uid too, whatever it is: the first rank keeps the hook's compiled
  // .pyc there for the others (docs/python-probe.md, "What it costs").
  if (!ec) fs::permissions(probe, fs::perms::all, ec);
  for (const EmbeddedFile& file : kEmbeddedFiles) {
    if (ec) break;
    const fs::path path = probe / file.name;
    fs::path part = path;
    part += ".tmp";
    std::ofstream(part, std::ios::trunc) << file.contents;
    fs::permissions(part, fs::perms(0644), ec);
    if (!ec) fs::rename(part, path, ec);
  }
  if (!ec) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("cannot install into ", destination, ": ", ec.message(),
                   "; the directory must be writable (the operator mounts an emptyDir there)"));
}

std::map<std::string, std::string> ProbeVariables(const std::string& agent_socket, int rank) {
  if (agent_socket.empty() || env::Get(env::kPythonProbe).value_or("1") == "0" ||
      env::Get(env::kHangTimeout).value_or("auto") == "0") {
    return {};
  }
  std::error_code ec;
  const fs::path hook = ProbeSourceDir(fs::read_symlink("/proc/self/exe", ec));
  if (ec || !fs::exists(hook / "sitecustomize.py", ec)) return {};
  const std::string dir = env::ProbeDir(agent_socket, rank);
  // The trainer's uid may differ from the sidecar's, which reads it.
  MakeSharedDirectories(dir, fs::path(dir).parent_path().string());
  for (const char* leftover : hang_evidence::kProbeFiles) {
    fs::remove(fs::path(dir) / leftover, ec);
  }
  std::string path = hook.string();
  if (std::optional<std::string> inherited = env::Get("PYTHONPATH"))
    absl::StrAppend(&path, ":", *inherited);
  return {
      {"PYTHONPATH", path}, {env::kProbeDir, dir}, {env::kProbeParentPid, absl::StrCat(getpid())}};
}

}  // namespace cohort

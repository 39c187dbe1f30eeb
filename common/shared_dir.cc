#include "common/shared_dir.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

namespace cohort {

bool MakeSharedDirectories(const std::string& dir, const std::string& top) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) return false;
  const fs::path stop = fs::path(top).lexically_normal();
  for (fs::path p = fs::path(dir).lexically_normal(); p.has_relative_path(); p = p.parent_path()) {
    if (chmod(p.c_str(), 0777) != 0 || p == stop) break;
  }
  return true;
}

}  // namespace cohort

#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"

// Small whole-file reads and writes, for the files processes of a pod share (status files,
// answers, evidence).
namespace cohort {

// The whole file; nullopt when it cannot be opened.
std::optional<std::string> ReadFile(const std::string& path);

// Writes `text` to `path` at once for readers: into "<path>.tmp", then renamed over `path`.
// Internal naming the file and the cause when either step fails.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace cohort

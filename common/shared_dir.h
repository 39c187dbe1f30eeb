#pragma once

#include <string>

namespace cohort {

// Creates `dir` and the parents it lacks, and opens `dir` and each parent up to and including
// `top` (a prefix of `dir`) to every user (mode 0777, as Kubernetes makes an emptyDir): a pod's
// containers may run as different users, and both write there (hang detection's probe and
// dumps directories under the cohort-agent emptyDir). False when `dir` cannot be made.
bool MakeSharedDirectories(const std::string& dir, const std::string& top);

}  // namespace cohort

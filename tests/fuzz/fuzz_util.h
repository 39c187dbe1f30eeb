#pragma once

// Shared by the fuzz targets: invariant checks that abort with a message (libFuzzer and the gcc
// replay driver both report an abort as a failure, with the input that caused it), and the reader
// of the line-oriented scripts that the coordination targets take as input.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cohort::fuzz {

[[noreturn]] inline void Fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// FUZZ_CHECK(condition, message parts...): an invariant of the code under test. Active in every
// build type (unlike assert).
#define FUZZ_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) ::cohort::fuzz::Fail(__FILE__, __LINE__, absl::StrCat(#cond, ": ", __VA_ARGS__)); \
  } while (0)

// A script: one operation per line, words separated by spaces or tabs. A word in double quotes may
// hold spaces ("" is the empty word; there are no escapes). Lines starting with '#' are comments.
using Words = std::vector<std::string>;

inline std::vector<Words> ParseScript(absl::string_view input, size_t max_lines) {
  std::vector<Words> lines;
  size_t pos = 0;
  while (pos < input.size() && lines.size() < max_lines) {
    size_t end = input.find('\n', pos);
    if (end == absl::string_view::npos) end = input.size();
    absl::string_view line = input.substr(pos, end - pos);
    pos = end + 1;
    Words words;
    size_t i = 0;
    while (i < line.size()) {
      char c = line[i];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i;
      } else if (c == '"') {
        size_t close = line.find('"', i + 1);
        if (close == absl::string_view::npos) close = line.size();
        words.emplace_back(line.substr(i + 1, close - i - 1));
        i = close + 1;
      } else {
        size_t stop = line.find_first_of(" \t\r", i);
        if (stop == absl::string_view::npos) stop = line.size();
        words.emplace_back(line.substr(i, stop - i));
        i = stop;
      }
    }
    if (!words.empty() && words[0][0] != '#') lines.push_back(std::move(words));
  }
  return lines;
}

inline std::string Word(const Words& w, size_t i, std::string fallback = "") {
  return i < w.size() ? w[i] : fallback;
}

inline int64_t Int(const Words& w, size_t i, int64_t fallback) {
  int64_t v;
  if (i < w.size() && absl::SimpleAtoi(w[i], &v)) return v;
  return fallback;
}

// A value word: "text*count" stands for `count` copies of "text" (at most `max_bytes` in all), so
// that a short script can reach the size limits.
inline std::string ExpandValue(const std::string& word, size_t max_bytes) {
  size_t star = word.rfind('*');
  uint64_t count;
  if (star == std::string::npos || star == 0 || !absl::SimpleAtoi(word.substr(star + 1), &count)) {
    return word;
  }
  const std::string unit = word.substr(0, star);
  const size_t target = unit.size() * std::min<uint64_t>(count, max_bytes / unit.size());
  if (target == 0) return "";
  std::string out = unit;
  out.reserve(target);
  while (out.size() * 2 <= target) out += out;  // Doubling: a 1 MiB value in 20 appends.
  out.append(out, 0, target - out.size());
  return out;
}

}  // namespace cohort::fuzz

#!/usr/bin/env bash
# Reports the clang sub-build's thread-safety check (cmake/ClangSubbuild.cmake): passed when the
# sub-build succeeded (a finding fails the build before any test runs), skipped (77) with the reason
# when it was not built. Usage: clang_thread_safety_test.sh STAMP_FILE [SKIP_REASON]
set -euo pipefail
stamp="$1"
reason="${2:-}"
if [ -n "$reason" ]; then
  echo "SKIPPED: the clang thread-safety check did not run: $reason"
  exit 77
fi
if [ ! -f "$stamp" ]; then
  echo "the clang sub-build has not completed ($stamp is missing): run 'make build' (or cmake --build BUILD_DIR --target clang-subbuild)" >&2
  exit 1
fi
echo "the clang sub-build compiled every library and binary with -Wthread-safety -Werror=thread-safety"

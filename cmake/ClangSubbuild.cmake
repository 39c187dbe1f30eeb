# The clang sub-build: the whole project configured a second time, with clang, under
# ${CMAKE_BINARY_DIR}/clang, as the target `clang-subbuild`. `make build` builds it with the rest;
# `make test` (and CI) builds it at idle priority while the first tests run, and runs the tests that
# need it (label `clang-subbuild`) last (scripts/run-tests.sh, docs/testing.md). It is not part of
# `all`: `cmake --build BUILD_DIR --target all clang-subbuild` builds both. It does two jobs
# (cmake/ThreadSafetyCheck.cmake):
#  - every library and binary (not the tests and benchmarks) with -Wthread-safety
#    -Werror=thread-safety, so that the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations
#    are checked by a compiler rather than read as comments (clang -fsyntax-only: no code);
#  - when libFuzzer is installed, the fuzz targets of tests/fuzz and what they link, instrumented
#    for fuzzing (ASan, UBSan, coverage), which the `fuzz` tests and `make fuzz` run.
# Without clang (or with -DCOHORT_CLANG_SUBBUILD=OFF) nothing is built and the tests that need it
# report SKIPPED with the reason; so does the fuzzers' part without libFuzzer.
#
# Sets COHORT_CLANG_SKIP_REASON and COHORT_FUZZ_SKIP_REASON (empty when that part is built),
# COHORT_CLANG_BINARY_DIR and COHORT_CLANG_STAMP (a file present once the sub-build succeeded).

set(COHORT_CLANG_BINARY_DIR ${CMAKE_BINARY_DIR}/clang)
set(COHORT_CLANG_STAMP ${COHORT_CLANG_BINARY_DIR}/stamp/clang-subbuild-done)
set(COHORT_CLANG_SKIP_REASON "")
set(COHORT_FUZZ_SKIP_REASON "")
set(_install_hint "install clang and libclang-rt-14-dev (scripts/install-deps.sh does), then re-run cmake (cmake -S . -B build)")

find_program(COHORT_CLANGXX NAMES clang++ clang++-16 clang++-15 clang++-14)
find_program(COHORT_CLANG NAMES clang clang-16 clang-15 clang-14)
if(NOT COHORT_CLANG_SUBBUILD)
  set(COHORT_CLANG_SKIP_REASON "this build was configured with -DCOHORT_CLANG_SUBBUILD=OFF")
elseif(NOT COHORT_CLANGXX OR NOT COHORT_CLANG OR NOT EXISTS "${COHORT_CLANGXX}" OR NOT EXISTS "${COHORT_CLANG}")
  set(COHORT_CLANG_SKIP_REASON "clang is not installed: ${_install_hint}")
endif()

if(COHORT_CLANG_SKIP_REASON)
  set(COHORT_FUZZ_SKIP_REASON "${COHORT_CLANG_SKIP_REASON}")
else()
  # libFuzzer's runtime comes in a package of its own (Debian: libclang-rt-N-dev).
  set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/libfuzzer-probe)
  file(MAKE_DIRECTORY ${_probe_dir})
  file(WRITE ${_probe_dir}/probe.cc
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(
    COMMAND ${COHORT_CLANGXX} -fsanitize=fuzzer,address,undefined probe.cc -o probe
    WORKING_DIRECTORY ${_probe_dir} RESULT_VARIABLE _probe_result OUTPUT_QUIET ERROR_QUIET)
  if(NOT _probe_result EQUAL 0)
    set(COHORT_FUZZ_SKIP_REASON
        "${COHORT_CLANGXX} cannot link libFuzzer with ASan and UBSan: ${_install_hint}")
  endif()
endif()

if(COHORT_CLANG_SKIP_REASON)
  message(STATUS "clang sub-build: skipped (${COHORT_CLANG_SKIP_REASON})")
  # The target still exists (`make build` asks for it) and says why it builds nothing.
  add_custom_target(clang-subbuild
    COMMAND ${CMAKE_COMMAND} -E echo "clang sub-build skipped: ${COHORT_CLANG_SKIP_REASON}")
  return()
endif()
if(COHORT_FUZZ_SKIP_REASON)
  set(_fuzzers OFF)
  message(STATUS "clang sub-build: thread-safety check only (${COHORT_FUZZ_SKIP_REASON})")
else()
  set(_fuzzers ON)
  message(STATUS "clang sub-build: thread-safety check and fuzz targets in ${COHORT_CLANG_BINARY_DIR}")
endif()

include(ExternalProject)
# -O1 and no NDEBUG: the fuzz targets want assertions (nlohmann's among them) and speed both.
set(_flags "-O1 -gline-tables-only")
ExternalProject_Add(clang-subbuild
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${COHORT_CLANG_BINARY_DIR}
  # Inside the binary directory, so that deleting it rebuilds everything from the configure step.
  PREFIX ${COHORT_CLANG_BINARY_DIR}/ep
  STAMP_DIR ${COHORT_CLANG_BINARY_DIR}/stamp
  TMP_DIR ${COHORT_CLANG_BINARY_DIR}/ep/tmp
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS
    -DCMAKE_C_COMPILER=${COHORT_CLANG}
    -DCMAKE_CXX_COMPILER=${COHORT_CLANGXX}
    -DCMAKE_BUILD_TYPE=ClangCheck
    -DCMAKE_C_FLAGS_CLANGCHECK=${_flags}
    -DCMAKE_CXX_FLAGS_CLANGCHECK=${_flags}
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
    -DCOHORT_CLANG_SUBBUILD=OFF
    -DCOHORT_CLANG_CHECKS=ON
    -DCOHORT_BUILD_FUZZERS=${_fuzzers}
    -DCOHORT_BUILD_TESTS=OFF
    -DCOHORT_BUILD_BENCHMARKS=OFF
  CMAKE_CACHE_ARGS -DCMAKE_PREFIX_PATH:STRING=${CMAKE_PREFIX_PATH}
  # What it builds: cmake/ThreadSafetyCheck.cmake. Its own build system knows what changed; run it
  # on every build.
  BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> --target clang-checks
  BUILD_ALWAYS ON
  EXCLUDE_FROM_ALL ON
  USES_TERMINAL_CONFIGURE ON
  USES_TERMINAL_BUILD ON
  INSTALL_COMMAND ""
  TEST_COMMAND "")

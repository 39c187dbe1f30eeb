#pragma once

// The evidence a libdist process leaves when the job's hang detector asks for it (docs/faults.md,
// "Hung ranks"): the native frames of every thread and the flight recorder's last collectives,
// written by the process itself, so that no debugger, SYS_PTRACE or shared process namespace is
// needed.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dist::internal {

// Every thread of this process with its name, state and native frames, symbolized ("Thread 812
// (dist-events) S, in futex_wait_queue:\n  #0 0x7f.. __futex_abstimed_wait_common (libc.so.6)").
// Each other thread is interrupted by a real-time signal whose disposition is the default (the
// program's own signals are left alone) and records its frames in the handler; a thread that
// blocks it, or does not answer within `per_thread`, is listed without frames, saying why. A
// thread in a system call that cannot restart (poll, nanosleep) sees EINTR, as under a sampling
// profiler. One dump at a time (callers wait for each other).
std::string ThreadStacks(absl::Duration per_thread = absl::Seconds(1));

// Writes <directory>/stacks.txt (ThreadStacks) and <directory>/flight_recorder.txt, then
// <directory>/dumped ("<id> <summary>"), which tells the sidecar the evidence is complete.
absl::Status WriteHangDump(uint64_t id, const std::string& directory);

}  // namespace dist::internal

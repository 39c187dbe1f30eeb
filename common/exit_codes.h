#pragma once

// Exit statuses with a meaning across Cohort's parts: libdist sets them, cohort-run and
// cohort-operator read them. libdist's public header repeats the first two for programs
// (dist::kPeerFailureExitCode, dist::kPreemptedExitCode) and checks at compile time that they
// agree with these.
namespace cohort {

// A process that exited because another process of the job failed (libdist's default
// peer-failure handler): it followed a failure and did not cause it.
inline constexpr int kPeerFailureExitCode = 75;

// A process that saved its checkpoint at the preemption sync point and stops because the job is
// being preempted: the gang restarts without counting a failure.
inline constexpr int kPreemptedExitCode = 76;

}  // namespace cohort

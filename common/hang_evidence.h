#pragma once

// Hang evidence (docs/faults.md, "Hung ranks"): the files a pod's processes and its sidecar
// exchange, the fields of a process's status, and the waits, defined once. Readers and writers:
// the Python start-up hook (launcher/python_probe/_cohort_probe.py, which cannot include this:
// tests/fixtures/hang_evidence.json holds the same names, and a C++ test and a Python test read
// it), cohort-launch (python_probe_install.cc empties a probe directory), the sidecar
// (sidecar/progress_watch.cc reads and asks) and libdist (libdist/src/hang_dump.cc writes).
//
//   the hook   --<probe dir>/status.json, every second-->  the sidecar's ProgressWatch
//   the sidecar --<probe dir>/dump-request "<id> <evidence dir>"--> the hook
//   the hook or libdist --<evidence dir>/stacks.txt, ..., then <probe dir or evidence dir>/dumped
//                         "<id> <summary>"--> the sidecar --dumped_id--> rank 0's attempt hub
//
// One wait for the evidence, kEvidencePatience, counted from the hang's detection: the attempt
// hub calls the evidence complete when every pod that follows it collected its own, or once it
// has passed (AttemptLedger); a sidecar reports what its processes wrote by then, one report
// period earlier (ProgressWatch); the operator acts on a Fail or Restart hangPolicy once the hub
// says the evidence is complete (hang_policy.h), or at once when the hub is gone.
//
// Two staleness rules, on purpose: they judge different things at different scales. The hang
// detector (coordination/attempts/hang_detector.h, kStaleReport: 30 s) judges a pod by its
// sidecar's reports of steps, over a timeout of minutes: a sidecar silent that long tells nothing
// (heartbeats find a lost sidecar). libdist's collective watchdog (DiagnoseTimeout's
// `stale_after`, about 2 s) judges the ranks of one timed-out collective by the progress they
// report every 500 ms, within the collective timeout + 1 s (docs/faults.md): a rank silent that
// long stopped.

#include "absl/time/time.h"

namespace cohort::hang_evidence {

// In a process's probe directory (env::ProbeDir; COHORT_PROBE_DIR for the hook).
inline constexpr char kStatusFile[] = "status.json";        // The hook's status, every second.
inline constexpr char kDumpRequestFile[] = "dump-request";  // The sidecar's "<id> <directory>".
inline constexpr char kDumpedFile[] = "dumped";             // "<id> <summary>": collected.
inline constexpr char kFaulthandlerFile[] = "faulthandler.txt";  // SIGUSR2: every stack.
// What a probe directory holds that an earlier process of the rank may have left.
inline constexpr const char* kProbeFiles[] = {kStatusFile, kDumpRequestFile, kDumpedFile,
                                              kFaulthandlerFile};

// In a rank's evidence directory (<dumps>/attempt-<n>/rank-<r>).
inline constexpr char kStacksFile[] = "stacks.txt";                   // Every thread's stack.
inline constexpr char kFlightRecorderFile[] = "flight_recorder.txt";  // libdist's collectives.
inline constexpr char kTorchFlightRecorderFile[] = "fr_trace.json";   // torch's, as JSON.

// The fields of status.json the sidecar reads (the hook writes more, for people).
namespace status {
inline constexpr char kUnixMs[] = "unix_ms";                    // When it was written.
inline constexpr char kStartedUnixMs[] = "started_unix_ms";     // When the process started.
inline constexpr char kSteps[] = "steps";                       // Steps made so far.
inline constexpr char kLastStepUnixMs[] = "last_step_unix_ms";  // The last one (0: none yet).
inline constexpr char kMedianStepMs[] = "median_step_ms";       // 0 before two steps.
inline constexpr char kPhase[] = "phase";                       // "init", "run", "checkpoint".
inline constexpr char kBusy[] = "busy";        // The main thread's Python stack moves.
inline constexpr char kWaiting[] = "waiting";  // In a collective (op names it).
inline constexpr char kOp[] = "op";
inline constexpr char kWhere[] = "where";  // "train.py:88 in step: time.sleep(3600)".
inline constexpr const char* kRead[] = {kUnixMs,       kStartedUnixMs, kSteps, kLastStepUnixMs,
                                        kMedianStepMs, kPhase,         kBusy,  kWaiting,
                                        kOp,           kWhere};
}  // namespace status

// How often the hook rewrites its status, and the sidecar reports to the hub.
inline constexpr absl::Duration kReportPeriod = absl::Seconds(1);
// A status file older than this is a leftover of a process gone: its rank is not judged by it.
inline constexpr absl::Duration kLeftoverStatus = absl::Minutes(2);
// The one wait for the evidence, from the hang's detection (above).
inline constexpr absl::Duration kEvidencePatience = absl::Seconds(30);

}  // namespace cohort::hang_evidence

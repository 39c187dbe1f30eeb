#pragma once

#include <signal.h>

namespace cohort {

// For a program whose one signal thread takes SIGTERM and SIGINT with sigwait(): blocks both in
// the calling thread (and so in every thread it starts afterwards; call it before starting any)
// and ignores SIGPIPE, so a peer that closed its socket is an error on the write, not our
// death. Returns the set to pass to sigwait().
sigset_t BlockTerminationSignals();

}  // namespace cohort

#pragma once

#include <string>

#include "localcluster/kubelet/container.h"

namespace cohort::local {

// Probes the running container's readiness when due (c.next_probe): an httpGet readinessProbe
// on the pod's `address` (the port by number or by the container's port name) sets c.ready; a
// container without one is ready once running. Probed again after periodSeconds (at most 10)
// while ready, at once while not, plus 200 ms either way.
void Probe(Container& c, const std::string& address);

}  // namespace cohort::local

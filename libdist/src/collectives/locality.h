#pragma once

// Where this process runs, as the host backend sees it: which ranks can share memory with it,
// and the address its TCP transport announces to the others.

#include <string>

namespace dist::internal {

// Processes with the same key share memory and reach each other's abstract Unix sockets: the
// kernel's boot id plus the network namespace's inode.
std::string LocalityKey();

// The address to announce for TCP: `configured` when set, else COHORT_POD_IP, else the address
// this host uses towards the coordinator (127.0.0.1 when the coordinator is on loopback or
// unknown).
std::string TcpHost(const std::string& configured, const std::string& coordinator_address);

}  // namespace dist::internal

#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort::local {

// The podman command line as the local kubelet's container runtime (--runtime podman) uses it:
// one podman pod per Kubernetes pod, its containers created from images in the local store
// (never pulled), each run attached so that its output goes where the kubelet keeps logs.
// Podman's own settings come from its usual places (CONTAINERS_CONF; docs/images.md).

// The labels every podman pod of the local cluster carries, so that a node's pods can be found
// and removed when its kubelet is gone.
inline constexpr char kClusterLabel[] = "local.cohort.dev/cluster";
inline constexpr char kNodeLabel[] = "local.cohort.dev/node";

struct PodSandboxSpec {
  std::string name;
  std::string network;   // A podman network (cohort-local-cluster creates one per cluster).
  std::string address;   // The pod's address on it.
  std::string hostname;  // The pod's hostname (spec.hostname, else its name).
  std::map<std::string, std::string> labels;
};

struct ContainerMount {
  std::string source;  // A directory or file on the host.
  std::string target;  // Where the container sees it.
  bool read_only = false;
};

struct ContainerSpec {
  std::string name;  // Unique on the machine.
  std::string pod;   // The podman pod it joins.
  std::string image;
  std::vector<std::string>
      command;  // Empty: the image's entrypoint (and its CMD when args are empty too).
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::vector<ContainerMount> mounts;
  std::string working_dir;
  std::string user;  // "uid[:gid]"; empty: the image's.
  bool read_only_root = false;
  bool no_new_privileges = false;
  std::vector<std::string> cap_add, cap_drop;
  std::map<std::string, std::string> labels;
};

// What `podman inspect` says of a container.
struct ContainerState {
  std::string id;
  std::string status;  // "created", "running", "exited", ...
  int exit_code = 0;
  bool oom_killed = false;
  pid_t pid = 0;  // The container's first process, as this machine numbers it; 0 when not running.
  std::string image_id;
};

// A cluster's podman network: a bridge with a /16 of its own, 10.<n>.0.0/16, whose gateway (the
// host, as the pods see it) is 10.<n>.0.1.
struct PodmanNetwork {
  std::string name;
  std::string prefix;  // "10.<n>."
  std::string gateway;
};
// Creates network `name` on a subnet no other network uses, labelled with this process's pid;
// first removes the networks of clusters whose process is gone (killed before it could).
absl::StatusOr<PodmanNetwork> CreateClusterNetwork(const std::string& name);
void RemoveNetwork(const std::string& name);

// Runs `podman args...` to its end. Its output (stdout and stderr) when it exits 0; otherwise
// an error carrying the output's last line. A command still running after `timeout` is hung (a
// wedged storage lock, a runtime that does not answer): it is killed and DeadlineExceeded
// returned, so that no kubelet thread waits on it for ever.
inline constexpr absl::Duration kPodmanCommandTimeout = absl::Minutes(2);
absl::StatusOr<std::string> Podman(const std::vector<std::string>& args,
                                   absl::Duration timeout = kPodmanCommandTimeout);

// NotFound when `podman` is not installed; FailedPrecondition (with podman's reason) when it
// cannot run containers here.
absl::Status CheckPodman();

absl::Status CreatePodSandbox(const PodSandboxSpec& spec);
// Removes the pod and its containers at once (SIGKILL); nothing when it does not exist.
void RemovePodSandbox(const std::string& name);
// The pods that carry `label`=`value`, removed.
void RemovePodSandboxes(const std::string& label, const std::string& value);

// The user an image runs as (its USER; empty: root).
absl::StatusOr<std::string> ImageUser(const std::string& image);
// Creates the container (removing an older one of the same name). NotFound, with what to do,
// when the image is not in the local store.
absl::StatusOr<std::string> CreateContainer(const ContainerSpec& spec);
// The command line that starts the created container and stays attached to it until it exits,
// with the container's exit code.
std::vector<std::string> StartAttachedCommand(const std::string& name);
absl::Status KillContainer(const std::string& name, int signal);
// Kills (SIGKILL) and removes the container, whatever its state; nothing when it does not exist.
void RemoveContainer(const std::string& name);
absl::StatusOr<ContainerState> InspectContainer(const std::string& name);

// Removes every podman pod labelled `label`=`value` when this process is gone, however it goes
// (SIGKILL included): a helper process waits for a pipe this process holds to close. A lost node
// loses its containers this way. Returns the helper's pid; Close() it for a clean exit.
class PodReaper {
 public:
  static absl::StatusOr<PodReaper> Start(const std::string& label, const std::string& value);
  PodReaper() = default;
  PodReaper(PodReaper&& other) noexcept;
  PodReaper& operator=(PodReaper&& other) noexcept;
  ~PodReaper();  // Close().
  // Lets the helper remove what is left, and waits for it.
  void Close();

 private:
  int write_fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace cohort::local

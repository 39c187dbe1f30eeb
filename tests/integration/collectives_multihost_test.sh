#!/usr/bin/env bash
# libdist collectives across hosts: two network namespaces joined by a veth pair stand in for two
# hosts. With one rank on one and two on the other, the ranks must find out that not all of them
# share memory and run every op over TCP; with two on each, shared memory within a host and TCP
# between. Standalone mode: process 0 hosts the coordination service on its namespace's address.
#
#   tests/integration/collectives_multihost_test.sh BUILD_DIR
#
# Exit 77 (skipped, with the reason) where network namespaces cannot be made (no root/CAP_NET_ADMIN).
set -euo pipefail
build="$1"
trainer="$build/bin/test-trainer"
skip() { echo "SKIP: $*"; exit 77; }
command -v ip >/dev/null || skip "ip (Debian's iproute2) is not installed"
[ -x "$trainer" ] || { echo "FAIL: $trainer is missing"; exit 1; }

id=$$
ns0="cohort-a-$id"
ns1="cohort-b-$id"
veth0="cha$((id % 100000))"
veth1="chb$((id % 100000))"
work=$(mktemp -d)
cleanup() {
  for pid in $(jobs -p); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$ns0" 2>/dev/null || true
  ip netns del "$ns1" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns0" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
ip netns add "$ns1"
ip link add "$veth0" type veth peer name "$veth1"
ip link set "$veth0" netns "$ns0"
ip link set "$veth1" netns "$ns1"
ip -n "$ns0" addr add 10.201.0.1/24 dev "$veth0"
ip -n "$ns1" addr add 10.201.0.2/24 dev "$veth1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$veth0" up
ip -n "$ns1" link set "$veth1" up

# Nothing else lives in these namespaces, so any port is free.
run_job() {  # name port namespace-of-each-rank... ; expects every rank's RESULT and COMMUNICATOR
  local name=$1 port=$2 expect=$3
  shift 3
  local n=$# rank=0 pids=() failed=0
  for ns in "$@"; do
    ip netns exec "$ns" env -u COHORT_AGENT_SOCKET COHORT_MODE=standalone \
      COHORT_COORDINATOR_ADDRESS="10.201.0.1:$port" COHORT_NUM_PROCESSES="$n" \
      COHORT_PROCESS_ID="$rank" COHORT_INITIALIZATION_TIMEOUT=60s COHORT_COLLECTIVE_TIMEOUT=60s \
      "$trainer" collectives >"$work/$name-rank-$rank.log" 2>&1 &
    pids+=($!)
    rank=$((rank + 1))
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  for r in $(seq 0 $((n - 1))); do
    log="$work/$name-rank-$r.log"
    if ! grep -q "RESULT rank=$r .*failures=0" "$log" || ! grep -q "COMMUNICATOR world: $n ranks, $expect" "$log"; then
      failed=1
    fi
  done
  if [ "$failed" != 0 ]; then
    for r in $(seq 0 $((n - 1))); do echo "--- $name rank $r"; cat "$work/$name-rank-$r.log"; done
    echo "FAIL: $name: expected every op to pass over '$expect'"
    exit 1
  fi
  echo "OK: $name: $n ranks over $expect"
}
# Unequal hosts (1 + 2 ranks): TCP between every pair.
run_job uneven 29400 "host backend over TCP" "$ns0" "$ns1" "$ns1"
# Two ranks on each host: shared memory within a host, TCP between (a hierarchical all-reduce).
run_job even 29401 "host backend over shared memory within each of 2 hosts (2 ranks each) and TCP between them" \
  "$ns0" "$ns0" "$ns1" "$ns1"

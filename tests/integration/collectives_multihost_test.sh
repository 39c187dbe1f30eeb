#!/usr/bin/env bash
# libdist collectives across hosts: two network namespaces joined by a veth pair stand in for two
# hosts (rank 0 on one, ranks 1 and 2 on the other). The ranks must find out that they do not
# share memory and run every op over TCP between the "hosts". Standalone mode: process 0 hosts
# the coordination service on its namespace's address.
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
coordinator=10.201.0.1:29400
run_rank() {  # rank namespace
  ip netns exec "$2" env -u COHORT_AGENT_SOCKET COHORT_MODE=standalone \
    COHORT_COORDINATOR_ADDRESS="$coordinator" COHORT_NUM_PROCESSES=3 COHORT_PROCESS_ID="$1" \
    COHORT_INITIALIZATION_TIMEOUT=60s COHORT_COLLECTIVE_TIMEOUT=60s \
    "$trainer" collectives >"$work/rank-$1.log" 2>&1
}
run_rank 0 "$ns0" & p0=$!
run_rank 1 "$ns1" & p1=$!
run_rank 2 "$ns1" & p2=$!
failed=0
for r in 0 1 2; do
  pid_var="p$r"
  if ! wait "${!pid_var}"; then failed=1; fi
done
for r in 0 1 2; do
  log="$work/rank-$r.log"
  if ! grep -q "RESULT rank=$r .*failures=0" "$log" ||
     ! grep -q "COMMUNICATOR world: 3 ranks, host backend over TCP" "$log"; then
    failed=1
  fi
  if [ "$failed" != 0 ]; then echo "--- rank $r"; cat "$log"; fi
done
[ "$failed" = 0 ] || { echo "FAIL: the ranks on two network namespaces did not complete every op over TCP"; exit 1; }
echo "OK: 3 ranks on two network namespaces ran every collective over TCP between them"

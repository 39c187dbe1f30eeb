#!/usr/bin/env bash
# The CPU all-reduce peers of collective-bench, run on this machine in one go:
#
#   bench/baselines/run-collective-peers.sh [RANKS...]      (default: 2 4)
#
# For each P: OpenMPI (Debian's, shared memory via the vader BTL), Intel MPI (PyPI impi-rt, shm
# fabric) and torch.distributed gloo (TCP loopback). JSON lines (format: mpi_allreduce.cc) go to
# stdout, progress and errors to stderr. What is missing is installed first, into
# $COHORT_BENCH_WORK (default build/bench-peers): Debian's openmpi-bin, libopenmpi-dev and
# libfabric1 (Intel MPI's runtime loads libfabric even for shm), and a venv with pinned torch,
# numpy (only so torch stops warning) and impi-rt/impi-devel. A peer that cannot be installed or
# run is named on stderr and skipped; the exit status is 0 when at least one peer ran.
#
# Environment: COHORT_BENCH_WORK (work dir), COHORT_BENCH_FLAGS (passed to every peer, e.g.
# "--max-bytes 1048576 --iters-scale 2"), COHORT_BENCH_TIMEOUT (seconds per peer run, 900).
set -euo pipefail

# torch: the PyPI wheel, which pulls several GB of CUDA wheels (the CPU-only index is not
# reachable here, and without them `import torch` fails on libcufile.so.0).
readonly TORCH_VERSION=2.15.0
readonly NUMPY_VERSION=2.4.6
readonly IMPI_VERSION=2021.19.0    # impi-rt and impi-devel

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${COHORT_BENCH_WORK:-$repo/build/bench-peers}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
venv="$work/venv"
timeout_s="${COHORT_BENCH_TIMEOUT:-900}"
read -r -a flags <<<"${COHORT_BENCH_FLAGS:-}"
if [[ $# -eq 0 ]]; then set -- 2 4; fi
for p in "$@"; do
  if [[ ! "$p" =~ ^[1-9][0-9]*$ ]]; then
    echo "run-collective-peers: RANKS must be positive integers, got '$p'" >&2
    exit 2
  fi
done

log() { echo "run-collective-peers: $*" >&2; }

as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# attempt CMD...: runs CMD in a subshell with errexit in force and leaves its status in
# attempt_rc instead of ending the script. Call it as a plain statement: inside `if` or `&&`,
# bash ignores errexit in the whole call, even where the subshell sets it again.
attempt_rc=0
attempt() {
  set +e
  (set -e; "$@")
  attempt_rc=$?
  set -e
}

# attempt_all CMD1 CMD2 ...: attempts each one-word command in order until one fails.
attempt_all() {
  local cmd
  for cmd in "$@"; do
    attempt "$cmd"
    [[ $attempt_rc -eq 0 ]] || return 0
  done
}

# Copies JSON lines to stdout and anything else the peer printed there to stderr.
split_json() {
  local line
  while IFS= read -r line; do
    if [[ "$line" == "{"* ]]; then echo "$line"; else echo "$line" >&2; fi
  done
}

# --- installs ------------------------------------------------------------------------------------

install_debs() {  # install_debs PKG...: apt-get installs those not installed yet
  local missing=() pkg
  for pkg in "$@"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
      missing+=("$pkg")
    fi
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]} (apt-get)"
    as_root apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

install_openmpi() {
  install_debs openmpi-bin libopenmpi-dev libfabric1
}

ensure_venv() {
  if [[ ! -x "$venv/bin/python" ]]; then
    log "creating venv $venv"
    python3 -m venv "$venv"
  fi
}

venv_has() {  # venv_has NAME VERSION
  [[ "$("$venv/bin/python" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p')" == "$2" ]]
}

install_torch() {
  ensure_venv
  if ! venv_has torch "$TORCH_VERSION" || ! venv_has numpy "$NUMPY_VERSION"; then
    log "installing torch==$TORCH_VERSION numpy==$NUMPY_VERSION into $venv (pip, several GB)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      "torch==$TORCH_VERSION" "numpy==$NUMPY_VERSION" >&2
  fi
  "$venv/bin/python" -c \
    'import torch.distributed as d; assert d.is_gloo_available(), "torch built without gloo"'
}

install_impi() {
  # impi-rt's libmpi loads libfabric (even for I_MPI_FABRICS=shm) but does not ship it.
  install_debs libfabric1
  ensure_venv
  if ! venv_has impi-rt "$IMPI_VERSION" || ! venv_has impi-devel "$IMPI_VERSION"; then
    log "installing impi-rt==$IMPI_VERSION impi-devel==$IMPI_VERSION into $venv (pip --no-deps)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      "impi-rt==$IMPI_VERSION" "impi-devel==$IMPI_VERSION" >&2
  fi
  # The wheels' data files land in the venv prefix: bin/ (mpigxx, mpiexec), include/, lib/.
  for f in bin/mpigxx bin/mpiexec include/mpi.h lib/libmpi.so.12; do
    [[ -e "$venv/$f" ]] || { log "Intel MPI: $venv/$f missing after install"; return 1; }
  done
}

# Intel MPI's wrappers and launcher find their installation through I_MPI_ROOT; libmpi is not on
# the loader path, so the binary gets it from LD_LIBRARY_PATH.
impi_env() {
  env I_MPI_ROOT="$venv" PATH="$venv/bin:$PATH" \
    LD_LIBRARY_PATH="$venv/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}

# --- builds --------------------------------------------------------------------------------------

build_openmpi() {
  local out="$work/mpi_allreduce"
  if [[ ! -x "$out" || "$here/mpi_allreduce.cc" -nt "$out" ]]; then
    log "building $out (OpenMPI mpicxx)"
    # The .openmpi names: plain mpicxx/mpirun may be MPICH's (alternatives) or Intel's (PATH).
    mpicxx.openmpi -O2 -std=c++17 -o "$out" "$here/mpi_allreduce.cc"
  fi
}

build_impi() {
  local out="$work/mpi_allreduce_impi"
  if [[ ! -x "$out" || "$here/mpi_allreduce.cc" -nt "$out" ]]; then
    log "building $out (Intel MPI mpigxx)"
    impi_env "$venv/bin/mpigxx" -O2 -std=c++17 -o "$out" "$here/mpi_allreduce.cc"
  fi
}

# --- runs ----------------------------------------------------------------------------------------

run_openmpi() {  # run_openmpi P
  cd "$work"
  timeout "$timeout_s" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$1" \
    --mca btl self,vader ./mpi_allreduce --impl openmpi "${flags[@]}" | split_json
}

run_intelmpi() {  # run_intelmpi P
  cd "$work"
  impi_env I_MPI_FABRICS=shm timeout "$timeout_s" "$venv/bin/mpiexec" -n "$1" \
    ./mpi_allreduce_impi --impl intelmpi "${flags[@]}" | split_json
}

run_gloo() {  # run_gloo P
  cd "$work"
  timeout "$timeout_s" "$venv/bin/python" "$here/gloo_allreduce.py" --ranks "$1" "${flags[@]}" \
    | split_json
}

# --- main ----------------------------------------------------------------------------------------

declare -A ready=()
attempt_all install_openmpi build_openmpi
if [[ $attempt_rc -eq 0 ]]; then
  ready[openmpi]=1
else
  log "SKIP openmpi: installing openmpi-bin/libopenmpi-dev or building mpi_allreduce failed" \
    "(see above)"
fi
attempt_all install_impi build_impi
if [[ $attempt_rc -eq 0 ]]; then
  ready[intelmpi]=1
else
  log "SKIP intelmpi: installing libfabric1 and impi-rt/impi-devel==$IMPI_VERSION, or building" \
    "with its mpigxx, failed (see above)"
fi
attempt install_torch
if [[ $attempt_rc -eq 0 ]]; then
  ready[gloo]=1
else
  log "SKIP gloo: installing torch==$TORCH_VERSION into $venv failed, or it lacks gloo (see above)"
fi

ran=0
for p in "$@"; do
  for peer in openmpi intelmpi gloo; do
    [[ -n "${ready[$peer]:-}" ]] || continue
    log "$peer, P=$p"
    attempt "run_$peer" "$p"
    if [[ $attempt_rc -eq 0 ]]; then
      ran=$((ran + 1))
    else
      log "FAILED $peer at P=$p (exit $attempt_rc; 124 = timed out after ${timeout_s}s);" \
        "going on with the others"
    fi
  done
done

if [[ $ran -eq 0 ]]; then
  log "no peer ran"
  exit 1
fi
log "done: $ran peer runs"

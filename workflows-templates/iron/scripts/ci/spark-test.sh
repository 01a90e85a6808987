#!/usr/bin/env bash
# Spark test entry point for Iron. Copy to scripts/ci/spark-test.sh in the Iron repository.
#
# Called by the spark-test action as `scripts/ci/spark-test.sh <single|pair>` with
# SPARK_TEST_SUITE=smoke|performance, inside the work and model-cache dirs the Spark controller
# provides. The action runs smoke (correctness) first and performance only after smoke passed, so
# each suite below does exactly one thing. Never stop services or processes you did not start.
#
# Lanes (Spark seed):
#   spark-test       (SPARK_TEST_SUITE=smoke, 30-minute target) filtered CUDA correctness for
#                    binary add/multiply, GEMV and RMSNorm against CPU oracles
#   spark-test-long  (smoke, then SPARK_TEST_SUITE=performance, 60-minute target for both)
#                    only the GEMV and RMSNorm benches, 2 warmups and 5 measured runs each
#
# The lane deadline (SPARK_LANE_DEADLINE, epoch seconds) comes from the spark-test action, which
# also stops the run when it passes; this script starts no step after it and bounds every wait
# by it. Run by hand, the deadline is the lane target from now.
set -euo pipefail

topology="${1:-}"
suite="${SPARK_TEST_SUITE:-}"
: "${SPARK_WORK_DIR:?SPARK_WORK_DIR is not set: run this through the spark-test action on a Spark runner}"
: "${SPARK_MODEL_CACHE:?SPARK_MODEL_CACHE is not set: run this through the spark-test action on a Spark runner}"

# libtest name filters of the cuda_correctness test target (each test compares with a CPU oracle)
CORRECTNESS_FILTERS=(binary_add binary_multiply gemv rmsnorm)
BENCH_KERNELS=(gemv rmsnorm)
WARMUP_RUNS=2
MEASURED_RUNS=5

# The cargo target dir may be shared between runs on the host (warm builds); every write to it
# (build, test build, bench build) holds this lock so two builds never interleave in one target dir.
export CARGO_TARGET_DIR="${IRON_CARGO_TARGET_DIR:-${CARGO_TARGET_DIR:-${SPARK_WORK_DIR}/cargo-target}}"
mkdir -p "${CARGO_TARGET_DIR}"
BUILD_LOCK="${CARGO_TARGET_DIR}/.spark-build.lock"

fail() {
  echo "spark-test: $*" >&2
  exit 2
}

case "${topology}" in
  single) ;;
  pair)
    if [ -z "${SPARK_DISTRIBUTED_ASSERTION:-}" ] || [ ! -f "${SPARK_DISTRIBUTED_ASSERTION}" ]; then
      fail "topology pair needs a real distributed assertion (SPARK_DISTRIBUTED_ASSERTION names a script that proves both hosts computed together); Iron declares none, so a pair run fails instead of passing vacuously"
    fi
    ;;
  *) fail "usage: scripts/ci/spark-test.sh <single|pair> (got '${topology}')" ;;
esac

case "${suite}" in
  smoke) lane=spark-test target_minutes=30 ;;
  performance) lane=spark-test-long target_minutes=60 ;;
  *) fail "SPARK_TEST_SUITE must be smoke or performance (got '${suite}')" ;;
esac
deadline="${SPARK_LANE_DEADLINE:-$(($(date +%s) + target_minutes * 60))}"
[[ "${deadline}" =~ ^[0-9]+$ ]] || fail "SPARK_LANE_DEADLINE must be epoch seconds (got '${deadline}')"

# seconds left in the lane; a step that cannot start in time ends the run with the lane's name
left() {
  local s=$((deadline - $(date +%s)))
  if [ "${s}" -le 0 ]; then
    echo "spark-test: lane ${lane} exceeded its ${target_minutes}-minute time target before: $1" >&2
    exit 124
  fi
  echo "${s}"
}

with_build_lock() {
  local wait
  wait="$(left "waiting for the build lock ${BUILD_LOCK}")"
  # 75 (EX_TEMPFAIL) = the lock stayed taken until the lane deadline
  flock --exclusive --timeout "${wait}" --conflict-exit-code 75 "${BUILD_LOCK}" "$@" || {
    local rc=$?
    if [ "${rc}" -eq 75 ]; then
      echo "spark-test: lane ${lane} exceeded its ${target_minutes}-minute time target waiting for the build lock ${BUILD_LOCK} (another build holds it)" >&2
      exit 124
    fi
    return "${rc}"
  }
}

revisions() {
  echo "== toolchain and source revisions"
  echo "source: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "cargo: $(cargo --version 2>&1 || echo 'not found')"
  echo "rustc: $(rustc --version 2>&1 || echo 'not found')"
  echo "nvcc: $(nvcc --version 2>&1 | grep -i release || echo 'not found')"
  echo "lane: ${lane} (${target_minutes}-minute target), topology ${topology}"
}

smoke() {
  echo "== Iron CUDA correctness against CPU oracles: ${CORRECTNESS_FILTERS[*]} (${topology})"
  left "cuda_correctness" >/dev/null
  with_build_lock cargo test --release --locked --test cuda_correctness -- "${CORRECTNESS_FILTERS[@]}"
}

performance() {
  local kernel
  for kernel in "${BENCH_KERNELS[@]}"; do
    echo "== Iron ${kernel} benchmark: ${WARMUP_RUNS} warmups, ${MEASURED_RUNS} measured runs"
    left "the ${kernel} benchmark" >/dev/null
    with_build_lock cargo bench --locked --bench "${kernel}" -- \
      --warmup "${WARMUP_RUNS}" --runs "${MEASURED_RUNS}" \
      --output "${SPARK_WORK_DIR}/iron-${kernel}-bench.json"
  done
}

revisions
case "${suite}" in
  smoke) smoke ;;
  performance) performance ;;
esac

if [ "${topology}" = pair ]; then
  echo "== distributed assertion"
  left "the distributed assertion" >/dev/null
  bash "${SPARK_DISTRIBUTED_ASSERTION}"
fi

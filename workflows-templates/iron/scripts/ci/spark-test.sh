#!/usr/bin/env bash
# Spark test entry point for Iron. Copy to scripts/ci/spark-test.sh in the Iron repository.
#
# Called by the spark-test action as `scripts/ci/spark-test.sh <single|pair>` with
# SPARK_TEST_SUITE=smoke|performance, inside the work and model-cache dirs the Spark controller
# provides. The action runs smoke (correctness) first and performance only after smoke passed, so
# each suite below does exactly one thing. Never stop services or processes you did not start.
#
# Suites (Spark seed):
#   smoke        CUDA correctness: add/multiply, GEMV, RMSNorm
#   performance  GEMV and RMSNorm benchmarks, 2 warmups and 5 measured runs each
set -euo pipefail

topology="${1:-}"
suite="${SPARK_TEST_SUITE:-}"
: "${SPARK_WORK_DIR:?SPARK_WORK_DIR is not set: run this through the spark-test action on a Spark runner}"
: "${SPARK_MODEL_CACHE:?SPARK_MODEL_CACHE is not set: run this through the spark-test action on a Spark runner}"

CORRECTNESS_KERNELS=(add multiply gemv rmsnorm)
BENCH_KERNELS=(gemv rmsnorm)
WARMUP_RUNS=2
MEASURED_RUNS=5

# The cargo target dir is shared between runs on the host (warm builds); writes to it are
# serialized with a lock so two builds never interleave in one target dir.
export CARGO_TARGET_DIR="${IRON_CARGO_TARGET_DIR:-${SPARK_WORK_DIR}/cargo-target}"
mkdir -p "${CARGO_TARGET_DIR}"
with_target_lock() {
  flock --exclusive --timeout 1800 "${CARGO_TARGET_DIR}/.spark-build.lock" "$@"
}

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

smoke() {
  echo "== Iron CUDA correctness: ${CORRECTNESS_KERNELS[*]} (${topology})"
  with_target_lock cargo test --release --locked --test cuda_correctness -- "${CORRECTNESS_KERNELS[@]}"
}

performance() {
  local kernel
  for kernel in "${BENCH_KERNELS[@]}"; do
    echo "== Iron ${kernel} benchmark: ${WARMUP_RUNS} warmups, ${MEASURED_RUNS} measured runs"
    with_target_lock cargo bench --locked --bench "${kernel}" -- \
      --warmup "${WARMUP_RUNS}" --runs "${MEASURED_RUNS}" \
      --output "${SPARK_WORK_DIR}/iron-${kernel}-bench.json"
  done
}

case "${suite}" in
  smoke) smoke ;;
  performance) performance ;;
  *) fail "SPARK_TEST_SUITE must be smoke or performance (got '${suite}')" ;;
esac

if [ "${topology}" = pair ]; then
  echo "== distributed assertion"
  bash "${SPARK_DISTRIBUTED_ASSERTION}"
fi

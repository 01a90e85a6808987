#!/usr/bin/env bash
# Spark test entry point for Butter. Copy to scripts/ci/spark-test.sh in the Butter repository.
#
# Called by the spark-test action as `scripts/ci/spark-test.sh <single|pair>` with
# SPARK_TEST_SUITE=smoke|performance, inside the work and model-cache dirs the Spark controller
# provides. The action runs smoke (correctness) first and performance only after smoke passed, so
# each suite below does exactly one thing. Never stop services or processes you did not start.
#
# Lanes (Spark seed):
#   spark-test       (SPARK_TEST_SUITE=smoke, 30-minute target) release-mode wh-butter-cuda
#                    cuda_smoke: allocation/upload, generated CUDA dispatch, elementwise ops,
#                    RMSNorm and GEMV against CPU references
#   spark-test-long  (smoke, then SPARK_TEST_SUITE=performance, 60-minute target for both)
#                    Qwen3.8 27B NVFP4 serving: 512-token prompt, 32 decode tokens, 1 warmup,
#                    2 measured runs, from the managed model cache (never downloaded)
#
# The lane deadline (SPARK_LANE_DEADLINE, epoch seconds) comes from the spark-test action, which
# also stops the run when it passes; this script starts no step after it and bounds every wait
# by it. Run by hand, the deadline is the lane target from now.
set -euo pipefail

topology="${1:-}"
suite="${SPARK_TEST_SUITE:-}"
: "${SPARK_WORK_DIR:?SPARK_WORK_DIR is not set: run this through the spark-test action on a Spark runner}"
: "${SPARK_MODEL_CACHE:?SPARK_MODEL_CACHE is not set: run this through the spark-test action on a Spark runner}"

QWEN_MODEL="${BUTTER_QWEN_MODEL:-nvidia/Qwen3.8-27B-NVFP4}"
# a pinned revision (commit sha) of the model; empty = the snapshot refs/main points at in the cache
QWEN_REVISION="${BUTTER_QWEN_REVISION:-}"
PROMPT_TOKENS=512
DECODE_TOKENS=32
WARMUP_RUNS=1
MEASURED_RUNS=2

# Reuse the managed model cache: a run never downloads weights.
export HF_HOME="${SPARK_MODEL_CACHE}/huggingface"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1

# The cargo target dir may be shared between runs on the host (warm builds); every write to it
# (build, test build) holds this lock so two builds never interleave in one target dir.
export CARGO_TARGET_DIR="${BUTTER_CARGO_TARGET_DIR:-${CARGO_TARGET_DIR:-${SPARK_WORK_DIR}/cargo-target}}"
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
      fail "topology pair needs a real distributed assertion (SPARK_DISTRIBUTED_ASSERTION names a script that proves both hosts computed together); Butter declares none, so a pair run fails instead of passing vacuously"
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
  echo "== Butter CUDA smoke, release mode: wh-butter-cuda cuda_smoke (${topology})"
  left "cuda_smoke" >/dev/null
  with_build_lock cargo test --release --locked -p wh-butter-cuda --test cuda_smoke
}

# The snapshot dir of the model in the managed HF cache, or a clear failure: never a download.
model_snapshot() {
  local repo_dir rev
  repo_dir="${HF_HOME}/hub/models--${QWEN_MODEL//\//--}"
  rev="${QWEN_REVISION}"
  if [ -z "${rev}" ] && [ -f "${repo_dir}/refs/main" ]; then rev="$(<"${repo_dir}/refs/main")"; fi
  if [ -z "${rev}" ] || [ ! -f "${repo_dir}/snapshots/${rev}/config.json" ]; then
    fail "Qwen3.8 27B NVFP4 (${QWEN_MODEL}${QWEN_REVISION:+ at ${QWEN_REVISION}}) is not in the managed model cache ${HF_HOME}; a Spark run never downloads weights: pre-warm it on the host (spark-runner-preflight doctor --spec <the host's provisioning spec> --prewarm)"
  fi
  echo "${repo_dir}/snapshots/${rev}"
}

server_pid=""
stop_own_server() {
  # only the server this script started
  if [ -n "${server_pid}" ] && kill -0 "${server_pid}" 2>/dev/null; then
    kill -TERM "${server_pid}" 2>/dev/null || true
    wait "${server_pid}" 2>/dev/null || true
  fi
}

performance() {
  local snapshot bin ready port wait
  snapshot="$(model_snapshot)"
  echo "== Butter Qwen3.8 27B NVFP4 serving: ${PROMPT_TOKENS}-token prompt, ${DECODE_TOKENS} decode tokens, ${WARMUP_RUNS} warmup, ${MEASURED_RUNS} measured runs"
  echo "model: ${QWEN_MODEL} snapshot $(basename "${snapshot}")"
  left "building the server" >/dev/null
  with_build_lock cargo build --release --locked -p wh-butter-serve --bin butter-serve --bin butter-bench
  # run copies, so a later build in the shared target dir cannot change what this run executes
  bin="${SPARK_WORK_DIR}/butter-bin"
  mkdir -p "${bin}"
  with_build_lock cp "${CARGO_TARGET_DIR}/release/butter-serve" "${CARGO_TARGET_DIR}/release/butter-bench" "${bin}/"
  ready="${SPARK_WORK_DIR}/butter-serve.ready"
  port="${BUTTER_SERVE_PORT:-18731}"
  rm -f "${ready}"
  trap stop_own_server EXIT
  "${bin}/butter-serve" --model "${snapshot}" --host 127.0.0.1 --port "${port}" --ready-file "${ready}" &
  server_pid=$!
  until [ -f "${ready}" ]; do
    kill -0 "${server_pid}" 2>/dev/null || fail "butter-serve exited before it was ready (see the log above)"
    left "butter-serve became ready" >/dev/null
    sleep 1
  done
  wait="$(left "the serving benchmark")"
  echo "butter-serve ready on 127.0.0.1:${port} (${wait} s left in the lane)"
  "${bin}/butter-bench" \
    --url "http://127.0.0.1:${port}" \
    --prompt-tokens "${PROMPT_TOKENS}" \
    --decode-tokens "${DECODE_TOKENS}" \
    --warmup "${WARMUP_RUNS}" \
    --runs "${MEASURED_RUNS}" \
    --output "${SPARK_WORK_DIR}/butter-serving-bench.json"
  stop_own_server
  trap - EXIT
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

#!/usr/bin/env bash
# Spark test entry point for Butter. Copy to scripts/ci/spark-test.sh in the Butter repository.
#
# Called by the spark-test action as `scripts/ci/spark-test.sh <single|pair>` with
# SPARK_TEST_SUITE=smoke|performance, inside the work and model-cache dirs the Spark controller
# provides. The action runs smoke (correctness) first and performance only after smoke passed, so
# each suite below does exactly one thing. Never stop services or processes you did not start.
#
# Suites (Spark seed):
#   smoke        CUDA smoke tests
#   performance  Qwen serving: 512-token prompt, 32 decode tokens, 1 warmup, 2 measured runs
set -euo pipefail

topology="${1:-}"
suite="${SPARK_TEST_SUITE:-}"
: "${SPARK_WORK_DIR:?SPARK_WORK_DIR is not set: run this through the spark-test action on a Spark runner}"
: "${SPARK_MODEL_CACHE:?SPARK_MODEL_CACHE is not set: run this through the spark-test action on a Spark runner}"

PYTHON="${PYTHON:-python}"
QWEN_MODEL="${BUTTER_QWEN_MODEL:-Qwen/Qwen2.5-7B-Instruct}"
PROMPT_TOKENS=512
DECODE_TOKENS=32
WARMUP_RUNS=1
MEASURED_RUNS=2

# Reuse the managed model cache: a run never downloads weights.
export HF_HOME="${SPARK_MODEL_CACHE}/huggingface"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1

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

smoke() {
  echo "== Butter CUDA smoke (${topology})"
  "${PYTHON}" -m pytest -q -m cuda_smoke tests
}

performance() {
  echo "== Butter Qwen serving: ${PROMPT_TOKENS}-token prompt, ${DECODE_TOKENS} decode tokens, ${WARMUP_RUNS} warmup, ${MEASURED_RUNS} measured runs"
  "${PYTHON}" -m butter.bench.serving \
    --model "${QWEN_MODEL}" \
    --prompt-tokens "${PROMPT_TOKENS}" \
    --decode-tokens "${DECODE_TOKENS}" \
    --warmup "${WARMUP_RUNS}" \
    --runs "${MEASURED_RUNS}" \
    --output "${SPARK_WORK_DIR}/butter-serving-bench.json"
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

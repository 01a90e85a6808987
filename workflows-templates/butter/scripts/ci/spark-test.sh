#!/usr/bin/env bash
# Spark test entry point for Butter. Copy to scripts/ci/spark-test.sh in the Butter repository (the
# Spark controller's scripts/ci/install-spark-templates.sh does).
#
# Run as `scripts/ci/spark-test.sh <single|pair>` with SPARK_TEST_SUITE=smoke|performance in the
# environment the Spark agent gives the runner (SPARK_WORK_DIR, SPARK_MODEL_CACHE, optionally
# SPARK_BUILD_CACHE_DIR and SPARK_RESULTS_DIR; docs/in-job.md in the Spark controller), from the
# root of a git checkout. With SPARK_BUILD_CACHE_DIR it sets the times of the checkout's files so
# that a later lease reuses what did not change ("Source times" below). It never stops services
# or processes it did not start, and it starts none of its own.
#
# The lanes (the Spark spec's table):
#   spark-test       SPARK_TEST_SUITE=smoke, 30-minute target: release-mode wh-butter-cuda
#                    cuda_smoke (allocation/upload, generated CUDA dispatch, elementwise ops,
#                    RMSNorm and GEMV against CPU references)
#   spark-test-long  SPARK_TEST_SUITE=performance, 60-minute target: the same CUDA smoke first
#                    (this script runs it; the performance lane always does), then the one model
#                    integration filter: Qwen3.8 27B NVFP4 serving at a 512-token prompt, 32 decode
#                    tokens, one warmup and two measured runs, with the model read from the
#                    managed cache (SPARK_MODEL_CACHE) and never downloaded
# A target is a target: a lane over it passes or fails on its results, and the receipt and the
# check say it went over; the job's hard limit is the workflow's timeout-minutes (120).
#
# The model integration test: run as `cargo test --release <BUTTER_MODEL_CARGO_ARGS> --
# --include-ignored <BUTTER_MODEL_TEST_FILTER>` (a model test is usually #[ignore]d for ordinary
# `cargo test`; the filter picks it, and it must match at least one test that passes). It reads
# BUTTER_MODEL_DIR (the model snapshot in the managed cache), BUTTER_PROMPT_TOKENS,
# BUTTER_DECODE_TOKENS, BUTTER_WARMUP_RUNS, BUTTER_MEASURED_RUNS, and writes its measurement as
# JSON to BUTTER_RESULT_JSON; HF_HOME points into the managed cache and HF_HUB_OFFLINE=1,
# TRANSFORMERS_OFFLINE=1 and HF_DATASETS_OFFLINE=1 keep any Hugging Face client offline.
#
# Results: the serving JSON (butter-model-bench.json), cargo's build messages and spark-lane.json
# (steps, build, lock-wait and CPU times, compiled/fresh counts, source times, target and elapsed
# time) go to SPARK_RESULTS_DIR (default: SPARK_WORK_DIR/spark-results); the Spark workflow uploads
# it.
set -euo pipefail

PROJECT=Butter
# Names the spec does not give, as variables defaulting to its wording (override in the
# environment or edit here):
#   BUTTER_MODEL_TEST_FILTER  the one model integration filter: "Qwen3.8 27B NVFP4" as a libtest
#                             name filter
#   BUTTER_MODEL_CARGO_ARGS   where cargo looks for it (the spec names no crate): the workspace
#   BUTTER_MODEL              the model's id in the managed Hugging Face cache
#   BUTTER_MODEL_REVISION     a pinned revision (commit sha); empty = the cache's refs/main
BUTTER_MODEL_TEST_FILTER="${BUTTER_MODEL_TEST_FILTER:-qwen3_8_27b_nvfp4}"
BUTTER_MODEL_CARGO_ARGS="${BUTTER_MODEL_CARGO_ARGS:---workspace}"
BUTTER_MODEL="${BUTTER_MODEL:-nvidia/Qwen3.8-27B-NVFP4}"
BUTTER_MODEL_REVISION="${BUTTER_MODEL_REVISION:-}"
# The spec's names and numbers
SMOKE_PACKAGE=wh-butter-cuda
SMOKE_TEST=cuda_smoke
PROMPT_TOKENS=512
DECODE_TOKENS=32
WARMUP_RUNS=1
MEASURED_RUNS=2

# Runs before anything is written (see the prelude below): the performance lane needs the model
# in the managed cache, so a missing model fails at once, before any build, and is never fetched.
project_check() {
  read -r -a model_cargo_args <<<"${BUTTER_MODEL_CARGO_ARGS}"
  [[ "${BUTTER_MODEL_TEST_FILTER}" =~ ^[A-Za-z0-9_:]+$ ]] ||
    fail "BUTTER_MODEL_TEST_FILTER must be one libtest name filter (letters, digits, _ and ::), got '${BUTTER_MODEL_TEST_FILTER}'"
  [ "${suite}" = performance ] || return 0
  local repo_dir rev
  repo_dir="${SPARK_MODEL_CACHE}/huggingface/hub/models--${BUTTER_MODEL//\//--}"
  rev="${BUTTER_MODEL_REVISION}"
  if [ -z "${rev}" ] && [ -f "${repo_dir}/refs/main" ]; then rev="$(<"${repo_dir}/refs/main")"; fi
  if [ -z "${rev}" ] || [ ! -f "${repo_dir}/snapshots/${rev}/config.json" ]; then
    fail "${BUTTER_MODEL}${BUTTER_MODEL_REVISION:+ at ${BUTTER_MODEL_REVISION}} is not in the managed model cache ${SPARK_MODEL_CACHE}/huggingface; a Spark run never downloads weights: pre-warm it on the host (spark-runner-preflight doctor --spec <the host's provisioning spec> --prewarm)"
  fi
  model_dir="${repo_dir}/snapshots/${rev}"
}

# ---- begin common lane prelude (identical in the Butter and Iron templates; a test compares) ----
# From here to the end marker: the input checks, the dirs, the build lock, step timing and the
# lane record. The project part below it only says which cargo commands make the lane.

fail() {
  echo "spark-test: $*" >&2
  exit 2
}

# Bad input stops here, before anything is written anywhere: one line on stderr, exit 2.
[ $# -eq 1 ] || fail "usage: scripts/ci/spark-test.sh <single|pair> (got $# arguments)"
topology="$1"
case "${topology}" in
  single) ;;
  pair) fail "topology pair refused: ${PROJECT} has no distributed test yet, and a pair run must exercise both hosts together, never run independent commands on two of them; request single-host runs" ;;
  *) fail "usage: scripts/ci/spark-test.sh <single|pair> (got '${topology}')" ;;
esac
suite="${SPARK_TEST_SUITE:-}"
case "${suite}" in
  smoke) lane=spark-test default_target=30 ;;
  performance) lane=spark-test-long default_target=60 ;;
  '') fail "SPARK_TEST_SUITE is not set (smoke or performance): run this through the Spark workflow on a runner the Spark agent started" ;;
  *) fail "SPARK_TEST_SUITE must be smoke or performance (got '${suite}')" ;;
esac

# need_dir NAME: the directory in $NAME is set, absolute and exists
need_dir() {
  local value="${!1:-}"
  [ -n "${value}" ] || fail "$1 is not set: run this through the Spark workflow on a runner the Spark agent started (the agent provides it)"
  [[ "${value}" == /* ]] || fail "$1 must be an absolute path (got '${value}')"
  [ -d "${value}" ] || fail "$1 ${value} is not a directory"
}
need_dir SPARK_WORK_DIR
need_dir SPARK_MODEL_CACHE
if [ -n "${SPARK_RESULTS_DIR:-}" ] && [[ "${SPARK_RESULTS_DIR}" != /* ]]; then
  fail "SPARK_RESULTS_DIR must be an absolute path (got '${SPARK_RESULTS_DIR}')"
fi
target_minutes="${SPARK_LANE_TARGET_MINUTES:-${default_target}}"
[[ "${target_minutes}" =~ ^[0-9]+([.][0-9]+)?$ ]] || fail "SPARK_LANE_TARGET_MINUTES must be a number of minutes (got '${target_minutes}')"

project_check # the project's own refusals (e.g. a model missing from the cache), still before any write

# The build cache: with SPARK_BUILD_CACHE_DIR (one per repository, kept across leases by the
# agent) the cargo target dir there stays warm from one lease to the next; without it the build
# is cold, in this lease's work dir, and removed after a successful run.
scratch="${SPARK_WORK_DIR}/spark-test-scratch"
if [ -n "${SPARK_BUILD_CACHE_DIR:-}" ]; then
  need_dir SPARK_BUILD_CACHE_DIR
  build_cache=shared
  build_lock="${SPARK_BUILD_CACHE_DIR}/spark-build.lock"
  # creating the lock file is the writability probe (`test -w` says yes to root on any mode)
  { : >>"${build_lock}"; } 2>/dev/null ||
    fail "SPARK_BUILD_CACHE_DIR ${SPARK_BUILD_CACHE_DIR} is not writable by this job: the shared build cache must be (the Spark agent provides it per repository)"
  export CARGO_TARGET_DIR="${SPARK_BUILD_CACHE_DIR}/cargo-target"
else
  build_cache=cold
  build_lock="${scratch}/spark-build.lock"
  export CARGO_TARGET_DIR="${scratch}/cargo-target"
fi
results="${SPARK_RESULTS_DIR:-${SPARK_WORK_DIR}/spark-results}"
mkdir -p "${scratch}" "${results}"

# The lane holds an exclusive flock(2) on the build lock from its first cargo step to its end, so
# two builds never write one target dir at once and no other build comes between the source times
# set below and the cargo steps that rely on them. The lock belongs to this shell's open file: the
# kernel drops it when that file is closed, so a job that crashes or is killed cannot leave it held
# (flock(2)). Commands run with the fd closed (`{lock_fd}>&-`): nothing they leave behind holds
# the lock after this script.
exec {lock_fd}>>"${build_lock}"
exec {out_fd}>&1 # the lane's stdout, for messages from inside a step whose output is redirected
now_ms() { date +%s%3N; }
lane_started_ms="$(now_ms)"
steps=()
lock_held=false

# Source times (docs/adr/0230-warm-builds-by-content.md). Cargo takes a workspace crate as up to
# date when none of its sources is newer than the dep-info file of its last build (cargo's
# src/cargo/core/compiler/fingerprint/mod.rs, "Mtime comparison"); it hashes no absolute path. A
# lease's checkout is new, so each of its files is newer than every build in the shared target
# dir, and the workspace's crates rebuilt in every lease. So the lane records in the cache, with
# the checkout's path, the time it gave each tracked file and directory and that path's content
# id (git's blob or tree id). Next time, a path whose content is the recorded one gets its
# recorded time back; every other path gets a new time, later than every build in the target
# dir. Content decides, never a commit time: a changed file never looks older than a build.
times_file="${SPARK_BUILD_CACHE_DIR:-${scratch}}/spark-source-times"
times_next="${scratch}/spark-source-times.next"
source_times='"status":"off"'

# fs_now: the time on the target dir's filesystem clock (which stamps cargo's dep-info files),
# strictly later than every build before this call: the lock file is stamped until its time moves
fs_now() {
  local t0 t deadline=$((SECONDS + 3))
  touch "${build_lock}" && t0="$(stat -c %.9Y "${build_lock}")" || return 1
  t="${t0}"
  while [ "${t}" = "${t0}" ]; do
    [ "${SECONDS}" -lt "${deadline}" ] || return 1
    touch "${build_lock}" && t="$(stat -c %.9Y "${build_lock}")" || return 1
  done
  echo "${t}"
}

# stamp TIME PATH...: sets each path's modification time (a symlink's own) and checks that the
# filesystem kept it to the nanosecond
stamp() {
  local t="$1"
  shift
  [ $# -gt 0 ] || return 0
  printf '%s\0' "$@" | xargs -0 touch -m -h -d "@${t}" -- && [ "$(stat -c %.9Y -- "$1")" = "${t}" ]
}

# all_new DIR: the record is dropped and every file and directory under DIR (but .git) gets the
# time of now, in a later second than every build in the target dir (so also where a filesystem
# keeps whole seconds): the workspace builds anew, and nothing is taken as built that is not
all_new() {
  local t0
  rm -f "${times_file}" "${times_next}"
  touch "${build_lock}" && t0="$(stat -c %Y "${build_lock}")" || t0="$(date +%s)"
  while [ "$(date +%s)" -le "${t0}" ]; do sleep 0.1; done
  find "$1" -name .git -prune -o -print0 | xargs -0 -r touch -m -h --
  source_times="\"status\":\"off\""
}

# restore_source_times: under the lock, before the lane's first cargo command (see above). Any
# failure leaves each path at its recorded time (same content) or at a new one, never older.
restore_source_times() {
  local top now rec meta rest kind id p q t n=0 restored=0 new=0 started
  local -A old_id=() old_t=() cid=() group=()
  local -a paths=() untracked=()
  started="$(now_ms)"
  rm -f "${times_next}"
  if ! top="$(git rev-parse --show-toplevel 2>/dev/null)"; then
    echo "source times: not a git checkout: every file is new" >&"${out_fd}"
    all_new "${PWD}"
    return 0
  fi
  # the record holds if it is this checkout path's and nothing built in the target dir after it
  # was written (a lane that stopped before writing it, or a build outside the lanes)
  if [ ! -s "${times_file}" ]; then
    echo "source times: no record yet: every path is new" >&"${out_fd}"
  elif [ -n "$(find "${CARGO_TARGET_DIR}" \( -name deps -o -name build -o -name incremental \) -prune -o -path '*/.fingerprint/*' -newer "${times_file}" -print -quit 2>/dev/null)" ]; then
    echo "source times: the target dir changed after the record was written: every path is new" >&"${out_fd}"
  else
    {
      IFS= read -r -d '' rec || rec=
      if [ "${rec}" = "spark-source-times 1"$'\t'"${top}" ]; then
        while IFS= read -r -d '' rec; do
          id="${rec%%$'\t'*}" rest="${rec#*$'\t'}"
          old_id["${rest#*$'\t'}"]="${id}"
          old_t["${rest#*$'\t'}"]="${rest%%$'\t'*}"
        done
      else
        echo "source times: the record is of another checkout path: every path is new" >&"${out_fd}"
      fi
    } <"${times_file}"
  fi
  # content ids: git's index (refreshed), with the files that differ from it hashed; a path
  # deleted or not a plain file, and every directory above a changed path, has none ("-")
  git -C "${top}" update-index -q --refresh >/dev/null 2>&1 || true
  if ! {
    meta="$(git -C "${top}" write-tree)" &&
      git -C "${top}" ls-tree -r -t -z --full-tree "${meta}" >"${scratch}/st-tree" &&
      git -C "${top}" diff-files -z --name-only >"${scratch}/st-changed" &&
      git -C "${top}" ls-files -o --exclude-standard -z >"${scratch}/st-untracked"
  }; then
    echo "source times: git could not list the checkout: every file is new" >&"${out_fd}"
    all_new "${top}"
    return 0
  fi
  while IFS= read -r -d '' p; do
    cid["${p}"]=-
    if [ -f "${top}/${p}" ] && [ ! -L "${top}/${p}" ]; then
      cid["${p}"]="$(git -C "${top}" hash-object -- "${p}")" || cid["${p}"]=-
    fi
    q="${p}"
    while [[ "${q}" == */* ]]; do
      q="${q%/*}"
      cid["${q}"]=-
    done
  done <"${scratch}/st-changed"
  now="$(fs_now)" || now=
  if [ -z "${now}" ]; then
    echo "source times: the filesystem clock did not move: every file is new" >&"${out_fd}"
    all_new "${top}"
    return 0
  fi
  printf 'spark-source-times 1\t%s\0' "${top}" >"${times_next}"
  while IFS= read -r -d '' rec; do
    meta="${rec%%$'\t'*}" p="${rec#*$'\t'}"
    rest="${meta#* }"
    kind="${rest%% *}" id="${rest#* }"
    [ "${kind}" != commit ] || continue # a submodule's files are its own checkout's
    [ -z "${cid[${p}]+set}" ] || id="${cid[${p}]}"
    t="${now}"
    if [ "${id}" != - ] && [ "${old_id[${p}]:-}" = "${id}" ]; then
      t="${old_t[${p}]}"
      restored=$((restored + 1))
    else
      new=$((new + 1))
    fi
    paths+=("${top}/${p}")
    group["${t}"]+=" ${n}"
    n=$((n + 1))
    printf '%s\t%s\t%s\0' "${id}" "${t}" "${p}"
  done <"${scratch}/st-tree" >>"${times_next}"
  while IFS= read -r -d '' p; do untracked+=("${top}/${p}"); done <"${scratch}/st-untracked"
  # new times first, then the recorded ones; if the filesystem does not keep a time exactly,
  # every path gets a time in a later second than every build, and nothing is recorded
  local -a batch order=("${now}")
  local ok=true i
  for t in "${!group[@]}"; do [ "${t}" = "${now}" ] || order+=("${t}"); done
  stamp "${now}" "${untracked[@]}" || ok=false
  for t in "${order[@]}"; do
    [ "${ok}" = true ] || break
    batch=()
    for i in ${group[${t}]:-}; do batch+=("${paths[i]}"); done
    stamp "${t}" "${batch[@]}" || ok=false
  done
  if [ "${ok}" = false ]; then
    echo "source times: the checkout's filesystem does not keep file times to the nanosecond: every file is new" >&"${out_fd}"
    all_new "${top}"
    return 0
  fi
  echo "source times: ${restored} of ${n} tracked paths unchanged since the record (their time restored), ${new} new; ${#untracked[@]} untracked files new" >&"${out_fd}"
  source_times="\"status\":\"$([ "${restored}" -gt 0 ] && echo restored || echo new)\",\"restored\":${restored},\"new\":${new},\"untracked\":${#untracked[@]},\"ms\":$(($(now_ms) - started))"
}

# record_source_times: at the end, under the lock: the record of the times this lane gave, less
# every path the lane itself changed (its time moved), so that such a path is new next time
record_source_times() {
  local rec id rest t p top IFS=$' \t\n'
  local -A cur=()
  local -a all=()
  [ -s "${times_next}" ] || return 0
  {
    IFS= read -r -d '' rec
    top="${rec#*$'\t'}"
    while IFS= read -r -d '' rec; do all+=("${top}/${rec#*$'\t'*$'\t'}"); done
  } <"${times_next}"
  while IFS= read -r -d '' rec; do cur["${rec#*$'\t'}"]="${rec%%$'\t'*}"; done < <(
    printf '%s\0' "${all[@]}" | xargs -0 -r stat --printf '%.9Y\t%n\0' -- 2>/dev/null || true
  )
  {
    IFS= read -r -d '' rec
    printf '%s\0' "${rec}"
    while IFS= read -r -d '' rec; do
      id="${rec%%$'\t'*}" rest="${rec#*$'\t'}"
      t="${rest%%$'\t'*}" p="${rest#*$'\t'}"
      [ "${cur[${top}/${p}]:-}" != "${t}" ] || printf '%s\0' "${rec}"
    done
  } <"${times_next}" >"${times_file}.tmp" && mv -f "${times_file}.tmp" "${times_file}"
}

# cpu_ms VAR: sets VAR to the CPU time (user + system, ms) of this shell's finished children:
# cargo and everything it waited for. Unlike wall time it does not grow with the machine's load.
# (Run in this shell, never in $(...): a subshell's `times` counts only its own children.)
cpu_ms() {
  local u s ms=0 x sec
  times >"${scratch}/times"
  { read -r _ && read -r u s; } <"${scratch}/times"
  for x in "${u}" "${s}"; do # e.g. 1m4.250s
    sec="${x#*m}"
    sec="${sec%s}"
    ms=$((ms + ${x%%m*} * 60000 + ${sec%.*} * 1000 + 10#${sec#*.}))
  done
  printf -v "$1" '%s' "${ms}"
}

# locked NAME CMD...: runs CMD under the build lock (taken at the lane's first step and held to
# its end), timed, and records the step: its time, the wait for the lock, and its CPU time
locked() {
  local name="$1" t0 t1 t2 c0 c1 rc=0
  shift
  t0="$(now_ms)"
  t1="${t0}"
  if [ "${lock_held}" = false ]; then
    if ! flock --nonblock "${lock_fd}"; then
      echo "spark-test: waiting for the build lock ${build_lock} (another build of this repository holds it)" >&2
      flock "${lock_fd}"
    fi
    lock_held=true
    t1="$(now_ms)"
    if [ "${build_cache}" = shared ]; then
      cpu_ms c0
      restore_source_times
      cpu_ms c1
      source_times+=",\"cpuMs\":$((c1 - c0))"
    fi
  fi
  t2="$(now_ms)"
  cpu_ms c0
  "$@" {lock_fd}>&- {out_fd}>&- || rc=$?
  cpu_ms c1
  steps+=("{\"name\":\"${name}\",\"ms\":$(($(now_ms) - t2)),\"lockWaitMs\":$((t1 - t0)),\"cpuMs\":$((c1 - c0)),\"exit\":${rc}}")
  return "${rc}"
}

# step_add KEY NUMBER...: adds fields to the last recorded step
step_add() {
  local last="${steps[-1]%\}}"
  while [ $# -ge 2 ]; do
    last+=",\"$1\":$2"
    shift 2
  done
  steps[-1]="${last}}"
}

# build NAME CARGO-ARGS...: one `cargo … --no-run` build step. Cargo's JSON messages are kept in
# the results (cargo-build-NAME.jsonl) and counted: units compiled (of them, this workspace's) and
# units fresh, i.e. reused from the target dir.
build() {
  local name="$1" json="${results}/cargo-build-$1.jsonl" rc=0 compiled fresh workspace
  shift
  echo "== build ${name}: cargo $* --no-run (${build_cache} target dir)"
  locked "build:${name}" cargo "$@" --no-run --message-format json-render-diagnostics >"${json}" || rc=$?
  compiled="$(grep -c '"reason":"compiler-artifact".*"fresh":false' "${json}" || true)"
  fresh="$(grep -c '"reason":"compiler-artifact".*"fresh":true' "${json}" || true)"
  workspace="$(grep '"reason":"compiler-artifact".*"fresh":false' "${json}" | grep -c '"package_id":"[^"]*path+file://' || true)"
  step_add compiled "${compiled}" compiledWorkspace "${workspace}" fresh "${fresh}"
  echo "build ${name}: exit ${rc}; compiled ${compiled} units (${workspace} of this workspace), ${fresh} fresh"
  return "${rc}"
}

# tests NAME "FILTER..." CARGO-ARGS...: runs `cargo CARGO-ARGS` under the lock (its output also
# kept in the scratch dir) and fails unless every FILTER names at least one test that ran and
# passed ("" = at least one test at all): libtest passes when a filter matches nothing, and a lane
# that tested nothing must not pass.
tests() {
  local name="$1" want="$2" out="${scratch}/test-$1.log" rc=0 passed f
  shift 2
  echo "== test ${name}: cargo $*"
  # shellcheck disable=SC2016 # expanded by the inner bash
  locked "test:${name}" bash -c 'set -o pipefail; cargo "$@" 2>&1 | tee "$0"' "${out}" "$@" || rc=$?
  passed="$(sed -n 's/^test \(.*\) \.\.\. ok$/\1/p' "${out}")"
  step_add passed "$(grep -c . <<<"${passed}" || true)"
  [ "${rc}" -eq 0 ] || return "${rc}"
  if [ -z "${want}" ] && [ -z "${passed}" ]; then
    echo "spark-test: cargo $* ran no test: the ${name} step would pass without testing anything" >&2
    return 1
  fi
  for f in ${want}; do
    if ! grep -qF -- "${f}" <<<"${passed}"; then
      echo "spark-test: the filter '${f}' matched no test that ran and passed: the ${name} step would pass without testing it" >&2
      return 1
    fi
  done
}

revisions() {
  echo "== toolchain and source revisions"
  echo "source: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "cargo: $(cargo --version 2>&1 || echo 'not found')"
  echo "rustc: $(rustc --version 2>&1 || echo 'not found')"
  echo "nvcc: $(nvcc --version 2>/dev/null | grep -i release || echo 'not found')"
  echo "lane: ${lane} (${target_minutes}-minute target), suite ${suite}, topology ${topology}"
  if [ "${build_cache}" = shared ]; then
    echo "build cache: shared ${CARGO_TARGET_DIR} (SPARK_BUILD_CACHE_DIR: warm across leases)"
  else
    echo "build cache: cold ${CARGO_TARGET_DIR} (SPARK_BUILD_CACHE_DIR is not set; removed after a successful run)"
  fi
  echo "results: ${results}"
}

# At exit: the lane record in the results (spark-lane.json), the time against the target (a
# target, never a kill: the job's limit is the workflow's timeout-minutes), and the disposable
# work dir removed after a successful run (kept after a failure, for inspection; the agent removes
# the lease's work dir at release).
finish() {
  local rc=$? elapsed_ms minutes over IFS=,
  if [ "${lock_held}" = true ] && [ "${build_cache}" = shared ] && ! record_source_times; then
    echo "spark-test: could not write the source times record ${times_file}; the next lease builds the workspace anew" >&2
    rm -f "${times_file}"
  fi
  elapsed_ms=$(($(now_ms) - lane_started_ms))
  minutes="$(awk -v e="${elapsed_ms}" 'BEGIN { printf "%.1f", e / 60000 }')"
  over="$(awk -v e="${elapsed_ms}" -v m="${target_minutes}" 'BEGIN { print (e > m * 60000) ? "true" : "false" }')"
  printf '{"lane":"%s","suite":"%s","topology":"%s","targetMinutes":%s,"elapsedSeconds":%s,"overTarget":%s,"exit":%s,"buildCache":"%s","sourceTimes":{%s},"steps":[%s]}\n' \
    "${lane}" "${suite}" "${topology}" "$(awk -v m="${target_minutes}" 'BEGIN { printf "%g", m }')" \
    "$((elapsed_ms / 1000))" "${over}" "${rc}" "${build_cache}" "${source_times}" "${steps[*]}" >"${results}/spark-lane.json"
  if [ "${over}" = true ]; then
    echo "spark-test: lane ${lane} took ${minutes} min: over its ${target_minutes}-minute target (a target, not a limit; the job's limit is the workflow's timeout-minutes)"
  else
    echo "spark-test: lane ${lane} took ${minutes} min of its ${target_minutes}-minute target"
  fi
  if [ "${rc}" -eq 0 ]; then
    rm -rf "${scratch}"
    echo "spark-test: removed the disposable work dir ${scratch}"
  else
    echo "spark-test: kept ${scratch} after the failure (the agent removes the work dir at release)" >&2
  fi
  exit "${rc}"
}
trap finish EXIT
# ---- end common lane prelude ----

# The CUDA smoke: release-mode wh-butter-cuda, test target cuda_smoke
smoke() {
  build smoke test --release --locked -p "${SMOKE_PACKAGE}" --test "${SMOKE_TEST}"
  tests smoke "" test --release --locked -p "${SMOKE_PACKAGE}" --test "${SMOKE_TEST}"
}

# The one model integration filter, offline, from the managed cache
model() {
  echo "== model: ${BUTTER_MODEL} snapshot ${model_dir##*/}: ${PROMPT_TOKENS}-token prompt, ${DECODE_TOKENS} decode tokens, ${WARMUP_RUNS} warmup, ${MEASURED_RUNS} measured runs"
  export HF_HOME="${SPARK_MODEL_CACHE}/huggingface" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
  export BUTTER_MODEL_DIR="${model_dir}" BUTTER_PROMPT_TOKENS="${PROMPT_TOKENS}" BUTTER_DECODE_TOKENS="${DECODE_TOKENS}"
  export BUTTER_WARMUP_RUNS="${WARMUP_RUNS}" BUTTER_MEASURED_RUNS="${MEASURED_RUNS}"
  export BUTTER_RESULT_JSON="${results}/butter-model-bench.json"
  rm -f "${BUTTER_RESULT_JSON}"
  build model test --release --locked "${model_cargo_args[@]}"
  tests model "${BUTTER_MODEL_TEST_FILTER}" test --release --locked "${model_cargo_args[@]}" -- --include-ignored "${BUTTER_MODEL_TEST_FILTER}"
  [ -s "${BUTTER_RESULT_JSON}" ] ||
    { echo "spark-test: the model integration test passed without writing its measurement to BUTTER_RESULT_JSON" >&2; return 1; }
}

revisions
smoke
if [ "${suite}" = performance ]; then model; fi

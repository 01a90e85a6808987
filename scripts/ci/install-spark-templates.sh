#!/usr/bin/env bash
# Installs the Spark in-job templates into a consuming repository (Butter or Iron):
#   .github/workflows/spark-pr-test.yml   the controller-dispatched workflow
#   scripts/ci/spark-test.sh              the project's suite definitions
#   .github/actionlint.yaml               the Spark runners' self-hosted labels, so a repository
#                                         that lints its workflows with actionlint stays clean
# and pins the Spark actions to one commit of the controller repository, so the actions and the
# host command installed with the agent bundle come from the same revision.
#
# usage: scripts/ci/install-spark-templates.sh <butter|iron> <target-repo-dir> <owner/repo@commit-sha>
#          [--fleet-label=<label>] [--force]
# --fleet-label names the pool label the controller gives every JIT runner (the pool's
# runnerLabel); the default is the seed's waffuru-spark.
set -euo pipefail

usage() {
  echo "usage: $0 <butter|iron> <target-repo-dir> <owner/repo@commit-sha> [--fleet-label=<label>] [--force]" >&2
  echo "  e.g. $0 iron ../iron acme/spark-controller@0123456789abcdef0123456789abcdef01234567" >&2
  exit 2
}

if [ $# -lt 3 ]; then usage; fi
project="$1"
target="$2"
pin="$3"
shift 3
force=""
fleet_label="waffuru-spark"
for opt in "$@"; do
  case "${opt}" in
    --force) force=--force ;;
    --fleet-label=*) fleet_label="${opt#--fleet-label=}" ;;
    *) usage ;;
  esac
done
if ! [[ "${fleet_label}" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || [[ "${fleet_label}" =~ ^spark-(single|pair|r-.*)$ ]]; then
  echo "install-spark-templates: fleet label '${fleet_label}' must be letters, digits, '.', '_' or '-' and not one of the Spark topology or reservation labels" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
templates="${here}/workflows-templates"

case "${project}" in
  butter | iron) ;;
  *)
    echo "install-spark-templates: unknown project '${project}' (expected butter or iron)" >&2
    exit 2
    ;;
esac
if ! [[ "${pin}" =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}$ ]]; then
  echo "install-spark-templates: '${pin}' is not owner/repo@<full 40-character commit SHA>; pin the actions to a commit, not a branch or tag" >&2
  exit 2
fi
if [ ! -d "${target}/.git" ]; then
  echo "install-spark-templates: ${target} is not the root of a git checkout" >&2
  exit 2
fi

repo="${pin%@*}"
sha="${pin#*@}"
workflow="${target}/.github/workflows/spark-pr-test.yml"
script="${target}/scripts/ci/spark-test.sh"
lintconfig="${target}/.github/actionlint.yaml"
# the labels every Spark JIT runner carries (docs/github-app.md "Runner labels"); the per-reservation
# label is spark-r-<id>-<nonce>, declared as a pattern (actionlint accepts globs in this list)
labels=(self-hosted Linux ARM64 "${fleet_label}" spark-single spark-pair 'spark-r-*')
if [ -e "${target}/.github/actionlint.yml" ]; then
  echo "install-spark-templates: ${target}/.github/actionlint.yml exists; add these to self-hosted-runner.labels there and rename it to actionlint.yaml, or remove it: ${labels[*]}" >&2
  exit 1
fi
for f in "${workflow}" "${script}" "${lintconfig}"; do
  if [ -e "${f}" ] && [ "${force}" != --force ]; then
    echo "install-spark-templates: ${f} exists; pass --force to replace it" >&2
    exit 1
  fi
done

mkdir -p "$(dirname "${workflow}")" "$(dirname "${script}")"
# your-org/spark-controller/actions/<name>@v1 → <repo>/actions/<name>@<sha> # spark-controller <sha>
# and the seed's fleet label → the chosen one, in runs-on lists written on one line or one per line
sed -E -e "s#your-org/spark-controller/actions/([a-z-]+)@v1#${repo}/actions/\\1@${sha} \\# spark-controller ${sha:0:12}#" \
  -e "/^ *runs-on:/s#, waffuru-spark, #, ${fleet_label}, #" \
  -e "s#^( +)waffuru-spark,\$#\\1${fleet_label},#" \
  "${templates}/spark-pr-test.yml" >"${workflow}"
cp "${templates}/${project}/scripts/ci/spark-test.sh" "${script}"
chmod +x "${script}"
{
  echo "# Written by spark-controller scripts/ci/install-spark-templates.sh (${repo}@${sha:0:12}):"
  echo "# the self-hosted labels of the Spark JIT runners that run .github/workflows/spark-pr-test.yml."
  echo "# https://github.com/rhysd/actionlint/blob/main/docs/config.md"
  echo "self-hosted-runner:"
  echo "  labels:"
  for l in "${labels[@]}"; do echo "    - '${l}'"; done
} >"${lintconfig}"
echo "installed ${workflow#"${target}"/}, ${script#"${target}"/} and ${lintconfig#"${target}"/} (actions pinned to ${repo}@${sha:0:12}, fleet label ${fleet_label})"

#!/usr/bin/env bash
# Installs the Spark in-job templates into a consuming repository (Butter or Iron):
#   .github/workflows/spark-pr-test.yml   the controller-dispatched workflow
#   scripts/ci/spark-test.sh              the project's suite definitions
# and pins the Spark actions to one commit of the controller repository, so the actions and the
# host command installed with the agent bundle come from the same revision.
#
# usage: scripts/ci/install-spark-templates.sh <butter|iron> <target-repo-dir> <owner/repo@commit-sha> [--force]
set -euo pipefail

usage() {
  echo "usage: $0 <butter|iron> <target-repo-dir> <owner/repo@commit-sha> [--force]" >&2
  echo "  e.g. $0 iron ../iron acme/spark-controller@0123456789abcdef0123456789abcdef01234567" >&2
  exit 2
}

if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
project="$1"
target="$2"
pin="$3"
force="${4:-}"
[ -z "${force}" ] || [ "${force}" = --force ] || usage

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
for f in "${workflow}" "${script}"; do
  if [ -e "${f}" ] && [ "${force}" != --force ]; then
    echo "install-spark-templates: ${f} exists; pass --force to replace it" >&2
    exit 1
  fi
done

mkdir -p "$(dirname "${workflow}")" "$(dirname "${script}")"
# your-org/spark-controller/actions/<name>@v1 → <repo>/actions/<name>@<sha> # spark-controller <sha>
sed -E "s#your-org/spark-controller/actions/([a-z-]+)@v1#${repo}/actions/\\1@${sha} \\# spark-controller ${sha:0:12}#" \
  "${templates}/spark-pr-test.yml" >"${workflow}"
cp "${templates}/${project}/scripts/ci/spark-test.sh" "${script}"
chmod +x "${script}"
echo "installed ${workflow#"${target}"/} and ${script#"${target}"/} (actions pinned to ${repo}@${sha:0:12})"

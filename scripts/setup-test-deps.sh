#!/usr/bin/env bash
# The Debian packages the test suite runs for real, installed only when missing. `npm test` runs
# this first (package.json "pretest"), so the README's test command works on a fresh Debian
# machine; it is idempotent and quiet when everything is there.
#   - chromium:   the dashboard and create-app tests (headless Chromium driven by playwright-core)
#   - shellcheck: shell scripts and the spark-test.sh template
#   - prometheus: promtool, which checks /metrics (`promtool check metrics`)
#   - slurm-wlm:  the slurm execution backend (sbatch, squeue, sacct, scancel; slurmctld, slurmd)
#   - munge:      slurm's authentication daemon
#   - sudo:       how a host's agent runs its privileged helper (agent/host/spark-lease-sandbox.sh)
#   - cargo, rustc, librust-criterion-dev: the Butter/Iron lane scripts run by Debian's real cargo
#     on fixture workspaces (scripts/sim/fixtures/lanes/), offline, from the crates Debian ships under
#     /usr/share/cargo/registry. These are checked with dpkg-query, not by command: a rustup
#     cargo earlier on PATH (~/.cargo/bin) is not the distribution's, and the crates directory
#     has no command at all.
# Installing needs root or passwordless sudo; without either it says what to run and fails.
set -euo pipefail

packages=(chromium shellcheck prometheus slurm-wlm munge sudo)
# installed when dpkg says so (`dpkg-query -W -f='${db:Status-Status}'` prints `installed`;
# for a package dpkg never saw it prints nothing and exits 1, dpkg-query(1))
debian_packages=(cargo rustc librust-criterion-dev)
commands_of() {
  case "$1" in
    chromium) echo chromium ;;
    shellcheck) echo shellcheck ;;
    prometheus) echo promtool ;;
    slurm-wlm) echo sbatch squeue sacct scancel slurmctld slurmd ;;
    munge) echo munge munged ;;
    sudo) echo sudo visudo ;;
    cargo) echo /usr/bin/cargo ;;
    rustc) echo /usr/bin/rustc ;;
    librust-criterion-dev) echo /usr/share/cargo/registry/criterion-0.3.6 ;;
  esac
}

# daemons live in sbin, which a non-root PATH often lacks
search_path="${PATH}:/usr/sbin:/sbin"
missing=()
for pkg in "${packages[@]}"; do
  for cmd in $(commands_of "$pkg"); do
    if ! PATH="$search_path" command -v "$cmd" >/dev/null 2>&1; then
      missing+=("$pkg")
      break
    fi
  done
done
for pkg in "${debian_packages[@]}"; do
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

install="apt-get install -y --no-install-recommends ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-test-deps: npm test needs ${missing[*]} (Debian package names), and this is not a Debian/Ubuntu system: install their equivalents (commands: $(for p in "${missing[@]}"; do commands_of "$p"; done | tr '\n' ' ')), then run npm test again." >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  {
    echo "setup-test-deps: npm test needs these Debian packages, which are missing: ${missing[*]}"
    echo "  This user is not root and has no passwordless sudo, so nothing was installed. Run once as root:"
    echo "    apt-get update && ${install}"
    echo "  (or: sudo apt-get update && sudo ${install}), then run npm test again."
  } >&2
  exit 1
fi

echo "setup-test-deps: installing ${missing[*]} (Debian packages the tests use)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

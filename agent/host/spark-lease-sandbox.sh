#!/bin/sh
# spark-lease-sandbox: the one privileged helper of the Spark relay agent (docs/adr/0155).
#
# The agent runs as its own unprivileged user and holds no capability. Everything it must do as
# root or as the runner user goes through this script, run by root (an operator's sudoers rule for
# exactly this command and its configuration file, docs/agent.md). Whatever the agent passes, the
# script only ever runs commands as the runner user named in its root-owned configuration, with no
# capability and no_new_privs, and only ever touches paths it derives itself from that
# configuration and a validated lease name.
#
#   spark-lease-sandbox CONFIG check
#       print the settings (the agent compares them with its own at start)
#   spark-lease-sandbox CONFIG as-runner -- CMD...
#       CMD as the runner user, with the environment read from standard input
#   spark-lease-sandbox CONFIG prepare LEASE KEY
#       a fresh work dir and sandbox dirs for LEASE; the shared build cache dir of KEY (a
#       repository), or with KEY "-" one of the lease's own in its work dir
#   spark-lease-sandbox CONFIG prepare-run LEASE KEY
#       prepare, then build the lease's namespace that `run` enters (below), kept by bind mounts
#       of its namespace files in the lease's sandbox dir (docs/adr/0200): built while the host
#       waits for its runner config, so a runner's start only enters it
#   spark-lease-sandbox CONFIG run LEASE KEY -- CMD...
#       CMD as the runner user in a mount and IPC namespace of its own: every mount read-only but
#       the lease's work dir, the repository's build cache, a copy-on-write view of the runner dir
#       and the configured writable paths; a fresh home, /tmp, /var/tmp, /dev/shm, /run/lock and
#       POSIX message queues; the other leases' dirs hidden. The environment comes on stdin. It
#       enters the namespace prepare-run built for LEASE and KEY in this boot, else builds one.
#   spark-lease-sandbox CONFIG remove LEASE
#       removes the lease's namespace and dirs: made writable as the runner user first, then removed
#   spark-lease-sandbox CONFIG wipe-cache KEY
#       removes a repository's build cache (an operator's command; the agent's size cap)
#
# CONFIG (root-owned, not writable by group or others, in a directory only root writes; the
# sudoers rule pins its path; /etc/spark-lease-sandbox.conf by default):
#   runner_user=spark-runner     the unprivileged user jobs run as (never root)
#   work_root=/srv/spark/work    root-owned, mode 0711: one dir per lease and .build-cache/
#   runner_dir=/opt/actions-runner   optional: the runner install, seen copy-on-write by each lease
#   writable=/a:/b               optional: more paths a job may write (shared by every lease)
#
# The job environment arrives on stdin as NAME+VALUE lines (the value as it is: no newline in it)
# or NAME=BASE64VALUE lines (any value), ended by an empty line, read only after the switch to the
# runner user: the secrets in it never pass through argv or a root shell.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

die() {
  echo "spark-lease-sandbox: $*" >&2
  exit 2
}

# Reads NAME+VALUE and NAME=BASE64 lines from stdin up to an empty line, exports them, runs "$@"
# (as whoever runs it: always the runner user, after setpriv; started by `env -i`, so nothing else
# is set). A NAME+VALUE line costs no command (`read -r` with an empty IFS keeps the line as it
# is); a base64 value costs two forks, which for a job's thirty variables were most of a runner's
# start (docs/adr/0200), so the agent sends only values with a newline that way. An input that
# ends before its empty line runs nothing: an agent that died while writing it would otherwise
# start the job with part of its environment.
# shellcheck disable=SC2016 # expanded by the shell that runs it, not here
READ_ENV='PATH=/usr/bin:/bin
while :; do
  IFS= read -r l || { echo "spark-lease-sandbox: no environment: nothing started" >&2; exit 125; }
  [ -n "$l" ] || break
  n=${l%%[!A-Za-z0-9_]*}
  case $n in ""|[0-9]*) echo "spark-lease-sandbox: bad environment name" >&2; exit 125;; esac
  case ${l#"$n"} in
    +*) export "$n=${l#"$n"+}" ;;
    =*) v=$(printf "%s" "${l#"$n"=}" | base64 -d; echo x) || exit 125
        export "$n=${v%x}" ;;
    *) echo "spark-lease-sandbox: bad environment line" >&2; exit 125 ;;
  esac
done
exec "$@" </dev/null'

# --- inside a lease's new namespace: only ever from `run` or `prepare-run` below ---------------
# They validated everything and pass it on. sudo's env_reset keeps the agent from setting
# SPARK_SANDBOX_ENTER, and this process must be in another mount namespace than its parent (`run`
# exec'd unshare, which exec'd this; `prepare-run` ran unshare): it can never mount over the
# agent's own namespace. With no command after `--` (prepare-run) it builds the namespace and
# exits: the namespace lives on, held by the bind mounts of its files that unshare made.
if [ "${2:-}" = enter ]; then
  # shellcheck disable=SC3013 # -ef (same file): dash, Debian's and Ubuntu's /bin/sh, has it
  if [ "${SPARK_SANDBOX_ENTER:-}" != 1 ] || [ /proc/self/ns/mnt -ef "/proc/$PPID/ns/mnt" ]; then
    die "enter is internal to run"
  fi
  unset SPARK_SANDBOX_ENTER
  if [ $# -lt 11 ] || [ "${11}" != -- ]; then die "enter is internal to run"; fi
  uid=$3 gid=$4 home=$5 work_root=$6 runner_dir=$7 writable=$8 lease=$9 key=${10}
  shift 11
  cache_root=$work_root/.build-cache
  ld=$work_root/$lease
  sd=$work_root/$lease.sandbox
  stage=$sd/stage
  # 1. the runner install, copy-on-write: the lease may write there (the runner keeps its
  #    config, logs and _work in it), and its writes land in the lease's own dir
  if [ -n "$runner_dir" ]; then
    mount -n -t overlay spark-runner -o "lowerdir=$runner_dir,upperdir=$sd/runner,workdir=$sd/ovl" "$runner_dir"
  fi
  # 2. what stays visible and writable, held on a private staging mount while the rest is
  #    covered; the working directory keeps the staging mount reachable whatever covers its path
  mount -n -t tmpfs -o size=64k,mode=0700 spark-stage "$stage"
  cd "$stage"
  : >keep
  keep() {
    printf '%s\n' "$1" >>keep
  }
  keep "$ld"
  [ "$key" = - ] || keep "$cache_root/$key"
  [ -z "$runner_dir" ] || keep "$runner_dir"
  rest=$writable
  while [ -n "$rest" ]; do
    w=${rest%%:*}
    [ -e "$w" ] || die "writable path $w does not exist"
    keep "$w"
    [ "$rest" = "$w" ] && rest= || rest=${rest#*:}
  done
  # each mount point on the staging tmpfs is made by mount itself (X-mount.mkdir, mount(8)): a
  # mkdir program less on the way (docs/adr/0280)
  mount -n -c --bind -o X-mount.mkdir "$sd" sandbox
  i=0
  while IFS= read -r p; do
    mount -n -c --rbind -o X-mount.mkdir "$p" "$i"
    i=$((i + 1))
  done <keep
  # 3. every other mount read-only (its other flags kept), apart from the kernel's own
  #    filesystems, the staging mount and another lease's kept namespace (prepare-run): its
  #    root-only (0700) `LEASE.sandbox/ns` dir and the namespace files (nsfs) in it hold no data a
  #    job could read or write. Remounting them failed leases on a test machine whose several
  #    simulated hosts (each with its own work root) kept namespaces at once. Nor the mounts at or
  #    under the work root and the runner dir: step 4 covers the work root with a tmpfs and step 5
  #    the runner dir with its kept copy, so no path reaches them (docs/adr/0280); the kept
  #    copies, taken above, are what the job sees, as before.
  findmnt -rn -o TARGET,FSTYPE,VFS-OPTIONS | while read -r target fstype opts; do
    [ "$fstype" != nsfs ] || continue
    case $target in "$work_root" | "$work_root"/*) continue ;; esac
    if [ -n "$runner_dir" ]; then
      case $target in "$runner_dir" | "$runner_dir"/*) continue ;; esac
    fi
    case $target in
      /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | "$stage" | "$stage"/*) continue ;;
      */*.sandbox/ns | */*.sandbox/ns/*) [ "$target" = "$sd/ns" ] || [ "${target#"$sd"/ns/}" != "$target" ] || continue ;;
      *\\*) die "cannot make mount point $target read-only: its name needs escaping" ;;
    esac
    # VFS options start with rw or ro; the rest (nosuid, nodev, noexec, atime) is kept
    case $opts in
      ro | ro,*) continue ;;
      rw) opts=ro ;;
      rw,*) opts=ro,${opts#rw,} ;;
    esac
    mount -n -o "remount,bind,$opts" "$target" || die "cannot make $target read-only"
  done
  # 4. fresh places a job may write, private to this lease and gone with it
  mount -n -c --bind sandbox/tmp /tmp
  [ ! -d /var/tmp ] || mount -n -c --bind sandbox/var-tmp /var/tmp
  mount -n -t tmpfs -o nosuid,nodev,mode=1777 spark-shm /dev/shm
  [ ! -d /dev/mqueue ] || mount -n -t mqueue -o nosuid,nodev,noexec spark-mqueue /dev/mqueue
  [ ! -d /run/lock ] || mount -n -t tmpfs -o nosuid,nodev,noexec,size=1m,mode=1777 spark-lock /run/lock
  case $home in
    / | '') ;;
    *) [ ! -d "$home" ] || mount -n -c --bind sandbox/home "$home" ;;
  esac
  # the other leases' work dirs and the other repositories' build caches
  [ -d "$work_root" ] || mkdir -p "$work_root"
  mount -n -t tmpfs -o nosuid,nodev,size=64k,mode=0711 spark-work "$work_root"
  # 5. back on top: each kept path at its own place (mount points made on the fresh tmpfs or
  #    inside the lease's own dirs; X-mount.mkdir: mount makes a missing one as `mkdir -p` did)
  i=0
  while IFS= read -r p; do
    mount -n -c --move -o X-mount.mkdir "$i" "$p"
    i=$((i + 1))
  done <keep
  mount -n -o remount,ro,nosuid,nodev "$work_root"
  # the staging mount (empty mount points, and the sandbox dir it held) stays behind, unreachable:
  # its path lies under the covered work root and nothing the job runs has a reference to it
  cd /
  [ $# -gt 0 ] || exit 0
  exec setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all --ambient-caps=-all \
    --no-new-privs -- env -i /bin/sh -c "$READ_ENV" spark-job "$@"
fi

[ $# -ge 2 ] || die "usage: spark-lease-sandbox CONFIG check|as-runner|prepare|prepare-run|run|remove|wipe-cache ..."
conf=$1
verb=$2
shift 2

# Owner uid and octal mode of each path, one "uid mode" line per path (symlinks followed); one
# stat for all of them: each command this script runs is a fork on the way to the job's start.
owners_modes() {
  stat -L -c '%u %a' -- "$@"
}

# mode ($1, octal) writable by group or others
group_or_other_writable() {
  case $1 in *[2367]? | *[2367]) return 0 ;; esac
  return 1
}

# --- configuration: trusted only when root owns it and nobody else may change it -------------
case $conf in /*/*) ;; *) die "configuration $conf: give its absolute path" ;; esac
if [ ! -f "$conf" ] || [ -L "$conf" ]; then die "configuration $conf is not a regular file"; fi
# Its settings are read into variables first and used only once the checks below trust it: the
# one `stat` that checks it also reads the work root's owner and mode, a program start less on
# every verb (docs/adr/0280). An unknown setting is reported after those checks.
runner_user=
work_root=
runner_dir=
writable=
unknown=
while IFS= read -r line || [ -n "$line" ]; do
  case $line in '' | '#'*) continue ;; esac
  key=${line%%=*}
  value=${line#*=}
  case $key in
    runner_user) runner_user=$value ;;
    work_root) work_root=$value ;;
    runner_dir) runner_dir=$value ;;
    writable) writable=$value ;;
    *) [ -n "$unknown" ] || unknown=$key ;;
  esac
done <"$conf"

# nor may anyone but root replace it: its directory is root's and nobody else's to write. The
# work root's owner and mode come along when it is a directory (it is checked below either way).
wr_owner=
wr_mode=
{
  read -r conf_owner conf_mode
  read -r conf_dir_owner conf_dir_mode
  read -r wr_owner wr_mode || true
} <<EOF
$(if [ -d "$work_root" ] && [ ! -L "$work_root" ]; then
  owners_modes "$conf" "${conf%/*}" "$work_root"
else
  owners_modes "$conf" "${conf%/*}"
fi)
EOF
[ "$conf_owner" = 0 ] || die "configuration $conf must be owned by root (chown root:root $conf)"
if group_or_other_writable "$conf_mode"; then
  die "configuration $conf is writable by group or others (chmod 644 $conf)"
fi
[ "$conf_dir_owner" = 0 ] || die "the directory of $conf must be owned by root"
if group_or_other_writable "$conf_dir_mode"; then die "the directory of $conf is writable by group or others"; fi
[ -z "$unknown" ] || die "configuration $conf: unknown setting '$unknown' (runner_user, work_root, runner_dir, writable)"

# an absolute, normalized path: no "." or ".." component, no doubled or trailing slash
abs_path() {
  case $1 in
    /*) ;;
    *) return 1 ;;
  esac
  case $1 in
    / | */ | *//* | */./* | */../* | */. | */.. | *,* | *:* | *'
'*) return 1 ;;
  esac
  return 0
}

case $runner_user in '' | -* | *[!a-z0-9_-]*) die "configuration $conf: runner_user must be a user name" ;; esac
abs_path "$work_root" || die "configuration $conf: work_root must be an absolute path"
[ -z "$runner_dir" ] || abs_path "$runner_dir" || die "configuration $conf: runner_dir must be an absolute path"
if [ -n "$writable" ]; then
  rest=$writable
  while [ -n "$rest" ]; do
    w=${rest%%:*}
    abs_path "$w" || die "configuration $conf: writable holds '$w', not an absolute path"
    [ "$rest" = "$w" ] && rest= || rest=${rest#*:}
  done
fi

entry=$(getent passwd "$runner_user") || die "runner user $runner_user does not exist"
IFS=: read -r _ _ uid gid _ home _ <<EOF
$entry
EOF
[ "$uid" != 0 ] || die "runner_user $runner_user is root; jobs must run unprivileged"
[ -z "${SUDO_UID:-}" ] || [ "$SUDO_UID" != "$uid" ] || die "the runner user may not run this helper"

if [ ! -d "$work_root" ] || [ -L "$work_root" ]; then die "work_root $work_root is not a directory"; fi
if [ "$wr_owner" != 0 ] || [ "$wr_mode" != 711 ]; then
  die "work_root $work_root must be owned by root with mode 0711 (install -d -o root -g root -m 0711 $work_root)"
fi
cache_root=$work_root/.build-cache

as_runner() {
  setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all --ambient-caps=-all \
    --no-new-privs -- "$@"
}


# Sets `left` to the live (not zombie) processes whose real or effective uid is the runner's,
# each pid followed by a blank. One program (`ps`), read by this shell itself: no pipe to `awk`,
# no subshell (docs/adr/0280). Its four fields are numbers and the state's letters (ps(1), "STATE
# CODES"), so the shell's splitting reads them. A `ps` that fails refuses, as no answer proves
# the runner user has no process.
runner_processes() {
  procs=$(ps -e -o pid=,ruid=,euid=,stat=) || die "cannot list the processes (ps failed)"
  left=
  field=0
  for w in $procs; do
    case $field in
      0) pid=$w field=1 ;;
      1) ruid=$w field=2 ;;
      2) euid=$w field=3 ;;
      *)
        field=0
        if [ "$ruid" = "$uid" ] || [ "$euid" = "$uid" ]; then
          case $w in Z*) ;; *) left="$left$pid " ;; esac
        fi
        ;;
    esac
  done
}

# Each path ($2...) a real directory (not a symlink) owned by uid $1; dies naming the first that is not.
owned_dirs() {
  want=$1
  shift
  for d in "$@"; do
    if [ ! -d "$d" ] || [ -L "$d" ]; then die "$d is not the lease's (prepare it first)"; fi
  done
  for o in $(stat -c %u -- "$@"); do
    [ "$o" = "$want" ] || die "one of $* is not the lease's (prepare it first)"
  done
}

lease_name() {
  case $1 in '' | -* | *[!A-Za-z0-9_-]*) die "lease name '$1' is not a plain name" ;; esac
  [ ${#1} -le 200 ] || die "lease name too long"
}

cache_key() {
  case $1 in -) return 0 ;; '' | -* | .* | *[!a-z0-9._+-]*) die "cache key '$1' is not a plain name" ;; esac
  [ ${#1} -le 200 ] || die "cache key too long"
}

# The lease's kept namespace (prepare-run): the bind mounts of its namespace files and of the dir
# holding them. With no process in it (the callers check), the namespace and its mounts go with
# the last bind mount. A mount that stays makes the removal after this fail, naming it.
drop_namespace() {
  [ -d "$1/ns" ] || return 0
  for m in "$1/ns/mnt" "$1/ns/ipc" "$1/ns"; do
    umount -n -- "$m" 2>/dev/null || true
  done
}

# This boot's id: a kept namespace is valid only in the boot that made it (its bind mounts do not
# survive a reboot, the files under them do).
boot_id() {
  read -r boot </proc/sys/kernel/random/boot_id
}

# removes paths under work_root, never leaving its filesystem: first as the runner user, who makes
# its own trees writable (a job's `chmod 000` must not keep its files), then as root
remove_tree() {
  for p in "$@"; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    as_runner chmod -R u+rwX -- "$p" 2>/dev/null || true
    rm -rf --one-file-system -- "$p"
  done
}

case $verb in
  check)
    case $home in
      / | '') die "runner user $runner_user has no home of its own (useradd --create-home --home-dir /var/lib/$runner_user)" ;;
    esac
    [ -d "$home" ] || die "the home $home of $runner_user does not exist (install -d -o $runner_user -g $runner_user -m 0700 $home)"
    # what this helper speaks (docs/adr/0200): 2 = prepare-run, and NAME+VALUE environment lines
    echo "protocol=2"
    echo "runner_user=$runner_user"
    echo "uid=$uid"
    echo "gid=$gid"
    echo "home=$home"
    echo "work_root=$work_root"
    echo "runner_dir=$runner_dir"
    echo "writable=$writable"
    ;;

  as-runner)
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "as-runner: no command"
    cd /
    exec setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all --ambient-caps=-all \
      --no-new-privs -- env -i /bin/sh -c "$READ_ENV" spark-as-runner "$@"
    ;;

  prepare | prepare-run)
    [ $# -eq 2 ] || die "usage: $verb LEASE KEY"
    lease_name "$1"
    cache_key "$2"
    runner_processes
    [ -z "$left" ] || die "runner user $runner_user still has processes (pid $left)"
    if [ "$verb" = prepare-run ]; then
      case $0 in /*) ;; *) die "prepare-run: invoke this helper by its absolute path" ;; esac
    fi
    ld=$work_root/$1
    sd=$work_root/$1.sandbox
    ns=$sd/ns
    drop_namespace "$sd"
    remove_tree "$ld" "$sd"
    # One install per owner and mode (docs/adr/0280), the root-owned 0711 sandbox dir first: the
    # runner user's dirs in it are made in a dir that already has its mode. The root-only dirs:
    # the overlay's work dir, the staging point and (prepare-run) the namespace files' dir.
    if [ -d "$cache_root" ]; then
      install -d -o 0 -g 0 -m 0711 "$sd"
    else
      install -d -o 0 -g 0 -m 0711 "$cache_root" "$sd"
    fi
    if [ "$verb" = prepare-run ]; then
      install -d -o 0 -g 0 -m 0700 "$sd/ovl" "$sd/stage" "$ns"
    else
      install -d -o 0 -g 0 -m 0700 "$sd/ovl" "$sd/stage"
    fi
    # the runner user's: the work dir, the sandbox's home, tmp, var-tmp and runner, and the build
    # cache (with KEY "-" the lease's own, gone with its work dir)
    if [ "$2" = - ]; then
      install -d -o "$uid" -g "$gid" -m 0700 "$ld" "$sd/home" "$sd/tmp" "$sd/var-tmp" "$sd/runner" "$ld/.build-cache"
    elif [ -d "$cache_root/$2" ]; then
      install -d -o "$uid" -g "$gid" -m 0700 "$ld" "$sd/home" "$sd/tmp" "$sd/var-tmp" "$sd/runner"
    else
      install -d -o "$uid" -g "$gid" -m 0700 "$ld" "$sd/home" "$sd/tmp" "$sd/var-tmp" "$sd/runner" "$cache_root/$2"
    fi
    [ "$verb" = prepare-run ] || exit 0
    # the namespace `run` enters, built now: the host waits here for its runner config anyway.
    # Its files are bind mounts, which a shared mount would propagate (unshare(1) refuses them
    # there): they go on a private bind mount of their own dir (one mount(8) call does both).
    mount -n --bind --make-private "$ns" "$ns"
    : >"$ns/mnt"
    : >"$ns/ipc"
    if ! SPARK_SANDBOX_ENTER=1 unshare --mount="$ns/mnt" --ipc="$ns/ipc" --propagation private -- \
      "$0" "$conf" enter "$uid" "$gid" "$home" "$work_root" "$runner_dir" "$writable" "$1" "$2" --; then
      drop_namespace "$sd"
      die "could not build the namespace of lease $1"
    fi
    # what `run` checks before it enters: made in this boot, for this key
    boot_id
    printf '%s %s\n' "$boot" "$2" >"$ns/made"
    ;;

  remove)
    [ $# -eq 1 ] || die "usage: remove LEASE"
    lease_name "$1"
    runner_processes
    [ -z "$left" ] || die "runner user $runner_user still has processes (pid $left)"
    drop_namespace "$work_root/$1.sandbox"
    remove_tree "$work_root/$1" "$work_root/$1.sandbox"
    ;;

  wipe-cache)
    if [ $# -ne 1 ] || [ "$1" = - ]; then die "usage: wipe-cache KEY"; fi
    cache_key "$1"
    runner_processes
    [ -z "$left" ] || die "runner user $runner_user still has processes (pid $left)"
    # a lease's kept namespace holds the cache of its repository: its job would find it removed
    for made in "$work_root"/*.sandbox/ns/made; do
      [ -f "$made" ] || continue
      read -r _ made_key <"$made" || continue
      made=${made%.sandbox/ns/made}
      [ "$made_key" != "$1" ] || die "lease ${made##*/} is prepared with this build cache; remove the lease first"
    done
    remove_tree "$cache_root/$1"
    ;;

  run)
    if [ $# -lt 4 ] || [ "$3" != -- ]; then die "usage: run LEASE KEY -- CMD..."; fi
    lease_name "$1"
    cache_key "$2"
    lease=$1
    key=$2
    shift 3
    runner_processes
    [ -z "$left" ] || die "runner user $runner_user still has processes (pid $left); a lease starts alone"
    ld=$work_root/$lease
    sd=$work_root/$lease.sandbox
    # the namespace prepare-run built for this lease and key in this boot: only entered, once.
    # Its dirs were checked and made by prepare-run itself, and nothing has run as the runner user
    # since (checked just above); the namespace holds them, whatever happened to their paths
    # since. Its mark is emptied first (a shell redirection, no command): a later run of the
    # lease (a replaced runner) builds a namespace of its own, as every run did before.
    made=
    if [ -f "$sd/ns/made" ]; then read -r made <"$sd/ns/made" || made=; fi
    boot_id
    if [ "$made" = "$boot $key" ]; then
      : >"$sd/ns/made"
      cd /
      exec nsenter --mount="$sd/ns/mnt" --ipc="$sd/ns/ipc" -- setpriv --reuid="$uid" --regid="$gid" \
        --init-groups --inh-caps=-all --ambient-caps=-all --no-new-privs -- \
        env -i /bin/sh -c "$READ_ENV" spark-job "$@"
    fi
    if [ "$key" = - ]; then
      owned_dirs "$uid" "$ld" "$sd/home" "$sd/tmp" "$sd/var-tmp" "$sd/runner"
    else
      owned_dirs "$uid" "$ld" "$sd/home" "$sd/tmp" "$sd/var-tmp" "$sd/runner" "$cache_root/$key"
    fi
    owned_dirs 0 "$sd" "$sd/ovl" "$sd/stage"
    case $0 in /*) ;; *) die "run: invoke this helper by its absolute path" ;; esac
    SPARK_SANDBOX_ENTER=1
    export SPARK_SANDBOX_ENTER
    exec unshare --mount --ipc --propagation private -- "$0" "$conf" enter "$uid" "$gid" "$home" \
      "$work_root" "$runner_dir" "$writable" "$lease" "$key" -- "$@"
    ;;

  *)
    die "unknown verb '$verb' (check, as-runner, prepare, prepare-run, run, remove, wipe-cache)"
    ;;
esac

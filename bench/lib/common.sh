# bench/lib/common.sh — helpers shared by the bench/*.sh scripts.
#
# Sourced, never run: each script does, right after `set -euo pipefail`,
#   source "$(dirname "$0")/lib/common.sh"
# Sourcing only exports PATH (+ /usr/sbin:/sbin) and LC_ALL=C and defines
# functions; nothing runs and no trap is installed until a script calls them.
#
# Globals the functions expect (set by the script before calling them)
#   BENCH_TAG     name in the log prefix: "[<BENCH_TAG> HH:MM:SS] ..."
#   REPO          repository root (for cargo build and the git commit)
#   SLUICE, SLUICE_BUILD    binary and "1: cargo build --release first"
#   W             temp dir of the run (make_workdir sets it)
#   PF, PF_ETC    Postfix instance dir and its config dir (make_workdir)
#   KEEP          1: keep $W at exit
#   ANNOUNCE_RM   1: log "removing temp dir $W" before removing it at exit
#   HOST          address everything listens on (127.0.0.1)
#   POSTFIX_MAILLOG   1: the Postfix instance logs to $PF/maillog
#
# Functions the script defines for it
#   needs_sluice_binary    (for ensure_sluice) true if this run uses $SLUICE
#   cleanup_processes      (for cleanup) stop every process the script started
#
# Functions
#   log MSG...             progress line on stderr, "[$BENCH_TAG HH:MM:SS] MSG"
#   die MSG...             log "ERROR: MSG", exit 2 (set-up failure)
#   calc EXPR              float arithmetic, an awk expression: calc '3/2'
#   fmt FORMAT VALUE       printf FORMAT VALUE through awk: fmt %.2f 1.234
#   require_root           die unless uid 0
#   apt_install PKG...     non-interactive apt-get install (apt-get update and
#                          retry once if the first attempt fails)
#   stop_system_postfix    stop a system Postfix (/etc/postfix) that a package
#                          install started
#   ensure_sluice          needs the script's needs_sluice_binary (a predicate);
#                          when true: cargo build --release if SLUICE_BUILD=1,
#                          then die unless $SLUICE is executable; sets
#                          SLUICE_BENCH (the sluice-bench generator and sink)
#   generator_option "$@"  GENERATOR from the command line's -G NAME, else
#                          $GENERATOR, else sluice (checking NAME is the
#                          script's job)
#   make_workdir NAME      W=$(mktemp -d ${TMPDIR:-/tmp}/sluice-NAME.XXXXXX),
#                          mode 755; PF=$W/postfix, PF_ETC=$PF/etc
#   kill_wait PID [SIG] [SECS]   signal PID (default TERM), wait up to SECS
#                          (default 10), then SIGKILL; reaps it; no-op for ""
#   install_cleanup_traps  EXIT runs cleanup; INT exits 130, TERM exits 143
#   cg_create              a cpuacct cgroup for the system under test (CG;
#                          empty when the machine has none: CPU is then n/a)
#   cg_run CMD...          runs CMD inside it, so every process CMD forks is
#                          counted too (Postfix's daemons); cg_exec CMD & does
#                          the same in the background with $! = CMD's PID
#   cg_reset / cg_cpu_s    zero it / its CPU seconds since (or n/a)
#   cleanup                the EXIT trap: runs the script's cleanup_processes
#                          (stop whatever it started), then removes $W unless
#                          KEEP=1; exits with the script's exit status
#   listening PORT         true if something listens on TCP PORT
#   wait_free PORT SECS    until nothing listens on PORT (1 on timeout)
#   wait_listen PORT SECS [PID]  until something listens on PORT (1 on
#                          timeout, or as soon as PID, if given, has died)
#   prepare_postfix_instance   mkdir $PF_ETC and $PF/data (owned by postfix)
#   postfix_main_cf_instance MYHOSTNAME MYDOMAIN   prints the main.cf lines
#                          that keep the instance self-contained (queue and
#                          data under $PF; maillog_file $PF/maillog if
#                          POSTFIX_MAILLOG=1, else none) and on $HOST without
#                          DNS or hostname lookups
#   postfix_main_cf_loopback_smtpd   prints the main.cf lines: clients in
#                          127.0.0.0/8 may relay, no recipient restrictions,
#                          no header/body checks, no TLS either way
#   postfix_running        the instance in $PF_ETC is configured and running
#   stop_postfix_instance  (cleanup) stop the instance if it runs, quietly
#   postfix_check_start    `postfix -c $PF_ETC check`, then `start`; on failure
#                          prints the output and the tail of $PF/maillog to
#                          stderr, sets POSTFIX_FAILED=check|start, returns 1
#   postfix_stop_wait      stop the instance (output to
#                          $W/postfix-start.log), wait up to 10 s until down
#   write_postfix_master_cf PORT   $PF_ETC/master.cf: every service with
#                          chroot off, smtpd only on $HOST:PORT
#   append_results FILE LINE...   append "<ISO date> <commit>[+dirty] LINE"
#                          per line to FILE (creating its directory), log it

export PATH="$PATH:/usr/sbin:/sbin"
export LC_ALL=C

# ------------------------------------------------------------- basics ------
log() { printf '[%s %s] %s\n' "$BENCH_TAG" "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }
# float arithmetic: calc 'a/b' (awk expression)
calc() { awk "BEGIN { printf \"%s\", $1 }"; }
fmt() { awk -v v="$2" "BEGIN { printf \"$1\", v }"; }

require_root() {
    [ "$(id -u)" = 0 ] || die "run as root (Postfix's master must start as root; apt-get)"
}

# ------------------------------------------------------------- installs ----
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "$@" >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q "$@" >&2; }
}

stop_system_postfix() {
    # Nothing may listen on port 25 because of a bench script.
    if [ -f /etc/postfix/main.cf ] && postfix status >/dev/null 2>&1; then
        log "stopping the system Postfix instance started by the package"
        postfix stop >&2 || service postfix stop >&2 || true
    fi
}

ensure_sluice() {
    needs_sluice_binary || return 0
    if [ "$SLUICE_BUILD" = 1 ]; then
        log "cargo build --release"
        (cd "$REPO" && cargo build --release --workspace >&2)
    fi
    [ -x "$SLUICE" ] || die "$SLUICE not found (build it: cargo build --release --workspace)"
    # The generator and sink (crate sluice-bench): beside $SLUICE, else this
    # tree's build (an A/B run may point $SLUICE at an older build).
    if [ -z "${SLUICE_BENCH:-}" ]; then
        SLUICE_BENCH=$(dirname "$SLUICE")/sluice-bench
        [ -x "$SLUICE_BENCH" ] || SLUICE_BENCH=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice-bench
    fi
    [ -x "$SLUICE_BENCH" ] || die "$SLUICE_BENCH not found (build it: cargo build --release --workspace)"
}

generator_option() {
    GENERATOR=${GENERATOR:-sluice}
    local opt OPTIND=1
    while getopts "G:" opt; do
        case $opt in
        G) GENERATOR=$OPTARG ;;
        *) echo "usage: [ENV...] bash $0 [-G sluice|smtp-source]" >&2; exit 2 ;;
        esac
    done
}

# ------------------------------------------------- temp dir, processes -----
make_workdir() {
    W=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$1.XXXXXX")
    chmod 755 "$W"          # Postfix daemons run as user postfix below it
    PF="$W/postfix"         # Postfix instance: $PF/etc, $PF/spool, $PF/data
    PF_ETC="$PF/etc"
}

kill_wait() {  # kill_wait PID [SIGNAL] [seconds]: signal, wait, then SIGKILL
    local pid=$1 sig=${2:-TERM} t=${3:-10} i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < t * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}

CG=""
cg_create() {
    CG=/sys/fs/cgroup/cpuacct/sluice-bench-$$
    mkdir -p "$CG" 2>/dev/null && [ -w "$CG/cpuacct.usage" ] || CG=""
}
cg_run() {
    if [ -n "$CG" ]; then
        sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@"
    else
        "$@"
    fi
}
# cg_exec CMD...: as cg_run, but replaces the calling (sub)shell: for
# `cg_exec CMD &`, so that $! is CMD's own PID.
cg_exec() {
    if [ -n "$CG" ]; then
        exec sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@"
    else
        exec "$@"
    fi
}
cg_reset() { if [ -n "$CG" ]; then echo 0 >"$CG/cpuacct.usage"; fi; }
cg_cpu_s() {
    if [ -n "$CG" ]; then awk '{ printf "%.2f", $1 / 1e9 }' "$CG/cpuacct.usage"; else echo n/a; fi
}

# ------------------------------------------------- fresh file systems -----
# fresh_fs DIR: DIR becomes the mount point of a new, empty ext4 file
# system (a sparse image of $FS_GB GiB under $W, one inode per 4 KiB, inode
# tables left to the kernel: no zeroing in the background), replacing any
# mounted there before. A run then starts on a file system without a recent
# mass deletion: ext4 passes over inodes freed in the last 300 s when it
# allocates (recently_deleted), so a run right after one that deleted its
# Maildirs paid for that one (bench/results/local-order-2026-11-26.txt).
FRESH_MOUNTS=()
fresh_fs() {
    local dir=$1 img
    img="$W/fs-$(echo "$dir" | md5sum | cut -c1-8).img"
    if mountpoint -q "$dir" 2>/dev/null; then umount "$dir"; fi
    rm -rf "$dir" "$img"
    mkdir -p "$dir"
    truncate -s "${FS_GB:-16}G" "$img"
    mkfs.ext4 -q -F -i 4096 -E lazy_itable_init=1 "$img"
    mount -o loop,noinit_itable "$img" "$dir"
    FRESH_MOUNTS+=("$dir")
}
unmount_fresh() {
    local d
    for d in "${FRESH_MOUNTS[@]}"; do
        if mountpoint -q "$d" 2>/dev/null; then umount "$d"; fi
    done
    FRESH_MOUNTS=()
}

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    cleanup_processes
    unmount_fresh
    if [ -n "$CG" ]; then rmdir "$CG" 2>/dev/null; fi
    if [ "$KEEP" = 1 ]; then
        log "kept temp dir $W"
    else
        [ "${ANNOUNCE_RM:-0}" = 1 ] && log "removing temp dir $W"
        rm -rf "$W"
    fi
    exit "$rc"
}

install_cleanup_traps() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# ---------------------------------------------------------------- ports ----
listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

wait_free() {  # wait_free PORT SECONDS: until nothing listens on PORT
    local port=$1 t=$2 i
    for ((i = 0; i < t * 10; i++)); do
        listening "$port" || return 0
        sleep 0.1
    done
    return 1
}

wait_listen() {  # wait_listen PORT SECONDS [PID that must stay alive]
    local port=$1 t=$2 pid=${3:-} i
    for ((i = 0; i < t * 10; i++)); do
        listening "$port" && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
        sleep 0.1
    done
    return 1
}

# -------------------------------------------------------------- postfix ----
# An isolated instance: config in $PF/etc, queue in $PF/spool, data in
# $PF/data. Nothing in /etc/postfix is touched; `postfix -c DIR` as root needs
# no alternate_config_directories entry (that is only checked by the set-gid
# tools postdrop/postqueue, which the benchmarks do not use).
prepare_postfix_instance() {
    mkdir -p "$PF_ETC" "$PF/data"
    chown postfix "$PF/data"
}

postfix_main_cf_instance() {
    local maillog=""
    [ "$POSTFIX_MAILLOG" = 1 ] && maillog="$PF/maillog"
    cat <<EOF
compatibility_level = 3.6
queue_directory = $PF/spool
data_directory = $PF/data
mail_owner = postfix
setgid_group = postdrop
maillog_file = $maillog
maillog_file_prefixes = $PF

# No DNS, no traffic off the machine, no hostname lookups.
myhostname = $1
mydomain = $2
myorigin = \$myhostname
inet_interfaces = $HOST
inet_protocols = ipv4
smtp_dns_support_level = disabled
lmtp_dns_support_level = disabled
smtp_host_lookup = native
smtpd_peername_lookup = no
EOF
}

postfix_main_cf_loopback_smtpd() {
    cat <<EOF
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
smtpd_recipient_restrictions =
receive_override_options = no_header_body_checks
smtpd_tls_security_level = none
smtp_tls_security_level = none
EOF
}

postfix_running() {
    [ -f "$PF_ETC/main.cf" ] && postfix -c "$PF_ETC" status >/dev/null 2>&1
}

stop_postfix_instance() {
    if postfix_running; then
        log "stopping the Postfix bench instance"
        postfix -c "$PF_ETC" stop >/dev/null 2>&1
    fi
}

postfix_check_start() {
    local step
    POSTFIX_FAILED=""
    # `postfix check` creates the queue subdirectories with the right owners
    # and modes (post-install create-missing) and reports config problems.
    # Output of each step in $W/postfix-<step>.log.
    for step in check start; do
        # Started inside the CPU cgroup, when there is one (cg_run).
        cg_run postfix -c "$PF_ETC" "$step" >"$W/postfix-$step.log" 2>&1 || {
            # postfix writes its errors to stderr only when that is a tty;
            # otherwise to maillog_file (or to syslog, absent here).
            cat "$W/postfix-$step.log" >&2; tail -20 "$PF/maillog" >&2 2>/dev/null || true
            POSTFIX_FAILED=$step
            return 1
        }
    done
}

postfix_stop_wait() {
    local i
    if postfix_running; then
        postfix -c "$PF_ETC" stop >>"$W/postfix-start.log" 2>&1 || true
    fi
    for ((i = 0; i < 100; i++)); do postfix_running || break; sleep 0.1; done
}

write_postfix_master_cf() {
    cat >"$PF_ETC/master.cf" <<EOF
# service type  private unpriv  chroot  wakeup  maxproc command + args
$HOST:$1 inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
virtual   unix  -       n       n       -       -       virtual
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
postlog   unix-dgram n  -       n       -       1       postlogd
EOF
}

# -------------------------------------------------------------- results ----
append_results() {
    local out=$1 stamp commit l
    shift
    mkdir -p "$(dirname "$out")"
    stamp=$(date -Iseconds)
    commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo none)
    if [ "$commit" != none ] && [ -n "$(git -C "$REPO" status --porcelain -- . ':!bench/results' 2>/dev/null)" ]; then
        commit="$commit+dirty"
    fi
    for l in "$@"; do
        echo "$stamp $commit $l" >>"$out"
    done
    log "appended $# RESULT lines to $out"
}

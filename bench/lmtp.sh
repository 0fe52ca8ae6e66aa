#!/usr/bin/env bash
# bench/lmtp.sh — workload F (LMTP hop) of /work/shared/BENCH.md.
#
# What it measures
#   Postfix's smtp-source -> MTA under test on 127.0.0.1:55125 -> a real
#   Dovecot LMTP server (Debian's dovecot-lmtpd) on a Unix socket, writing
#   Maildirs. One local domain (local.test), recipients user1..user5 (one
#   per smtp-source process), 1 message per session, SIZE bytes of payload.
#   Sluice delivers with `local.transport = "lmtp:unix:…"`, Postfix with
#   `virtual_transport = lmtp:unix:…`; both at 20 concurrent LMTP sessions
#   (Postfix's default_destination_concurrency_limit, Sluice's
#   default_concurrency). The same Dovecot configuration, fresh for every
#   run. Time = from the generator's start until Dovecot holds all N
#   messages (files in the Maildirs' new/). Fsync on everywhere (Sluice
#   syncs before 250, Postfix by default, Dovecot's mail_fsync=optimized).
#   CPU: the MTA (every process it forks) and Dovecot (master, auth, lmtp
#   processes) each in a cpuacct cgroup of its own, so Dovecot's cost per
#   message, the same program for both, shows apart from the MTA's.
#
# How to run (as root; apt-installs postfix, dovecot-lmtpd if missing):
#   bash bench/lmtp.sh
#   N=5000 SESSIONS_LIST="50" SYSTEMS=sluice SLUICE_BUILD=0 bash bench/lmtp.sh
#
# Environment
#   N=20000               messages per run
#   SIZE=1024             smtp-source payload (-l), bytes
#   SESSIONS_LIST="50 250"  concurrent generator sessions, one run per value
#   SYSTEMS="sluice postfix"
#   RUN_TIMEOUT=900       seconds one run may take before it is FAILED
#   SLUICE=target/release/sluice   SLUICE_BUILD=1: cargo build --release first
#   KEEP=0                1: keep the temp dir
#   RESULTS_FILE=bench/results/lmtp-YYYY-MM-DD.txt
#
# Output: progress on stderr; last, one line per system and session count:
#   RESULT system=… workload=F hop=lmtp n=… size=… sessions=… seconds=…
#     msgs_per_s=… ratio_vs_postfix=… accepted_per_s=… drain_s=…
#     cpu_ms_per_msg=… dovecot_cpu_ms_per_msg=…
#   (appended, dated, to RESULTS_FILE). Exit 1 if a run failed.

set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

BENCH_TAG=lmtp
REPO=$(cd "$(dirname "$0")/.." && pwd)
HOST=127.0.0.1
PORT=55125
N=${N:-20000}
SIZE=${SIZE:-1024}
SESSIONS_LIST=${SESSIONS_LIST:-"50 250"}
SYSTEMS=${SYSTEMS:-"sluice postfix"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
POSTFIX_MAILLOG=${POSTFIX_MAILLOG:-1}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/lmtp-$(date +%F).txt}

require_root
now() { date +%s.%N; }
needs_sluice_binary() { [[ " $SYSTEMS " == *" sluice "* ]]; }
command -v smtp-source >/dev/null && command -v postfix >/dev/null \
    || { apt_install postfix; stop_system_postfix; }
[ -x /usr/lib/dovecot/lmtp ] || apt_install dovecot-core dovecot-lmtpd
if [ -x /etc/init.d/dovecot ]; then /etc/init.d/dovecot stop >/dev/null 2>&1 || true; fi
ensure_sluice
listening "$PORT" && die "something listens on $HOST:$PORT already"

make_workdir lmtp
DC="$W/dovecot"
SOCK="$DC/lmtp"
DOVECOT_PID=""
MTA_PID=""
GEN_PIDS=()
cleanup_processes() {
    local p
    for p in "${GEN_PIDS[@]}"; do kill_wait "$p" TERM 5; done
    kill_wait "$MTA_PID" TERM 30
    stop_postfix_instance
    kill_wait "$DOVECOT_PID" TERM 10
    [ -n "${DCG:-}" ] && rmdir "$DCG" 2>/dev/null
    return 0
}
install_cleanup_traps
cg_create                                   # CG: the MTA under test
DCG=/sys/fs/cgroup/cpuacct/sluice-bench-dovecot-$$   # Dovecot's own
mkdir -p "$DCG" 2>/dev/null && [ -w "$DCG/cpuacct.usage" ] || DCG=""
dcg_cpu_s() { if [ -n "$DCG" ]; then awk '{ printf "%.2f", $1 / 1e9 }' "$DCG/cpuacct.usage"; else echo n/a; fi; }
per_msg_ms() { [ "$1" = n/a ] && echo n/a || fmt %.3f "$(calc "$1 * 1000 / $N")"; }

# ------------------------------------------------------------- dovecot ----
# start_dovecot: a fresh Dovecot, LMTP only, users user1..user5@local.test
# in a passwd-file, Maildirs under $DC/mail owned by nobody.
start_dovecot() {
    kill_wait "$DOVECOT_PID" TERM 10
    rm -rf "$DC"
    mkdir -p "$DC/run" "$DC/state" "$DC/mail"
    chmod 755 "$DC"
    local uid gid i
    uid=$(id -u nobody); gid=$(getent group nogroup | cut -d: -f3)
    chown "$uid:$gid" "$DC/mail"
    for i in 1 2 3 4 5; do
        echo "user$i@local.test:{PLAIN}x:$uid:$gid::$DC/mail/user$i::"
    done >"$DC/users"
    cat >"$DC/dovecot.conf" <<EOF
base_dir = $DC/run
state_dir = $DC/state
log_path = $DC/dovecot.log
protocols = lmtp
ssl = no
default_internal_user = nobody
default_internal_group = nogroup
default_login_user = nobody
first_valid_uid = 1
passdb {
  driver = passwd-file
  args = $DC/users
}
userdb {
  driver = passwd-file
  args = $DC/users
}
mail_location = maildir:~/Maildir
service lmtp {
  unix_listener $SOCK {
    mode = 0666
  }
}
service anvil {
  chroot =
}
EOF
    [ -n "$DCG" ] && echo 0 >"$DCG/cpuacct.usage"
    (
        [ -n "$DCG" ] && echo $BASHPID >"$DCG/cgroup.procs"
        exec /usr/sbin/dovecot -F -c "$DC/dovecot.conf"
    ) 2>"$W/dovecot.err" &
    DOVECOT_PID=$!
    for i in $(seq 1 300); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$DOVECOT_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$W/dovecot.err" >&2
    die "dovecot did not start (see $DC/dovecot.log)"
}

delivered() {
    local n=0 i
    for i in 1 2 3 4 5; do
        [ -d "$DC/mail/user$i/Maildir/new" ] || continue
        n=$((n + $(ls -f "$DC/mail/user$i/Maildir/new" | wc -l) - 2))
    done
    echo "$n"
}

# ----------------------------------------------------------------- MTAs ----
start_sluice() {
    rm -rf "$W/sluice-var"
    mkdir -p "$W/sluice-var"
    cat >"$W/sluice.toml" <<EOF
hostname = "sluice.bench"
data_dir = "$W/sluice-var"
run_as_root = true

[smtpd]
listen = ["$HOST:$PORT"]
max_sessions = 2000

[delivery]
default_concurrency = 20

[local]
domains = ["local.test"]
transport = "lmtp:unix:$SOCK"
EOF
    cg_exec "$SLUICE" serve --config "$W/sluice.toml" >"$W/sluice.log" 2>&1 &
    MTA_PID=$!
    wait_listen "$PORT" 30 "$MTA_PID" || { tail -20 "$W/sluice.log" >&2; die "sluice did not start"; }
}

start_postfix() {
    rm -rf "$PF"
    prepare_postfix_instance
    {
        postfix_main_cf_instance postfix.bench postfix.bench
        postfix_main_cf_loopback_smtpd
        cat <<EOF
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
virtual_mailbox_domains = local.test
virtual_transport = lmtp:unix:$SOCK
default_process_limit = 300
default_destination_concurrency_limit = 20
smtpd_client_connection_count_limit = 500
smtpd_client_event_limit_exceptions = 127.0.0.0/8
EOF
    } >"$PF_ETC/main.cf"
    write_postfix_master_cf "$PORT"
    mkdir -p "$PF/spool"
    postfix_check_start || die "postfix -c $PF_ETC $POSTFIX_FAILED failed"
    wait_listen "$PORT" 30 || die "postfix did not come up on $HOST:$PORT"
}

stop_mta() {
    case $1 in
    sluice) kill_wait "$MTA_PID" TERM 30; MTA_PID="" ;;
    postfix) postfix_stop_wait ;;
    esac
    wait_free "$PORT" 30 || die "port $PORT still busy"
}

# --------------------------------------------------------------- one run ----
# run SYSTEM SESSIONS: sets R_LINE (the RESULT fields after system=).
declare -A RATE
run() {
    local sys=$1 sessions=$2 i per t0 t1 t2 deadline got rc=0 failed=""
    start_dovecot
    cg_reset
    "start_$sys"
    log "=== $sys, $sessions sessions, $N x ${SIZE} B to Dovecot over LMTP"
    per=$((N / 5))
    t0=$(now)
    GEN_PIDS=()
    for i in 1 2 3 4 5; do
        timeout -k 10 "$RUN_TIMEOUT" smtp-source -s $((sessions / 5)) -m "$per" -l "$SIZE" \
            -M generator.bench -f sender@generator.bench -t "user$i@local.test" \
            "$HOST:$PORT" >"$W/gen.$i.out" 2>&1 &
        GEN_PIDS+=($!)
    done
    for i in "${!GEN_PIDS[@]}"; do wait "${GEN_PIDS[$i]}" || rc=$?; done
    GEN_PIDS=()
    t1=$(now)
    [ "$rc" = 0 ] || failed="generator_rc_$rc"
    deadline=$(( $(date +%s) + RUN_TIMEOUT ))
    while got=$(delivered); [ "$got" -lt $((per * 5)) ] && [ "$(date +%s)" -lt "$deadline" ]; do
        log "delivered $got of $((per * 5))"
        sleep 0.5
    done
    t2=$(now)
    [ "$got" -ge $((per * 5)) ] || failed=${failed:-delivered_$got}
    local cpu dcpu
    cpu=$(cg_cpu_s); dcpu=$(dcg_cpu_s)
    stop_mta "$sys"
    kill_wait "$DOVECOT_PID" TERM 10; DOVECOT_PID=""
    local n=$((per * 5))
    if [ -n "$failed" ]; then
        R_LINE="workload=F hop=lmtp n=$n size=$SIZE sessions=$sessions seconds=FAILED msgs_per_s=FAILED failed=$failed"
        return 1
    fi
    RATE[$sys.$sessions]=$(fmt %.1f "$(calc "$n / ($t2 - $t0)")")
    R_LINE="workload=F hop=lmtp n=$n size=$SIZE sessions=$sessions seconds=$(fmt %.2f "$(calc "$t2 - $t0")") msgs_per_s=${RATE[$sys.$sessions]} RATIO accepted_per_s=$(fmt %.1f "$(calc "$n / ($t1 - $t0)")") drain_s=$(fmt %.2f "$(calc "$t2 - $t1")") cpu_s=$cpu cpu_ms_per_msg=$(per_msg_ms "$cpu") dovecot_cpu_ms_per_msg=$(per_msg_ms "$dcpu")"
}

log "workload F (LMTP to Dovecot): systems=[$SYSTEMS] sessions=[$SESSIONS_LIST] N=$N size=$SIZE tmp=$W"
declare -A LINE
status=0
for sessions in $SESSIONS_LIST; do
    for sys in $SYSTEMS; do
        run "$sys" "$sessions" || status=1
        LINE[$sys.$sessions]=$R_LINE
    done
done
lines=()
for sessions in $SESSIONS_LIST; do
    for sys in $SYSTEMS; do
        ratio=n/a
        base=${RATE[postfix.$sessions]:-}
        [ -n "$base" ] && [ -n "${RATE[$sys.$sessions]:-}" ] && ratio=$(fmt %.2f "$(calc "${RATE[$sys.$sessions]} / $base")")
        lines+=("RESULT system=$sys ${LINE[$sys.$sessions]/RATIO/ratio_vs_postfix=$ratio}")
    done
done
printf '%s\n' "${lines[@]}"
append_results "$RESULTS_FILE" "${lines[@]}"
exit $status

#!/usr/bin/env bash
# bench/milter.sh — workload F (a content filter on the path) of
# /work/shared/BENCH.md, with a real rspamd as the milter.
#
# What it measures
#   Postfix's smtp-source -> MTA under test on 127.0.0.1:55125, which asks a
#   real rspamd (Debian's package, its proxy worker in milter mode, scanning
#   itself, on a Unix socket) about every message -> the sink
#   (`sluice-bench sink`) on 127.0.0.1:55225. Sluice with
#   `[smtpd] milters = ["unix:…"]`, Postfix with `smtpd_milters = unix:…`;
#   both relay to the sink as their relayhost. The same rspamd
#   configuration, fresh for every run: no module that asks the Internet
#   (DNS goes to a port where nothing answers), test patterns on. Time =
#   from the generator's start until the sink holds all N messages. Fsync
#   on (Sluice syncs before 250, Postfix by default).
#   CPU: the MTA (every process it forks) and rspamd (main and workers)
#   each in a cpuacct cgroup of its own, so rspamd's cost per message,
#   the same program for both, shows apart from the MTA's.
#
# How to run (as root; apt-installs postfix, rspamd if missing):
#   bash bench/milter.sh
#   N=5000 SESSIONS_LIST="50" SYSTEMS=sluice SLUICE_BUILD=0 bash bench/milter.sh
#
# Environment
#   N=10000               messages per run
#   SIZE=1024             smtp-source payload (-l), bytes
#   SESSIONS_LIST="50 250"  concurrent generator sessions, one run per value
#   SYSTEMS="sluice postfix"
#   RSPAMD_WORKERS=2      rspamd proxy processes (each scans itself)
#   RUN_TIMEOUT=900       seconds one run may take before it is FAILED
#   SLUICE=target/release/sluice   SLUICE_BUILD=1: cargo build --release first
#   KEEP=0                1: keep the temp dir
#   RESULTS_FILE=bench/results/milter-YYYY-MM-DD.txt
#
# Output: progress on stderr; last, one line per system and session count:
#   RESULT system=… workload=F hop=milter-rspamd n=… size=… sessions=…
#     seconds=… msgs_per_s=… ratio_vs_postfix=… accepted_per_s=… drain_s=…
#     cpu_ms_per_msg=… rspamd_cpu_ms_per_msg=…
#   (appended, dated, to RESULTS_FILE). Exit 1 if a run failed.

set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

BENCH_TAG=milter
REPO=$(cd "$(dirname "$0")/.." && pwd)
HOST=127.0.0.1
PORT=55125
SINK_PORT=55225
N=${N:-10000}
SIZE=${SIZE:-1024}
SESSIONS_LIST=${SESSIONS_LIST:-"50 250"}
SYSTEMS=${SYSTEMS:-"sluice postfix"}
RSPAMD_WORKERS=${RSPAMD_WORKERS:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
POSTFIX_MAILLOG=${POSTFIX_MAILLOG:-1}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/milter-$(date +%F).txt}

require_root
now() { date +%s.%N; }
needs_sluice_binary() { true; }   # the sink is sluice-bench's
command -v smtp-source >/dev/null && command -v postfix >/dev/null \
    || { apt_install postfix; stop_system_postfix; }
[ -x /usr/bin/rspamd ] || apt_install rspamd
if [ -x /etc/init.d/rspamd ]; then /etc/init.d/rspamd stop >/dev/null 2>&1 || true; fi
ensure_sluice
for p in "$PORT" "$SINK_PORT"; do
    listening "$p" && die "something listens on $HOST:$p already"
done

make_workdir milter
RS="$W/rspamd"
SOCK="$RS/milter.sock"
RSPAMD_PID=""
SINK_PID=""
MTA_PID=""
GEN_PIDS=()
cleanup_processes() {
    local p
    for p in "${GEN_PIDS[@]}"; do kill_wait "$p" TERM 5; done
    kill_wait "$MTA_PID" TERM 30
    stop_postfix_instance
    kill_wait "$SINK_PID" TERM 5
    kill_wait "$RSPAMD_PID" TERM 10
    [ -n "${RCG:-}" ] && rmdir "$RCG" 2>/dev/null
    return 0
}
install_cleanup_traps
cg_create                                   # CG: the MTA under test
RCG=/sys/fs/cgroup/cpuacct/sluice-bench-rspamd-$$   # rspamd's own
mkdir -p "$RCG" 2>/dev/null && [ -w "$RCG/cpuacct.usage" ] || RCG=""
rcg_cpu_s() { if [ -n "$RCG" ]; then awk '{ printf "%.2f", $1 / 1e9 }' "$RCG/cpuacct.usage"; else echo n/a; fi; }
per_msg_ms() { [ "$1" = n/a ] && echo n/a || fmt %.3f "$(calc "$1 * 1000 / $N")"; }

# -------------------------------------------------------------- rspamd ----
# start_rspamd: a fresh rspamd, proxy workers in milter mode on $SOCK,
# scanning themselves; nothing that asks the Internet.
start_rspamd() {
    kill_wait "$RSPAMD_PID" TERM 10
    rm -rf "$RS"
    mkdir -p "$RS/db"
    printf 'com\nnet\norg\ntest\nbench\n' >"$RS/tld.dat"
    cat >"$RS/rspamd.conf" <<CONF
options {
  pidfile = "$RS/rspamd.pid";
  dbdir = "$RS/db";
  enable_test_patterns = true;
  url_tld = "$RS/tld.dat";
  dns { nameserver = ["127.0.0.1:9"]; timeout = 0.2s; retransmits = 1; }
}
logging { type = "file"; filename = "$RS/rspamd.log"; level = "error"; }
actions { reject = 15; add_header = 6; greylist = 4; }
worker "rspamd_proxy" {
  bind_socket = "$SOCK mode=0666";
  milter = yes;
  timeout = 120s;
  count = $RSPAMD_WORKERS;
  upstream "local" { default = yes; self_scan = yes; }
}
CONF
    [ -n "$RCG" ] && echo 0 >"$RCG/cpuacct.usage"
    (
        [ -n "$RCG" ] && echo $BASHPID >"$RCG/cgroup.procs"
        exec /usr/bin/rspamd -f -i -c "$RS/rspamd.conf"
    ) 2>"$W/rspamd.err" &
    RSPAMD_PID=$!
    local i
    for i in $(seq 1 300); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$RSPAMD_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$W/rspamd.err" >&2
    die "rspamd did not start (see $RS/rspamd.log)"
}

# start_sink N: the sink exits once it holds N messages; its stdout ends
# with "SINK messages=N bytes=B first=<unix secs> last=<unix secs>".
start_sink() {
    rm -f "$W/sink.out" "$W/sink.err"
    "$SLUICE_BENCH" sink --listen "$HOST:$SINK_PORT" --exit-after "$1" \
        --max-seconds "$RUN_TIMEOUT" >"$W/sink.out" 2>"$W/sink.err" &
    SINK_PID=$!
    wait_listen "$SINK_PORT" 15 "$SINK_PID" || die "sink did not come up on $HOST:$SINK_PORT"
}

# ----------------------------------------------------------------- MTAs ----
start_sluice() {
    rm -rf "$W/sluice-var"
    mkdir -p "$W/sluice-var"
    cat >"$W/sluice.toml" <<CONF
hostname = "sluice.bench"
data_dir = "$W/sluice-var"
run_as_root = true

[smtpd]
listen = ["$HOST:$PORT"]
max_sessions = 2000
milters = ["unix:$SOCK"]

[delivery]
relayhost = "smtp:[$HOST]:$SINK_PORT"
CONF
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
        cat <<CONF
mydestination =
local_recipient_maps =
relayhost = [$HOST]:$SINK_PORT
smtpd_milters = unix:$SOCK
milter_default_action = tempfail
default_process_limit = 300
smtpd_client_connection_count_limit = 500
smtpd_client_event_limit_exceptions = 127.0.0.0/8
CONF
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
    start_rspamd
    start_sink "$N"
    cg_reset
    "start_$sys"
    log "=== $sys, $sessions sessions, $N x ${SIZE} B through rspamd (milter) to the sink"
    per=$((N / 5))
    t0=$(now)
    GEN_PIDS=()
    for i in 1 2 3 4 5; do
        timeout -k 10 "$RUN_TIMEOUT" smtp-source -s $((sessions / 5)) -m "$per" -l "$SIZE" \
            -M generator.bench -f sender@generator.bench -t "rcpt$i@dest$i.bench" \
            "$HOST:$PORT" >"$W/gen.$i.out" 2>&1 &
        GEN_PIDS+=($!)
    done
    for i in "${!GEN_PIDS[@]}"; do wait "${GEN_PIDS[$i]}" || rc=$?; done
    GEN_PIDS=()
    t1=$(now)
    [ "$rc" = 0 ] || failed="generator_rc_$rc"
    wait "$SINK_PID" || true
    SINK_PID=""
    got=$(grep -o 'SINK messages=[0-9]*' "$W/sink.out" | tail -1 | cut -d= -f2)
    got=${got:-0}
    t2=$(grep -o 'last=[0-9.]*' "$W/sink.out" | tail -1 | cut -d= -f2)
    t2=${t2:-$(now)}
    [ "$got" -ge $((per * 5)) ] || failed=${failed:-delivered_$got}
    local cpu dcpu
    cpu=$(cg_cpu_s); dcpu=$(rcg_cpu_s)
    stop_mta "$sys"
    kill_wait "$RSPAMD_PID" TERM 10; RSPAMD_PID=""
    local n=$((per * 5))
    if [ -n "$failed" ]; then
        R_LINE="workload=F hop=milter-rspamd n=$n size=$SIZE sessions=$sessions seconds=FAILED msgs_per_s=FAILED failed=$failed"
        return 1
    fi
    RATE[$sys.$sessions]=$(fmt %.1f "$(calc "$n / ($t2 - $t0)")")
    R_LINE="workload=F hop=milter-rspamd n=$n size=$SIZE sessions=$sessions seconds=$(fmt %.2f "$(calc "$t2 - $t0")") msgs_per_s=${RATE[$sys.$sessions]} RATIO accepted_per_s=$(fmt %.1f "$(calc "$n / ($t1 - $t0)")") drain_s=$(fmt %.2f "$(calc "$t2 - $t1")") cpu_s=$cpu cpu_ms_per_msg=$(per_msg_ms "$cpu") rspamd_cpu_ms_per_msg=$(per_msg_ms "$dcpu")"
}

log "workload F (rspamd milter, then relay): systems=[$SYSTEMS] sessions=[$SESSIONS_LIST] N=$N size=$SIZE tmp=$W"
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

#!/usr/bin/env bash
# bench/many.sh — workload M (many destinations) of issue 8.
#
# What it measures
#   1,000 domains d1..d1000.many.test in a real nsd (127.0.0.1:53), each with
#   one MX. Good domains point at 20 mail hosts mx1..mx20 (127.0.2.1..20:25,
#   one `sluice-bench sink` process listening on all of them); in the "bad" mode
#   5 % of the domains (i mod 100 in 1..5) point at 5 tarpits (127.0.4.1..5:25:
#   accept, then answer every command after TARPIT_MS) and 2 % (i mod 100 in
#   6..7) at 2 dead hosts (127.0.3.1..2:25: listen, never accept, so a
#   connection hangs). In the "clean" mode every domain points at a good host.
#   The generator (`sluice-bench bench`, SESSIONS sessions, one message per
#   connection, 400 B) sends N messages, domain after domain in turn, so
#   each domain gets exactly N/1000.
#   Per system and mode: the time from the generator's start until the last
#   good-domain message reached a sink; the good-domain rate; that rate as a
#   share of the same system's clean rate; connections opened to the good
#   hosts per message delivered; CPU per message (cpuacct cgroup); and a
#   chart of good-domain deliveries per second.
#   Both MTAs use their default per-destination concurrency (20, starting at
#   5) and timeouts. Postfix gets default_process_limit = 300 (its default,
#   100, would be a straw man) and resolves through the same nsd: it runs in a
#   private mount namespace whose /etc/resolv.conf says 127.0.0.1. Nothing
#   leaves 127.0.0.0/8; every run is bounded by RUN_TIMEOUT.
#
# How to run (as root; installs postfix and nsd when missing):
#   bash bench/many.sh
#   N=20000 SYSTEMS=sluice MODES=bad bash bench/many.sh
#
# Environment
#   N=100000 SESSIONS=100 SYSTEMS="sluice postfix" MODES="clean bad"
#   TARPIT_MS=5000 RUN_TIMEOUT=1200 SLUICE_BUILD=1 KEEP=0
#   SLUICE_SERVE=$SLUICE (A/B against an older build)
#   RESULTS_FILE=bench/results/many-YYYY-MM-DD.txt
#
# Output: RESULT lines (appended, dated, to RESULTS_FILE):
#   RESULT system=S workload=M mode=clean|bad n=N good=G seconds=T
#     good_msgs_per_s=R share_of_clean=X ratio_vs_postfix=Y
#     conns_per_msg=C tarpit_delivered=K cpu_ms_per_msg=M
#   and an SVG chart next to it (many-YYYY-MM-DD.svg).

set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

BENCH_TAG=many
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-100000}
SESSIONS=${SESSIONS:-100}
SYSTEMS=${SYSTEMS:-"sluice postfix"}
MODES=${MODES:-"clean bad"}
TARPIT_MS=${TARPIT_MS:-5000}
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SLUICE_SERVE=${SLUICE_SERVE:-$SLUICE}
SLUICE_BUILD=${SLUICE_BUILD:-1}
POSTFIX_MAILLOG=${POSTFIX_MAILLOG:-1}
KEEP=${KEEP:-0}
DAY=$(date +%F)
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/many-$DAY.txt}
DOMAINS=1000
HOSTS=20
HOST=127.0.0.1
RELAY_PORT=55125

now() { date +%s.%N; }
needs_sluice_binary() { true; }
require_root
[ $((N % DOMAINS)) = 0 ] || die "N must be a multiple of $DOMAINS"

# Domain i's kind in the bad mode.
kind() {
    local m=$(($1 % 100))
    if [ "$m" -ge 1 ] && [ "$m" -le 5 ]; then echo tarpit; elif [ "$m" -ge 6 ] && [ "$m" -le 7 ]; then echo dead; else echo good; fi
}
good_count() {  # good messages in MODE $1
    local i g=0
    [ "$1" = clean ] && { echo "$N"; return; }
    for ((i = 1; i <= DOMAINS; i++)); do [ "$(kind $i)" = good ] && g=$((g + 1)); done
    echo $((g * N / DOMAINS))
}

ensure_packages() {
    local pkgs=()
    command -v postfix >/dev/null 2>&1 || pkgs+=(postfix)
    [ -x /usr/sbin/nsd ] || pkgs+=(nsd)
    command -v ss >/dev/null 2>&1 || pkgs+=(iproute2)
    [ ${#pkgs[@]} -eq 0 ] && return 0
    echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
    apt_install "${pkgs[@]}"
    [[ " ${pkgs[*]} " == *" postfix "* ]] && stop_system_postfix
    # Debian starts nsd as a service on port 53: stop it, we run our own.
    if [[ " ${pkgs[*]} " == *" nsd "* ]]; then service nsd stop >/dev/null 2>&1 || true; fi
}

make_workdir many
SINK_PID=""; NSD_PID=""; SLUICE_PID=""
cleanup_processes() {
    kill_wait "$SLUICE_PID" TERM 30
    stop_postfix_instance
    kill_wait "$SINK_PID" TERM 5
    kill_wait "$NSD_PID" TERM 5
}
install_cleanup_traps

# ------------------------------------------------------------------ DNS ----
write_zone() {  # write_zone MODE
    local i k h
    {
        printf '$ORIGIN many.test.\n$TTL 3600\n'
        printf '@ IN SOA ns.many.test. hostmaster.many.test. ( %s 3600 600 86400 3600 )\n' "$(date +%s)"
        printf '@ IN NS ns.many.test.\nns IN A 127.0.0.1\n'
        for ((h = 1; h <= HOSTS; h++)); do printf 'mx%d IN A 127.0.2.%d\n' $h $h; done
        for h in 1 2 3 4 5; do printf 'tarpit%d IN A 127.0.4.%d\n' $h $h; done
        printf 'dead1 IN A 127.0.3.1\ndead2 IN A 127.0.3.2\n'
        for ((i = 1; i <= DOMAINS; i++)); do
            k=good; [ "$1" = bad ] && k=$(kind $i)
            case $k in
            good) printf 'd%d IN MX 10 mx%d\n' $i $((i % HOSTS + 1)) ;;
            tarpit) printf 'd%d IN MX 10 tarpit%d\n' $i $((i % 5 + 1)) ;;
            dead) printf 'd%d IN MX 10 dead%d\n' $i $((i % 2 + 1)) ;;
            esac
        done
    } >"$W/nsd/many.test.zone"
}

# True when nsd answers an MX query for d1.many.test (no dig on the machine).
dns_answers() {
    python3 - <<'PY' 2>/dev/null
import socket, struct, sys
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p for p in b"d1.many.test".split(b".")) + b"\0"
q += struct.pack(">HH", 15, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
s.sendto(q, ("127.0.0.1", 53))
r = s.recv(512)
sys.exit(0 if struct.unpack(">H", r[6:8])[0] > 0 else 1)
PY
}

start_nsd() {  # start_nsd MODE
    kill_wait "$NSD_PID" TERM 5
    mkdir -p "$W/nsd"
    write_zone "$1"
    cat >"$W/nsd/nsd.conf" <<EOF
server:
  ip-address: 127.0.0.1@53
  username: ""
  chroot: ""
  zonesdir: "$W/nsd"
  zonelistfile: "$W/nsd/zone.list"
  database: ""
  pidfile: "$W/nsd/nsd.pid"
  xfrdfile: "$W/nsd/xfrd.state"
  logfile: "$W/nsd/nsd.log"
  server-count: 1
remote-control:
  control-enable: no
zone:
  name: "many.test"
  zonefile: "$W/nsd/many.test.zone"
EOF
    /usr/sbin/nsd -d -c "$W/nsd/nsd.conf" 2>"$W/nsd/nsd.err" &
    NSD_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        dns_answers && return 0
        kill -0 "$NSD_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$W/nsd/nsd.err" >&2
    die "nsd did not answer for many.test on 127.0.0.1:53"
}

# ----------------------------------------------------------------- sink ----
start_sink() {  # start_sink GOOD
    local args=(--listen 127.0.2.1:25) h
    for ((h = 2; h <= HOSTS; h++)); do args+=(--also-listen "127.0.2.$h:25"); done
    for h in 1 2 3 4 5; do args+=(--tarpit "127.0.4.$h:25"); done
    args+=(--blackhole 127.0.3.1:25 --blackhole 127.0.3.2:25 --tarpit-ms "$TARPIT_MS")
    "$SLUICE_BENCH" sink "${args[@]}" --exit-after "$1" --max-seconds "$RUN_TIMEOUT" \
        >"$W/sink.out" 2>"$W/sink.err" &
    SINK_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        ss -Hltn 'sport = :25' | grep -q '127.0.3.2:25' && return 0
        sleep 0.1
    done
    die "sink did not come up"
}

# ---------------------------------------------------------------- MTAs -----
start_sluice() {
    rm -rf "$W/sluice-var"; mkdir -p "$W/sluice-var"
    cat >"$W/sluice.toml" <<EOF
hostname = "sluice.bench"
data_dir = "$W/sluice-var"
run_as_root = true
[smtpd]
listen = ["$HOST:$RELAY_PORT"]
max_sessions = 2000
[dns]
nameservers = ["127.0.0.1:53"]
EOF
    (cg_exec "$SLUICE_SERVE" serve --config "$W/sluice.toml" >"$W/sluice.log" 2>&1) &
    SLUICE_PID=$!
    wait_listen "$RELAY_PORT" 30 "$SLUICE_PID" || { tail "$W/sluice.log" >&2; die "sluice did not start"; }
}

setup_postfix() {
    prepare_postfix_instance
    {
        postfix_main_cf_instance postfix.bench.example bench.example
        cat <<EOF
mydestination =
local_recipient_maps =
relay_domains =
alias_maps =
alias_database =
append_dot_mydomain = no
EOF
        postfix_main_cf_loopback_smtpd
        cat <<EOF
# Deliver by MX, through the nsd of this benchmark (see start_postfix).
smtp_dns_support_level = enabled
smtp_host_lookup = dns
default_process_limit = 300
smtpd_client_connection_count_limit = 500
smtpd_client_event_limit_exceptions = 127.0.0.0/8
EOF
    } >"$PF_ETC/main.cf"
    write_postfix_master_cf "$RELAY_PORT"
    echo "nameserver 127.0.0.1" >"$W/resolv.conf"
}

start_postfix() {
    rm -rf "$PF/spool" "$PF/maillog"; mkdir -p "$PF/spool"
    cg_run postfix -c "$PF_ETC" check >"$W/postfix-check.log" 2>&1 || die "postfix check failed"
    # A private mount namespace: Postfix (and every daemon it forks) sees a
    # resolv.conf that names the benchmark's nsd; the machine's is untouched.
    cg_run unshare -m --propagation private sh -c \
        "mount --bind '$W/resolv.conf' /etc/resolv.conf && exec postfix -c '$PF_ETC' start" \
        >"$W/postfix-start.log" 2>&1 || { cat "$W/postfix-start.log" >&2; die "postfix start failed"; }
    wait_listen "$RELAY_PORT" 30 || die "postfix did not come up"
}

stop_postfix() {
    postfix_stop_wait
    [ "$KEEP" = 1 ] && [ -f "$PF/maillog" ] && mv "$PF/maillog" "$W/postfix-maillog.$(date +%s)"
    rm -rf "$PF/spool"
}

# ----------------------------------------------------------------- runs ----
declare -A R_SECS R_RATE R_CONNS R_TARPIT R_CPU R_FAIL R_GOOD

run_one() {  # run_one SYSTEM MODE
    local sys=$1 mode=$2 key="$1:$2" good t0 line fail="" msgs last conns tarpit
    good=$(good_count "$mode")
    R_GOOD[$key]=$good
    log "=== $sys, $mode: nsd, sink (expecting $good good-domain messages)"
    start_nsd "$mode"
    start_sink "$good"
    cg_reset
    case $sys in sluice) start_sluice ;; postfix) start_postfix ;; esac
    log "=== $sys, $mode: generator ($SESSIONS sessions, $N messages over $DOMAINS domains)"
    t0=$(now)
    timeout -k 10 $((RUN_TIMEOUT + 60)) "$SLUICE_BENCH" bench --target "$HOST:$RELAY_PORT" \
        --sessions "$SESSIONS" --messages-per-session 1 --count "$N" --size 400 \
        --recipient-template 'u{i}@d{i}.many.test' --recipient-count "$DOMAINS" \
        --max-seconds "$RUN_TIMEOUT" --interval 5 >"$W/gen.out" 2>"$W/gen.err" || fail="generator"
    log "generator: $(grep '^BENCH' "$W/gen.out" | tail -1)"
    while kill -0 "$SINK_PID" 2>/dev/null; do
        sleep 1
        [ $(($(date +%s) - ${t0%.*})) -gt "$RUN_TIMEOUT" ] && { fail="timeout"; break; }
        if [ $(( $(date +%s) % 10 )) = 0 ]; then log "[$sys/$mode] $(tail -1 "$W/sink.err")"; fi
    done
    kill_wait "$SINK_PID" TERM 5; SINK_PID=""
    case $sys in sluice) kill_wait "$SLUICE_PID" TERM 30; SLUICE_PID="" ;; postfix) stop_postfix ;; esac
    R_CPU[$key]=$(cg_cpu_s)
    line=$(grep '^SINK ' "$W/sink.out" | tail -1 || true)
    log "sink: $line"
    [[ $line =~ messages=([0-9]+) ]] && msgs=${BASH_REMATCH[1]}
    [[ $line =~ last=([0-9.]+) ]] && last=${BASH_REMATCH[1]}
    [[ $line =~ \ connections=([0-9]+) ]] && conns=${BASH_REMATCH[1]}
    [[ $line =~ tarpit_messages=([0-9]+) ]] && tarpit=${BASH_REMATCH[1]}
    [ "${msgs:-0}" = "$good" ] || fail="${fail:+$fail,}sink_count=${msgs:-0}"
    # Good-domain deliveries per second (the sink's progress lines).
    grep -o ' [0-9]* msg/s' "$W/sink.err" | awk '{ print NR "," $1 }' >"$W/$sys-$mode.csv" || true
    cp "$W/$sys-$mode.csv" "$REPO/bench/results/many-$DAY-$sys-$mode.csv"
    R_TARPIT[$key]=${tarpit:-0}
    if [ -n "$fail" ]; then R_FAIL[$key]=$fail; log "=== $sys, $mode: FAILED ($fail)"; sleep 2; return; fi
    R_SECS[$key]=$(fmt %.1f "$(calc "$last - $t0")")
    R_RATE[$key]=$(fmt %.1f "$(calc "$good / ($last - $t0)")")
    R_CONNS[$key]=$(fmt %.3f "$(calc "$conns / $good")")
    log "=== $sys, $mode: $good good messages in ${R_SECS[$key]} s = ${R_RATE[$key]} msg/s"
    sleep 2
}

ensure_packages
ensure_sluice
cg_create
listening "$RELAY_PORT" && die "port $RELAY_PORT is in use"
ss -Hlnu 'sport = :53' | grep -q '127.0.0.1:53\|0.0.0.0:53' && die "something listens on port 53"
[[ " $SYSTEMS " == *" postfix "* ]] && setup_postfix
mkdir -p "$REPO/bench/results"
log "workload M: systems=[$SYSTEMS] modes=[$MODES] N=$N sessions=$SESSIONS tarpit=${TARPIT_MS}ms tmp=$W"
for sys in $SYSTEMS; do for mode in $MODES; do run_one "$sys" "$mode"; done; done

lines=(); series=()
for mode in $MODES; do for sys in $SYSTEMS; do
    key="$sys:$mode"
    series+=("$sys $mode=$REPO/bench/results/many-$DAY-$sys-$mode.csv")
    if [ -n "${R_FAIL[$key]:-}" ]; then
        lines+=("RESULT system=$sys workload=M mode=$mode n=$N good=${R_GOOD[$key]} seconds=FAILED failed=${R_FAIL[$key]} tarpit_delivered=${R_TARPIT[$key]}")
        continue
    fi
    share=n/a; ratio=n/a; cpu=n/a
    [ -n "${R_RATE[$sys:clean]:-}" ] && share=$(fmt %.3f "$(calc "${R_RATE[$key]} / ${R_RATE[$sys:clean]}")")
    [ "$sys" != postfix ] && [ -n "${R_RATE[postfix:$mode]:-}" ] && ratio=$(fmt %.2f "$(calc "${R_RATE[$key]} / ${R_RATE[postfix:$mode]}")")
    [ "${R_CPU[$key]}" != n/a ] && cpu=$(fmt %.3f "$(calc "${R_CPU[$key]} * 1000 / ${R_GOOD[$key]}")")
    lines+=("RESULT system=$sys workload=M mode=$mode n=$N good=${R_GOOD[$key]} seconds=${R_SECS[$key]} good_msgs_per_s=${R_RATE[$key]} share_of_clean=$share ratio_vs_postfix=$ratio conns_per_msg=${R_CONNS[$key]} tarpit_delivered=${R_TARPIT[$key]} cpu_ms_per_msg=$cpu")
done; done
append_results "$RESULTS_FILE" "${lines[@]}"
printf '%s\n' "${lines[@]}"
python3 "$REPO/bench/chart.py" --out "$REPO/bench/results/many-$DAY.svg" --interval 1 \
    --title "Workload M: good-domain deliveries per minute (N=$N, 5 % tarpit, 2 % dead in 'bad')" \
    "${series[@]}" || log "chart failed"
for l in "${lines[@]}"; do [[ $l == *FAILED* ]] && exit 1; done
exit 0

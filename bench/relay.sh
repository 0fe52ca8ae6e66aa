#!/usr/bin/env bash
# bench/relay.sh — workload R (relay) of /work/shared/BENCH.md.
#
# What it measures
#   Generator -> relay under test on 127.0.0.1:55125 -> sink on 127.0.0.1:55225
#   that accepts and discards. 250 concurrent inbound sessions, one message per
#   connection, one recipient per message, recipients spread over 5 domains
#   (recip1@domain1.example ... domain5.example), all routed to the sink.
#   Sizes 400 B and 64 KiB. Time = from the moment the generator starts until
#   the sink has received all N messages; the sink must count exactly N, or the
#   run is FAILED. In one run, one after the other, against the same sink and
#   the same generator:
#     harness  generator straight into the sink (the ceiling of this machine)
#     sluice   target/release/sluice serve (fresh data_dir for every run)
#     postfix  Debian's Postfix as an isolated instance (own config dir, own
#              queue_directory under a temp dir, `postfix -c DIR start`),
#              with the settings of the published Mailismus-vs-Postfix test.
#   Durability stays on for both (Postfix fsyncs by default; Sluice syncs
#   before 250). Everything runs on 127.0.0.1 only; every run is bounded.
#
# How to run (as root; it apt-installs postfix and time if they are missing):
#   bash bench/relay.sh
#   N400=5000 N64K=1000 SYSTEMS="harness postfix" bash bench/relay.sh
#   RESTRICTIONS=typical SESSIONS=250 TLS_MODES=off bash bench/relay.sh
#                      # issue 38's: a typical site's restriction lists on
#                      # both (below, and bench/lib/restrictions.sh)
#   REWRITE=typical SESSIONS=250 TLS_MODES=off bash bench/relay.sh
#                      # issue 39's: a canonical map, a virtual alias map
#                      # and 20 header checks on both (bench/lib/rewrite.sh);
#                      # RESULT lines gain rewrite=typical
#   FILTER=sluice SYSTEMS="sluice postfix" SESSIONS=250 TLS_MODES=off bash bench/relay.sh
#                      # issue 40's: every message through the same
#                      # after-queue content filter and back on a
#                      # reinjection listener (bench/lib/filter.sh);
#                      # RESULT lines gain filter=sluice and the filter's
#                      # own filter_cpu_ms_per_msg
#
# Environment
#   N400=50000         messages in the 400 B run
#   N64K=20000         messages in the 64 KiB run
#   SYSTEMS="harness sluice postfix"   which systems to run, in that order
#   SIZES="400 65536"  message sizes to run
#   TLS_MODES="off on" off: no TLS anywhere; on: STARTTLS on both legs
#                      (generator -> relay and relay -> sink), both MTAs with
#                      the same certificate and opportunistic TLS outbound;
#                      needs GENERATOR=sluice and SINK=sluice (Postfix's
#                      smtp-source and smtp-sink speak no TLS)
#   SESSIONS=250       concurrent generator sessions
#   RUN_TIMEOUT=1800   seconds one run may take before it is FAILED
#   SLUICE=target/release/sluice      binary used for serve/sink/bench
#   SLUICE_SERVE=$SLUICE              binary for `serve` only (A/B against an
#                      older build with the same generator and sink)
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   GENERATOR=sluice   (or -G on the command line)
#                      sluice (`sluice-bench bench`) | smtp-source (Postfix's tool,
#                      5 processes x SESSIONS/5 sessions, like the original)
#   SINK=sluice        sluice (`sluice-bench sink`) | smtp-sink (Postfix's tool)
#   POSTFIX_MAILLOG=1  Postfix logs to a file in its temp dir (0: no logging;
#                      there is no syslog socket here, so 0 means "discarded")
#   KEEP=0             1: keep the temp dir (configs, logs) for inspection
#   RESTRICTIONS=none  typical: Sluice and Postfix both apply the same typical
#                      site's restriction lists (docker-mailserver's shape:
#                      permit_mynetworks, permit_sasl_authenticated,
#                      reject_unauth_pipelining, HELO and non-FQDN checks,
#                      reject_unknown_sender_domain and
#                      reject_unknown_recipient_domain against an nsd of the
#                      benchmark's own on 127.0.0.1:53, check_sender_access
#                      with a text table, reject_rbl_client, then
#                      reject_unauth_destination; bench/lib/restrictions.sh
#                      has the lists). mynetworks becomes 127.0.0.2/32, so
#                      the generator (127.0.0.1) is a stranger and every
#                      check runs; it may relay because domain1..5.example
#                      are relay_domains on both (routed to the sink by the
#                      relayhost, as before), so reject_unauth_destination,
#                      last, lets it through. nsd serves those domains and
#                      the senders' (sender.example, generator.bench.example)
#                      with an MX each. Before each run an SMTP check
#                      (bench/lib/rscheck.py, no message sent) must see the
#                      access table, the sender-domain check and the relay
#                      check refuse, and the generator's recipient accepted,
#                      or the run is FAILED (restrictions_check). RESULT
#                      lines gain restrictions=typical; charts -restrict.
#   RESULTS_FILE=bench/results/relay-YYYY-MM-DD.txt   where RESULT lines are appended
#                      (with GENERATOR=sluice, an SVG of each run's accepted
#                      messages per second goes next to it:
#                      relay-YYYY-MM-DD-<system>-<size>-tls<on|off>.svg)
#
# Output
#   Progress on stderr. Last, one line per system and size:
#     RESULT system=<harness|sluice|postfix> workload=R n=<N> size=<bytes>
#       tls=<off|on> seconds=<s> msgs_per_s=<x> ratio_vs_postfix=<x/postfix|n/a>
#       peak_rss_kb=<kb|n/a> peak_pss_kb=<kb|n/a> cpu_s=<s> cpu_ms_per_msg=<ms>
#       accepted_per_min=<N over the generator's run> delivered_per_min=<N
#       over the time to the sink's last message> drain_s=<the sink's last
#       message after the generator's last reply>
#   With RESTRICTIONS=typical each line ends with restrictions=typical.
#   cpu_s is the CPU time of the system under test, every process of it
#   (it is started inside a cpuacct cgroup), from start to stop.
#   (a failed run has seconds=FAILED msgs_per_s=FAILED and a failed=<reason>
#   field). The same lines, prefixed with the ISO date and the git commit, are
#   appended to bench/results/relay-YYYY-MM-DD.txt. Exit status 1 if any run
#   failed, 2 if the set-up failed.
#   Memory of the system under test (harness: n/a):
#     sluice   peak_rss_kb = max RSS of the serve process (/usr/bin/time -v);
#              peak_pss_kb = peak PSS sampled every 0.5 s from /proc.
#     postfix  peak of the sum of VmRSS (resp. Pss) over the master and all
#              the daemons it forked, sampled every 0.5 s. The RSS sum counts
#              shared pages (libraries, ...) once per process, ~300 processes,
#              so it overstates Postfix several times: compare the PSS.
#
# Notes
#   With GENERATOR=smtp-source the size is smtp-source's payload (-l), which
#   excludes the ~200 B of headers it adds; RESULT lines then carry a
#   tools=... field, since such figures are not comparable with the default.

set -euo pipefail

# log, die, calc, fmt, kill_wait, ports, Postfix instance helpers, cleanup
# trap, results file: see the top of bench/lib/common.sh.
source "$(dirname "$0")/lib/common.sh"
# RESTRICTIONS=typical: the restriction set, its nsd and the checks.
source "$(dirname "$0")/lib/restrictions.sh"
source "$(dirname "$0")/lib/rewrite.sh"
source "$(dirname "$0")/lib/filter.sh"

BENCH_TAG=relay
ANNOUNCE_RM=0
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N400=${N400:-50000}
N64K=${N64K:-20000}
SYSTEMS=${SYSTEMS:-"harness sluice postfix"}
SIZES=${SIZES:-"400 65536"}
TLS_MODES=${TLS_MODES:-"off on"}
TLS=off
SESSIONS=${SESSIONS:-250}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SLUICE_SERVE=${SLUICE_SERVE:-$SLUICE}
SLUICE_BUILD=${SLUICE_BUILD:-1}
generator_option "$@"
SINK=${SINK:-sluice}
POSTFIX_MAILLOG=${POSTFIX_MAILLOG:-1}
KEEP=${KEEP:-0}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/relay-$(date +%F).txt}
RESTRICTIONS=${RESTRICTIONS:-none}
# The generators' recipient domains (relayed to) and sender domains.
RS_RELAY_DOMAINS="domain1.example domain2.example domain3.example domain4.example domain5.example"
RS_EXTRA_ZONES="$RS_RELAY_DOMAINS generator.bench.example"

HOST=127.0.0.1
RELAY_PORT=55125
SINK_PORT=55225

now() { date +%s.%N; }

# ---------------------------------------------------------------- sanity ----
for s in $SYSTEMS; do
    case $s in harness|sluice|postfix) ;; *) die "unknown system '$s' in SYSTEMS" ;; esac
done
case $GENERATOR in sluice|smtp-source) ;; *) die "GENERATOR must be sluice or smtp-source" ;; esac
case $SINK in sluice|smtp-sink) ;; *) die "SINK must be sluice or smtp-sink" ;; esac
case $RESTRICTIONS in none|typical) ;; *) die "RESTRICTIONS must be none or typical" ;; esac
case ${REWRITE:-none} in none|typical) ;; *) die "REWRITE must be none or typical" ;; esac
for t in $TLS_MODES; do
    case $t in off) ;; on)
        [ "$GENERATOR" = sluice ] && [ "$SINK" = sluice ] \
            || die "TLS_MODES=on needs GENERATOR=sluice and SINK=sluice" ;;
    *) die "unknown TLS mode '$t'" ;; esac
done
require_root

n_for_size() {
    case $1 in 400) echo "$N400" ;; 65536) echo "$N64K" ;; *) die "no N for size $1 (only 400 and 65536)" ;; esac
}

# ------------------------------------------------------------- installs ----
WE_INSTALLED_POSTFIX=0
ensure_packages() {
    local pkgs=()
    command -v postfix >/dev/null 2>&1 || pkgs+=(postfix)
    [ -x /usr/bin/time ] || pkgs+=(time)
    command -v ss >/dev/null 2>&1 || pkgs+=(iproute2)
    [ ${#pkgs[@]} -eq 0 ] && return 0
    log "installing ${pkgs[*]}"
    [[ " ${pkgs[*]} " == *" postfix "* ]] && WE_INSTALLED_POSTFIX=1
    # "No configuration": the package then writes no /etc/postfix/main.cf and
    # starts no system instance.
    echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
    apt_install "${pkgs[@]}"
    # Should the package have started a system instance anyway, stop it.
    if [ "$WE_INSTALLED_POSTFIX" = 1 ]; then stop_system_postfix; fi
}

needs_sluice_binary() {
    [[ " $SYSTEMS " == *" sluice "* || $GENERATOR == sluice || $SINK == sluice ]]
}

# ------------------------------------------------------------ temp dir -----
make_workdir relay      # W, PF, PF_ETC

SINK_PID=""
SLUICE_TIME_PID=""      # /usr/bin/time wrapping `sluice serve`
TICKER_PID=""
SAMPLER_PID=""
GEN_PIDS=()

# The EXIT trap (cleanup in common.sh) calls this, then removes $W.
cleanup_processes() {
    kill_wait "$TICKER_PID" TERM 2
    kill_wait "$SAMPLER_PID" TERM 2
    local p
    for p in "${GEN_PIDS[@]}"; do kill_wait "$p" TERM 5; done
    if [ -n "$SLUICE_TIME_PID" ]; then
        p=$(pgrep -P "$SLUICE_TIME_PID" | head -1)
        kill_wait "$p" TERM 30
        kill_wait "$SLUICE_TIME_PID" TERM 5
    fi
    stop_postfix_instance
    kill_wait "$SINK_PID" TERM 5
    kill_wait "$FILTER_PID" TERM 10
    restrictions_stop
}
install_cleanup_traps

# ----------------------------------------------------------------- sink ----
# start_sink N: starts a fresh sink in the background (SINK_PID). Its stdout
# ($W/sink.out) ends with
#   SINK messages=N bytes=B first=<unix secs> last=<unix secs>
start_sink() {
    local n=$1
    rm -f "$W/sink.out" "$W/sink.err" "$W/sink.counter"
    case $SINK in
    sluice)
        local starttls=()
        [ "$TLS" = on ] && starttls=(--starttls)
        "$SLUICE_BENCH" sink --listen "$HOST:$SINK_PORT" --exit-after "$n" "${starttls[@]}" \
            --max-seconds "$RUN_TIMEOUT" >"$W/sink.out" 2>"$W/sink.err" &
        SINK_PID=$!
        ;;
    smtp-sink)
        smtp_sink_driver "$n" >"$W/sink.out" 2>"$W/sink.err" &
        SINK_PID=$!
        ;;
    esac
    wait_listen "$SINK_PORT" 15 "$SINK_PID" || {
        tail -5 "$W/sink.err" >&2 || true
        die "sink did not come up on $HOST:$SINK_PORT"
    }
}

# Postfix's smtp-sink has no "exit after N and print when" mode that suits
# (-M N drops the connections still open, so the client's QUIT fails), so
# this driver runs it with a running counter (-c), polls the counter, notes
# the time it reaches N, lets the sessions finish for a second, then stops it.
smtp_sink_count() {
    tail -c 200 "$W/sink.counter" 2>/dev/null | tr '\r' '\n' \
        | grep -o 'mesg=[0-9]*' | tail -1 | cut -d= -f2 || true
}
smtp_sink_driver() {
    local n=$1 deadline first="" last="" c
    smtp-sink -u postfix -c -m 2000 -t 300 "$HOST:$SINK_PORT" 2000 \
        >"$W/sink.counter" &
    local sp=$!
    trap 'kill $sp 2>/dev/null; exit 143' TERM
    deadline=$(( $(date +%s) + RUN_TIMEOUT ))
    while kill -0 "$sp" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
        c=$(smtp_sink_count)
        c=${c:-0}
        if [ -z "$first" ] && [ "$c" -gt 0 ]; then first=$(now); fi
        if [ "$c" -ge "$n" ]; then last=$(now); break; fi
        sleep 0.05
    done
    sleep 1
    kill "$sp" 2>/dev/null || true
    wait "$sp" 2>/dev/null || true
    c=$(smtp_sink_count)
    echo "SINK messages=${c:-0} bytes=n/a first=${first:-0} last=${last:-$(now)}"
}

sink_progress() {
    case $SINK in
    sluice) tail -n 1 "$W/sink.err" 2>/dev/null | tr -d '\r' || true ;;
    smtp-sink) echo "sink: received=$(smtp_sink_count)" ;;
    esac
}

# ------------------------------------------------------------ generator ----
# run_generator PORT N SIZE: runs in the foreground, CSV progress to stderr;
# sets GEN_ERRORS (-1 if it could not tell) and GEN_RC.
run_generator() {
    local port=$1 n=$2 size=$3
    GEN_ERRORS=-1
    GEN_RC=0
    case $GENERATOR in
    sluice)
        local starttls=()
        [ "$TLS" = on ] && starttls=(--starttls)
        timeout -k 10 $((RUN_TIMEOUT + 60)) \
            "$SLUICE_BENCH" bench --target "$HOST:$port" --sessions "$SESSIONS" "${starttls[@]}" \
            --messages-per-session 1 --count "$n" --size "$size" \
            --recipients 1 --domains 5 --max-seconds "$RUN_TIMEOUT" --interval 1 \
            --chart "$REPO/bench/results/relay-$(date +%F)-$CHART_TAG.svg" \
            2>"$W/gen.err" | tee "$W/gen.out" >&2 || GEN_RC=$?
        local line
        line=$(grep '^BENCH ' "$W/gen.out" | tail -1 || true)
        if [[ $line =~ errors=([0-9]+) ]]; then GEN_ERRORS=${BASH_REMATCH[1]}; fi
        # A generator that stopped short (e.g. at --max-seconds) is an error.
        if [[ $line =~ messages=([0-9]+) ]] && [ "${BASH_REMATCH[1]}" != "$n" ] \
            && [ "$GEN_ERRORS" = 0 ]; then
            GEN_ERRORS="short(${BASH_REMATCH[1]})"
        fi
        ;;
    smtp-source)
        # Like the original: 5 processes x SESSIONS/5 sessions, process i
        # sends to recip1@domain<i>.example.
        local i per rem cnt t0 t1 rc
        per=$((n / 5)); rem=$((n % 5))
        GEN_PIDS=()
        t0=$(now)
        for i in 1 2 3 4 5; do
            cnt=$per; [ "$i" -le "$rem" ] && cnt=$((cnt + 1))
            timeout -k 10 $((RUN_TIMEOUT + 60)) \
                smtp-source -s $((SESSIONS / 5)) -m "$cnt" -l "$size" \
                -M generator.bench.example -f sender@generator.bench.example \
                -t "recip1@domain$i.example" "$HOST:$port" \
                >"$W/gen.$i.out" 2>&1 &
            GEN_PIDS+=($!)
        done
        GEN_ERRORS=0
        for i in "${!GEN_PIDS[@]}"; do
            rc=0; wait "${GEN_PIDS[$i]}" || rc=$?
            if [ "$rc" != 0 ]; then
                GEN_RC=$rc
                GEN_ERRORS=$((GEN_ERRORS + 1))
                log "smtp-source #$((i + 1)) exited $rc: $(tail -1 "$W/gen.$((i + 1)).out")"
            fi
        done
        GEN_PIDS=()
        t1=$(now)
        echo "BENCH messages=$n errors=$GEN_ERRORS(processes) seconds=$(calc "$t1-$t0") msgs_per_s=$(calc "$n/($t1-$t0)")" >&2
        ;;
    esac
}

# --------------------------------------------------------------- sluice ----
start_sluice() {
    local var="$W/sluice-var"
    rm -rf "$var"; mkdir -p "$var"
    cat >"$W/sluice.toml" <<EOF
hostname = "sluice.bench"
data_dir = "$var"
$(grep -qa run_as_root "$SLUICE_SERVE" && echo "run_as_root = true  # (a build that knows it: started as root)")

[smtpd]
listen = ["$HOST:$RELAY_PORT"]
max_sessions = 2000
$(restrictions_sluice_smtpd)

[delivery]
relayhost = "smtp:[$HOST]:$SINK_PORT"
default_concurrency = 250
$(restrictions_sluice_toml)
$(restrictions_sluice_dns)
$(rewrite_sluice_toml)
$(filter_sluice_toml)
EOF
    # TLS on: the benchmark certificate (outbound STARTTLS is the default,
    # "may"). Off: the defaults, with nobody asking for STARTTLS (and a
    # config an older build can read, for A/B runs).
    if [ "$TLS" = on ]; then
        printf '\n[tls]\ncert_file = "%s"\nkey_file = "%s"\n' \
            "$W/tls/cert.pem" "$W/tls/key.pem" >>"$W/sluice.toml"
    fi
    cg_exec /usr/bin/time -v -o "$W/sluice.time" \
        "$SLUICE_SERVE" serve --config "$W/sluice.toml" >"$W/sluice.log" 2>&1 &
    SLUICE_TIME_PID=$!
    wait_listen "$RELAY_PORT" 30 "$SLUICE_TIME_PID" || {
        tail -20 "$W/sluice.log" >&2 || true
        die "sluice serve did not come up on $HOST:$RELAY_PORT"
    }
    start_mem_sampler "$(pgrep -P "$SLUICE_TIME_PID" | head -1)"
}

# stop_sluice: SIGTERM; sets STOP_RSS to the peak RSS in kB (or n/a) and
# STOP_PSS to the sampled peak PSS.
stop_sluice() {
    local pid hwm=""
    stop_mem_sampler
    STOP_PSS=$PEAK_PSS_SUM
    pid=$(pgrep -P "$SLUICE_TIME_PID" | head -1 || true)
    if [ -n "$pid" ]; then
        hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
        kill_wait "$pid" TERM 60
    fi
    kill_wait "$SLUICE_TIME_PID" TERM 5
    SLUICE_TIME_PID=""
    local rss
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$W/sluice.time" 2>/dev/null || true)
    STOP_RSS=${rss:-${hwm:-n/a}}
}

# -------------------------------------------------------------- postfix ----
# An isolated instance (see prepare_postfix_instance in lib/common.sh), with
# the settings of the published test; everything relays to the sink.
setup_postfix() {
    prepare_postfix_instance
    {
        cat <<EOF
# Postfix instance for workload R (bench/relay.sh); settings of the published
# Mailismus-vs-Postfix test. Fsync stays on (Postfix default).
EOF
        postfix_main_cf_instance postfix.bench.example bench.example
        cat <<EOF
relayhost = [127.0.0.1]:$SINK_PORT

# No local delivery, no recipient validation: everything relays to the sink.
mydestination =
local_recipient_maps =
relay_domains =
relay_recipient_maps =
alias_maps =
alias_database =
append_dot_mydomain = no
biff = no
EOF
        postfix_main_cf_loopback_smtpd
        cat <<EOF

# Concurrency of the published test.
default_process_limit = 300
smtp_destination_concurrency_limit = 250
default_destination_concurrency_limit = 250
smtpd_client_connection_count_limit = 500
# anvil: no rate limits, and loopback is exempt from all of them anyway.
smtpd_client_event_limit_exceptions = 127.0.0.0/8
smtpd_client_connection_rate_limit = 0
smtpd_client_message_rate_limit = 0
smtpd_client_recipient_rate_limit = 0
smtpd_client_new_tls_session_rate_limit = 0
smtpd_client_auth_rate_limit = 0
EOF
        restrictions_postfix_main_cf
        rewrite_postfix_main_cf
        filter_postfix_main_cf
    } >"$PF_ETC/main.cf"
    # master.cf: every service with chroot off; smtpd only on 127.0.0.1:55125
    # (and the filter's reinjection smtpd with FILTER=sluice).
    write_postfix_master_cf "$RELAY_PORT"
    filter_postfix_master_cf >>"$PF_ETC/master.cf"
}

# Postfix's TLS settings for the current mode: the same certificate as
# Sluice's, STARTTLS offered inbound and used opportunistically outbound.
postfix_tls() {
    if [ "$TLS" = on ]; then
        postconf -c "$PF_ETC" -e "smtpd_tls_security_level = may" \
            "smtpd_tls_cert_file = $W/tls/cert.pem" "smtpd_tls_key_file = $W/tls/key.pem" \
            "smtp_tls_security_level = may" "smtpd_tls_loglevel = 0" "smtp_tls_loglevel = 0"
    else
        postconf -c "$PF_ETC" -e "smtpd_tls_security_level = none" "smtp_tls_security_level = none"
    fi
}

start_postfix() {
    rm -rf "$PF/spool" "$PF/maillog"
    mkdir -p "$PF/spool"
    postfix_tls
    if restrictions_on; then
        # The instance asks the benchmark's nsd (restrictions_postfix_start).
        cg_run postfix -c "$PF_ETC" check >"$W/postfix-check.log" 2>&1 \
            || { cat "$W/postfix-check.log" >&2; die "postfix -c $PF_ETC check failed"; }
        restrictions_postfix_start >"$W/postfix-start.log" 2>&1 \
            || { cat "$W/postfix-start.log" >&2; tail -20 "$PF/maillog" >&2 2>/dev/null; die "postfix -c $PF_ETC start failed"; }
    else
        postfix_check_start || die "postfix -c $PF_ETC $POSTFIX_FAILED failed"
    fi
    wait_listen "$RELAY_PORT" 30 || die "postfix smtpd did not come up on $HOST:$RELAY_PORT"
    local master
    master=$(sed -n '1s/ //gp' "$PF/spool/pid/master.pid")
    start_mem_sampler "$master"
}

# Every 0.5 s: sum VmRSS and Pss over PID and its children (for Postfix the
# master and every daemon it forked); keep the peaks in FILE as
# "rss_kb pss_kb".
mem_sampler() {
    set +e
    local root=$1 out=$2 peak=0 peakp=0 files s p x
    while kill -0 "$root" 2>/dev/null; do
        # Three processes per sample, whatever the number of daemons: this
        # must not steal CPU from the system under test.
        files=()
        for x in $root $(pgrep -P "$root"); do
            files+=("/proc/$x/status" "/proc/$x/smaps_rollup")
        done
        s=0; p=0
        read -r s p < <(cat "${files[@]}" 2>/dev/null \
            | awk '/^VmRSS:/ { r += $2 } /^Pss:/ { q += $2 } END { print r + 0, q + 0 }')
        [ "${s:-0}" -gt "$peak" ] && peak=$s
        [ "${p:-0}" -gt "$peakp" ] && peakp=$p
        echo "$peak $peakp" >"$out.tmp" && mv "$out.tmp" "$out"
        sleep 0.5
    done
}

start_mem_sampler() {
    rm -f "$W/mem.peak"
    mem_sampler "$1" "$W/mem.peak" &
    SAMPLER_PID=$!
}

# stop_mem_sampler: sets PEAK_RSS_SUM and PEAK_PSS_SUM (kB, or n/a).
stop_mem_sampler() {
    kill_wait "$SAMPLER_PID" TERM 2
    SAMPLER_PID=""
    PEAK_RSS_SUM="n/a"; PEAK_PSS_SUM="n/a"
    if [ -s "$W/mem.peak" ]; then read -r PEAK_RSS_SUM PEAK_PSS_SUM <"$W/mem.peak"; fi
}

postfix_queue_files() {
    find "$PF/spool/incoming" "$PF/spool/active" "$PF/spool/deferred" \
        "$PF/spool/maildrop" -type f 2>/dev/null | wc -l
}

# stop_postfix: stops the instance, deletes its queue; sets STOP_RSS and
# STOP_PSS to the peak sums over its processes in kB (or n/a).
stop_postfix() {
    stop_mem_sampler
    STOP_RSS=$PEAK_RSS_SUM; STOP_PSS=$PEAK_PSS_SUM
    log "postfix peak memory: sum RSS $STOP_RSS kB, sum PSS $STOP_PSS kB"
    postfix_stop_wait
    local left
    left=$(postfix_queue_files)
    [ "$left" -gt 0 ] && log "postfix: $left files left in the queue at stop"
    if [ "$KEEP" = 1 ] && [ -f "$PF/maillog" ]; then
        mv "$PF/maillog" "$W/postfix-maillog.$(date +%s)"
    fi
    rm -rf "$PF/spool"
}

# ------------------------------------------------------------------ runs ----
declare -A R_SECONDS R_RATE R_RSS R_PSS R_FAIL R_N R_CPU R_ACCPM R_DELPM R_DRAIN R_FCPU

ticker() {  # progress line every 5 s while a run goes on
    set +e
    local label=$1 t0 line
    t0=$(date +%s)
    while sleep 5; do
        line="[$label +$(( $(date +%s) - t0 ))s] $(sink_progress)"
        [ "$label" = "${label#postfix}" ] || line+="; postfix queue files: $(postfix_queue_files)"
        log "$line"
    done
}

run_one() {
    local sys=$1 size=$2 n key port rss="n/a" fail="" sinkline msgs last gen_start secs
    n=$(n_for_size "$size")
    key="$sys:$size:$TLS"
    wait_free "$SINK_PORT" 30 && wait_free "$RELAY_PORT" 30 \
        || die "ports $SINK_PORT/$RELAY_PORT still in use after the previous run"
    log "=== $sys, size $size B, TLS $TLS, N=$n: starting sink"
    start_sink "$n"
    [ "$sys" = harness ] || filter_start
    cg_reset
    case $sys in
    harness) port=$SINK_PORT ;;
    sluice)
        log "=== $sys: starting sluice serve"
        start_sluice
        port=$RELAY_PORT ;;
    postfix)
        log "=== $sys: starting postfix instance"
        start_postfix
        port=$RELAY_PORT ;;
    esac
    if [ "$sys" != harness ] && restrictions_on; then
        log "=== $sys: the restriction lists are in force (rscheck.py)"
        rs_check "$HOST:$port" "recip1@domain1.example" || fail="restrictions_check"
    fi
    ticker "$sys/$size" &
    TICKER_PID=$!

    if [ -n "$fail" ]; then
        # The lists are not what this run claims: no run.
        kill_wait "$SINK_PID" TERM 10
    else
        CHART_TAG="$sys-$size-tls$TLS"
        restrictions_on && CHART_TAG+="-restrict"
        rewrite_on && CHART_TAG+="-rewrite"
        filter_on && CHART_TAG+="-filter"
        log "=== $sys, size $size B: generator ($GENERATOR, $SESSIONS sessions, $n messages)"
        gen_start=$(now)
        run_generator "$port" "$n" "$size"
        gen_end=$(now)
        if [ "$GEN_RC" != 0 ] && [ -s "$W/gen.err" ]; then tail -5 "$W/gen.err" >&2; fi
        log "generator done in $(fmt %.1f "$(calc "$(now)-$gen_start")") s (rc=$GEN_RC errors=$GEN_ERRORS)"

        if [ "$GEN_RC" != 0 ] || [ "$GEN_ERRORS" != 0 ]; then
            fail="generator_rc=${GEN_RC}_errors=${GEN_ERRORS}"
            # The sink cannot reach N; give in-flight messages a moment, then stop it.
            sleep 5
            kill_wait "$SINK_PID" TERM 10
        else
            log "waiting for the sink to receive all $n messages"
            local deadline=$(( ${gen_start%.*} + RUN_TIMEOUT ))
            while kill -0 "$SINK_PID" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
                sleep 0.2
            done
            if kill -0 "$SINK_PID" 2>/dev/null; then
                fail="timeout_${RUN_TIMEOUT}s"
                kill_wait "$SINK_PID" TERM 10
            else
                wait "$SINK_PID" 2>/dev/null || true
            fi
        fi
    fi
    SINK_PID=""
    kill_wait "$TICKER_PID" TERM 2
    TICKER_PID=""

    sinkline=$(grep '^SINK ' "$W/sink.out" | tail -1 || true)
    log "sink: ${sinkline:-<no SINK line>}"
    msgs=""; last=""
    [[ $sinkline =~ messages=([0-9]+) ]] && msgs=${BASH_REMATCH[1]}
    [[ $sinkline =~ last=([0-9.]+) ]] && last=${BASH_REMATCH[1]}
    if [ -z "$fail" ] && [ "${msgs:-x}" != "$n" ]; then fail="sink_count=${msgs:-unknown}_expected=$n"; fi
    if [ -z "$fail" ] && [ -z "$last" ]; then fail="sink_no_last_time"; fi

    STOP_RSS="n/a"; STOP_PSS="n/a"
    case $sys in
    sluice) stop_sluice ;;
    postfix) stop_postfix ;;
    esac
    if [ -z "$fail" ] && [ "$sys" = sluice ] && ! rewrite_check "$W/sluice.log"; then
        fail="rewrite_check"
    fi
    FILTER_CPU_S=n/a
    if [ "$sys" != harness ]; then
        filter_stop
        if [ -z "$fail" ] && ! filter_check; then fail="filter_check"; fi
    fi
    R_FCPU[$key]=$FILTER_CPU_S
    # CPU of the system under test, all its processes, start to stop.
    [ "$sys" = harness ] || R_CPU[$key]=$(cg_cpu_s)
    rss=$STOP_RSS
    R_PSS[$key]=$STOP_PSS

    R_N[$key]=$n
    R_RSS[$key]=$rss
    if [ -n "$fail" ]; then
        R_FAIL[$key]=$fail
        log "=== $sys, size $size B: FAILED ($fail)"
    else
        secs=$(calc "$last - $gen_start")
        R_SECONDS[$key]=$(fmt %.3f "$secs")
        R_RATE[$key]=$(fmt %.1f "$(calc "$n / $secs")")
        # Receipt and delivery apart: the generator's last reply, and the
        # sink's last message after it.
        R_ACCPM[$key]=$(fmt %.0f "$(calc "$n * 60 / ($gen_end - $gen_start)")")
        R_DELPM[$key]=$(fmt %.0f "$(calc "$n * 60 / $secs")")
        R_DRAIN[$key]=$(fmt %.2f "$(calc "$last - $gen_end")")
        log "=== $sys, size $size B: $n messages in ${R_SECONDS[$key]} s = ${R_RATE[$key]} msg/s"
    fi
    # Let TIME_WAIT sockets and the page cache settle a little between runs.
    sleep 2
}

# ------------------------------------------------------------------ main ----
ensure_packages
ensure_sluice
cg_create
[ -n "$CG" ] || log "no cpuacct cgroup here: CPU per message will be n/a"
for p in $RELAY_PORT $SINK_PORT; do
    listening "$p" && die "port $p is already in use on this machine"
done
restrictions_setup
rewrite_setup
filter_setup
[[ " $SYSTEMS " == *" postfix "* ]] && setup_postfix

# One certificate for both MTAs (ECDSA P-256, as Sluice's own).
mkdir -p "$W/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=relay.bench.example" -keyout "$W/tls/key.pem" -out "$W/tls/cert.pem" 2>/dev/null \
    || die "openssl could not make the benchmark certificate"
chmod 644 "$W/tls/key.pem"

log "workload R: systems=[$SYSTEMS] sizes=[$SIZES] tls=[$TLS_MODES] N400=$N400 N64K=$N64K sessions=$SESSIONS generator=$GENERATOR sink=$SINK restrictions=$RESTRICTIONS rewrite=${REWRITE:-none} filter=$FILTER tmp=$W"
for TLS in $TLS_MODES; do
    for sys in $SYSTEMS; do
        for size in $SIZES; do
            run_one "$sys" "$size"
        done
    done
done

# --------------------------------------------------------------- report ----
cpu_per_msg() { if [ "$1" = n/a ]; then echo n/a; else fmt %.3f "$(calc "$1 * 1000 / $2")"; fi; }

tools=""
[ "$GENERATOR" = sluice ] && [ "$SINK" = sluice ] || tools=" tools=$GENERATOR/$SINK"
restrictions_on && tools+=" restrictions=typical"
rewrite_on && tools+=" rewrite=typical"
filter_on && tools+=" filter=sluice"
lines=()
any_failed=0
for TLS in $TLS_MODES; do
  for sys in $SYSTEMS; do
    for size in $SIZES; do
        key="$sys:$size:$TLS"
        if [ -n "${R_FAIL[$key]:-}" ]; then
            any_failed=1
            lines+=("RESULT system=$sys workload=R n=${R_N[$key]} size=$size tls=$TLS seconds=FAILED msgs_per_s=FAILED ratio_vs_postfix=n/a peak_rss_kb=${R_RSS[$key]} peak_pss_kb=${R_PSS[$key]} failed=${R_FAIL[$key]}$tools")
            continue
        fi
        ratio="n/a"
        fcpu=""
        if filter_on; then fcpu=" filter_cpu_ms_per_msg=$(cpu_per_msg "${R_FCPU[$key]:-n/a}" "${R_N[$key]}")"; fi
        pkey="postfix:$size:$TLS"
        if [ -n "${R_RATE[$pkey]:-}" ]; then
            ratio=$(fmt %.2f "$(calc "${R_RATE[$key]} / ${R_RATE[$pkey]}")")
        fi
        lines+=("RESULT system=$sys workload=R n=${R_N[$key]} size=$size tls=$TLS seconds=${R_SECONDS[$key]} msgs_per_s=${R_RATE[$key]} ratio_vs_postfix=$ratio peak_rss_kb=${R_RSS[$key]} peak_pss_kb=${R_PSS[$key]} cpu_s=${R_CPU[$key]:-n/a} cpu_ms_per_msg=$(cpu_per_msg "${R_CPU[$key]:-n/a}" "${R_N[$key]}") accepted_per_min=${R_ACCPM[$key]:-n/a} delivered_per_min=${R_DELPM[$key]:-n/a} drain_s=${R_DRAIN[$key]:-n/a}$tools$fcpu")
    done
  done
done

append_results "$RESULTS_FILE" "${lines[@]}"
printf '%s\n' "${lines[@]}"
exit "$any_failed"

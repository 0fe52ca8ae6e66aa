#!/usr/bin/env bash
# bench/backlog.sh — workload Q (backlog) of /work/shared/BENCH.md.
#
# What it measures
#   1. Reference: the empty-queue relay rate, as in workload R: generator
#      ($SESSIONS sessions, one message per connection) -> `sluice serve` on
#      127.0.0.1:$SMTP_PORT -> sink on 127.0.0.1:$SINK_PORT, $R_N messages,
#      fresh data_dir, sink up from the start; time = generator start ->
#      the sink's last message (the sink's clock).
#   2. Inject: a fresh data_dir, the next hop DOWN (nothing listens on
#      $SINK_PORT), $N messages of $SIZE bytes at full speed (`sluice
#      bench --ack-log`): inject_msgs_per_s is the generator's rate. The
#      daemon tries, finds the hop dead and defers ([queue]
#      minimal_backoff_secs = $BACKOFF, maximal_backoff_secs =
#      $MAX_BACKOFF; retries go on while injecting).
#   3. Restart with the full backlog on disk: SIGTERM, the sink comes up,
#      `sluice serve` starts again: restart_s = exec -> its `listening on`
#      log line (spool recovery included), first_delivery_s = exec -> the
#      first `status=sent`. The sink is up before the restart, so the
#      recovered mail goes out at once and the drain is not paced by retry
#      timers (the backoff only matters while injecting).
#   4. Drain: until every acknowledged message reached the sink (at most
#      $DRAIN_TIMEOUT s); drain_msgs_per_s = messages sent / (last - first
#      `status=sent` after the restart), compared with the empty-queue rate
#      of step 1 (drain_vs_empty). lost (acknowledged, not at the sink) must
#      be 0.
#   Memory: VmHWM of each `sluice serve` process (inject; restart+drain),
#   and VmRSS once the queue is empty. Every second the spool disk use
#   (du -sk), segment count, sink count and VmRSS go to a CSV; charts of
#   spool use and RSS over time are drawn with bench/chart.py.
#
# How to run (nothing is installed; python3 for the charts):
#   bash bench/backlog.sh                       # full size (1,000,000)
#   N=50000 R_N=20000 bash bench/backlog.sh     # quick
#
# Environment
#   N=1000000          messages in the backlog
#   R_N=20000          messages of the empty-queue reference run
#   SIZE=400           message size in bytes
#   SESSIONS=250       generator sessions (both runs)
#   BACKOFF=5          [queue] minimal_backoff_secs
#   MAX_BACKOFF=60     [queue] maximal_backoff_secs
#   CONCURRENCY=250    [delivery] default_concurrency
#   SEGMENT_MIB=       [spool] segment_mib (empty: the daemon's default, 64)
#   DRAIN_TIMEOUT=1800 seconds for the drain
#   RUN_TIMEOUT=3600   the generator's --max-seconds
#   SMTP_PORT=55165 SINK_PORT=55265
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   binary for everything
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   KEEP=0             1: keep the temp dir. Disk it needs meanwhile: spool
#                      ~0.6 KiB per message, mail log ~0.75 KiB per message
#                      plus ~0.2 KiB per deferral (1,000,000: ~2 GB in all)
#   RESULTS_DIR=bench/results   backlog-$STAMP.{txt,csv} and
#                      backlog-$STAMP-{spool,rss}.svg go here
#   STAMP=YYYY-MM-DD
#
# Output
#   Progress on stderr. Last, on stdout (and appended to backlog-$STAMP.txt
#   with date and commit):
#     RESULT system=sluice workload=Q n=<N> size=<B> acked=<n> delivered=<n>
#       lost=<n> duplicates=<n> inject_msgs_per_s=<x> deferrals=<log lines>
#       stop_s=<SIGTERM -> exit> restart_s=<s> first_delivery_s=<s>
#       drain_s=<first -> last delivery> drain_msgs_per_s=<x>
#       empty_queue_msgs_per_s=<x> drain_vs_empty=<ratio>
#       peak_rss_kb=<max VmHWM> inject_hwm_kb=<kb> drain_hwm_kb=<kb>
#       rss_after_drain_kb=<kb> peak_spool_kb=<kb> backoff=<min>/<max>
#   (a failed run adds failed=<reason>). Exit status 1 if the run failed,
#   2 if the set-up failed.

set -euo pipefail

source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/serve.sh"

BENCH_TAG=backlog
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-1000000}
R_N=${R_N:-20000}
SIZE=${SIZE:-400}
SESSIONS=${SESSIONS:-250}
BACKOFF=${BACKOFF:-5}
MAX_BACKOFF=${MAX_BACKOFF:-60}
CONCURRENCY=${CONCURRENCY:-250}
SEGMENT_MIB=${SEGMENT_MIB:-}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-1800}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
SMTP_PORT=${SMTP_PORT:-55165}
SINK_PORT=${SINK_PORT:-55265}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results}
STAMP=${STAMP:-$(date +%F)}
HOST=127.0.0.1

needs_sluice_binary() { true; }

make_workdir backlog
TICKER_PID=""
cleanup_processes() {
    kill_wait "$TICKER_PID" TERM 2
    sampler_stop
    kill_wait "$SERVE_PID" TERM 30
    kill_wait "$SINK_PID" TERM 5
}
install_cleanup_traps

ensure_sluice
free_port_or_die "$SMTP_PORT" "$SINK_PORT"

# write_conf FILE DATA_DIR LOG
write_conf() {
    cat >"$1" <<EOF
hostname = "sluice.bench"
data_dir = "$2"
run_as_root = true
log_file = "$3"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]
max_sessions = 2000

[queue]
minimal_backoff_secs = $BACKOFF
maximal_backoff_secs = $MAX_BACKOFF

[delivery]
relayhost = "smtp:[$HOST]:$SINK_PORT"
default_concurrency = $CONCURRENCY
EOF
    if [ -n "$SEGMENT_MIB" ]; then printf '\n[spool]\nsegment_mib = %s\n' "$SEGMENT_MIB" >>"$1"; fi
}

# gen COUNT LABEL: the generator in the foreground; BENCH line in BENCH_LINE
gen() {
    "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions "$SESSIONS" \
        --messages-per-session 1 --count "$1" --size "$SIZE" --recipients 1 --domains 5 \
        --max-seconds "$RUN_TIMEOUT" --interval 10 --ack-log "$W/acks.$2" \
        2>"$W/gen.$2.err" | tee "$W/gen.$2.out" | grep -v '^time' | sed "s/^/[gen $2] /" >&2 || true
    BENCH_LINE=$(grep '^BENCH ' "$W/gen.$2.out" | tail -1 || true)
}
ts_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

fail=""
# ---------------------------------------------------- 1. empty-queue rate ----
log "workload Q: N=$N R_N=$R_N size=$SIZE sessions=$SESSIONS backoff=$BACKOFF/$MAX_BACKOFF tmp=$W"
log "=== 1. empty-queue reference: $R_N messages, sink up"
write_conf "$W/r.toml" "$W/var-r" "$W/maillog.r"
"$SLUICE_BENCH" sink --listen "$HOST:$SINK_PORT" --exit-after "$R_N" --max-seconds "$RUN_TIMEOUT" \
    >"$W/sink.r.out" 2>"$W/sink.r.err" &
SINK_PID=$!
wait_listen "$SINK_PORT" 15 "$SINK_PID" || die "sink did not come up"
serve_start "$W/r.toml" "$SMTP_PORT" || die "sluice serve did not come up"
r_t0=$(now)
gen "$R_N" r
r_msgs=0
[[ $BENCH_LINE =~ messages=([0-9]+) ]] && r_msgs=${BASH_REMATCH[1]}
[ "$r_msgs" = "$R_N" ] || die "reference run: only $r_msgs of $R_N accepted ($BENCH_LINE)"
deadline=$(( $(date +%s) + 300 ))
while kill -0 "$SINK_PID" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
kill_wait "$SINK_PID" TERM 5
SINK_PID=""
serve_stop 60
sinkline=$(grep '^SINK ' "$W/sink.r.out" | tail -1 || true)
[[ $sinkline =~ messages=([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "$R_N" ] \
    || die "reference run: the sink got ${BASH_REMATCH[1]:-?} of $R_N ($sinkline)"
[[ $sinkline =~ last=([0-9.]+) ]]
empty_rate=$(fmt %.1f "$(calc "$R_N / (${BASH_REMATCH[1]} - $r_t0)")")
log "empty-queue rate: $empty_rate msg/s"
rm -rf "$W/var-r"
wait_free "$SINK_PORT" 30 || die "port $SINK_PORT still in use"

# ---------------------------------------------------- 2. inject, hop down ----
log "=== 2. inject $N messages, next hop down"
CONF=$W/q.toml
MAILLOG=$W/maillog
SPOOL=$W/var/spool
IDS=$W/sink.ids
ACKS=$W/acks.q
write_conf "$CONF" "$W/var" "$MAILLOG"
serve_start "$CONF" "$SMTP_PORT" || die "sluice serve did not come up"
sampler_start "$W/samples.csv" "$SPOOL" "$IDS"
ticker() {
    set +e
    while sleep 10; do
        log "spool $(( $(spool_kb "$SPOOL") / 1024 )) MiB in $(seg_count "$SPOOL") segments; sink $(lines "$IDS"); rss $(awk '/^VmRSS:/ { print $2 }' "/proc/$(cat "$W/serve.pid")/status" 2>/dev/null) kB"
    done
}
ticker &
TICKER_PID=$!
gen "$N" q
log "generator: ${BENCH_LINE:-<no BENCH line>}"
inject_rate=n/a
[[ $BENCH_LINE =~ msgs_per_s=([0-9.]+) ]] && inject_rate=${BASH_REMATCH[1]}
acked=$(uniq_lines "$ACKS")
[ "$acked" -gt 0 ] || die "nothing was accepted"
inject_hwm=$(serve_hwm)
inject_rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SERVE_PID/status" 2>/dev/null || true)
log "injected: $acked acknowledged; spool $(spool_kb "$SPOOL") kB; serve VmHWM ${inject_hwm} kB, VmRSS ${inject_rss} kB"

# ------------------------------------------------------------- 3. restart ----
t_stop=$(now)
serve_stop 120
stop_s=$(fmt %.2f "$(calc "$(now) - $t_stop")")
log "=== 3. stopped in $stop_s s; sink up; restarting with the backlog on disk"
sink_start "$SINK_PORT" "$IDS"
off=$(log_offset "$MAILLOG")
serve_start "$CONF" "$SMTP_PORT" 900 || die "sluice serve did not come up with the backlog"
t_exec=$SERVE_EXEC_T
listened=$(log_first_after "$MAILLOG" "$off" 'master: listening on')
restart_s=$(ts_ms "$t_exec" "${listened:-$SERVE_LISTEN_T}")
log "listening after $restart_s s: $(tail -c +"$((off + 1))" "$MAILLOG" | grep -m1 'daemon started' | cut -d' ' -f2- || true)"
deadline=$(( $(date +%s) + 300 ))
while [ "$(lines "$IDS")" = 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
# The mail log is written through a buffer: wait (a bounded while) for the
# line of the delivery the sink has already seen.
first=""
deadline=$(( $(date +%s) + 30 ))
while [ -z "$first" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    first=$(log_first_after "$MAILLOG" "$off" 'status=sent')
    [ -n "$first" ] || sleep 0.2
done
first_delivery_s=n/a
[ -n "$first" ] && first_delivery_s=$(ts_ms "$t_exec" "$first")
log "first delivery $first_delivery_s s after the exec"

# --------------------------------------------------------------- 4. drain ----
log "=== 4. draining (at most $DRAIN_TIMEOUT s)"
deadline=$(( $(date +%s) + DRAIN_TIMEOUT ))
while [ "$(lines "$IDS")" -lt "$acked" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
sleep 2
lost=$(missing_count "$ACKS" "$IDS")
[ "$lost" = 0 ] || fail=${fail:+$fail,}lost_$lost
drain_hwm=$(serve_hwm)
rss_after=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SERVE_PID/status" 2>/dev/null || true)
kill_wait "$TICKER_PID" TERM 2
TICKER_PID=""
sampler_stop
serve_stop 60
kill_wait "$SINK_PID" TERM 5
SINK_PID=""

# first and last status=sent after the restart, and how many
read -r sent_n sent_first sent_last < <(tail -c +"$((off + 1))" "$MAILLOG" | grep 'status=sent' \
    | awk 'NR == 1 { f = $1 } { l = $1; n++ } END { print n + 0, f, l }')
drain_s=n/a; drain_rate=n/a; ratio=n/a
if [ "$sent_n" -gt 1 ]; then
    drain_s=$(fmt %.2f "$(calc "$(date -d "$sent_last" +%s.%3N) - $(date -d "$sent_first" +%s.%3N)")")
    drain_rate=$(fmt %.1f "$(calc "$sent_n / $drain_s")")
    ratio=$(fmt %.2f "$(calc "$drain_rate / $empty_rate")")
fi
delivered=$(uniq_lines "$IDS")
dups=$(( $(lines "$IDS") - delivered ))
deferrals=$(grep -c 'status=deferred' "$MAILLOG" || true)
peak_kb=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$W/samples.csv")
peak_rss=$inject_hwm
[ "${drain_hwm:-0}" -gt "${peak_rss:-0}" ] && peak_rss=$drain_hwm
log "drain: $sent_n sent in $drain_s s = $drain_rate msg/s (empty queue: $empty_rate msg/s); lost $lost, duplicates $dups; $deferrals deferral lines while the hop was down"

mkdir -p "$RESULTS_DIR"
cp "$W/samples.csv" "$RESULTS_DIR/backlog-$STAMP.csv"
chart_column "$RESULTS_DIR/backlog-$STAMP.csv" 1 "spool disk use (KiB, du -sk)" \
    "Workload Q: spool use, inject $N (hop down), restart, drain ($STAMP)" \
    "sluice spool" "$RESULTS_DIR/backlog-$STAMP-spool.svg"
chart_column "$RESULTS_DIR/backlog-$STAMP.csv" 4 "sluice serve VmRSS (KiB)" \
    "Workload Q: memory, inject $N (hop down), restart, drain ($STAMP)" \
    "sluice RSS" "$RESULTS_DIR/backlog-$STAMP-rss.svg"

keep_if_failed "$fail"
l="RESULT system=sluice workload=Q n=$N size=$SIZE acked=$acked delivered=$delivered lost=$lost"
l+=" duplicates=$dups inject_msgs_per_s=$inject_rate deferrals=$deferrals stop_s=$stop_s"
l+=" restart_s=$restart_s first_delivery_s=$first_delivery_s drain_s=$drain_s"
l+=" drain_msgs_per_s=$drain_rate empty_queue_msgs_per_s=$empty_rate drain_vs_empty=$ratio"
l+=" peak_rss_kb=${peak_rss:-n/a} inject_hwm_kb=${inject_hwm:-n/a} drain_hwm_kb=${drain_hwm:-n/a}"
l+=" rss_after_drain_kb=${rss_after:-n/a} peak_spool_kb=$peak_kb backoff=$BACKOFF/$MAX_BACKOFF"
[ -n "$fail" ] && l+=" failed=$fail"
report "$RESULTS_DIR/backlog-$STAMP.txt" "$l"
[ -z "$fail" ]

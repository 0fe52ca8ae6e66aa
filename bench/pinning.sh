#!/usr/bin/env bash
# bench/pinning.sh — workload P (pinning) of /work/shared/BENCH.md.
#
# What it measures
#   Whether a few messages that can never be delivered pin the spool: one
#   `sluice serve` on 127.0.0.1:$SMTP_PORT with small segments
#   ([spool] segment_mib = $SEGMENT_MIB) and two destinations in [transport]:
#     good.test -> `sluice-bench sink` on 127.0.0.1:$SINK_PORT (records Message-IDs)
#     bad.test  -> bench/lib/tempfail_smtp.py on 127.0.0.1:$BAD_PORT, which
#                  answers 451 4.3.0 to every RCPT (or MAIL: TEMPFAIL_AT)
#   First $DEFERRED messages to bad.test go in, and the script waits until
#   each has been tried and deferred (mail log). Then $N messages of $SIZE
#   bytes to good.test (`sluice-bench bench`, $SESSIONS sessions, --ack-log), and
#   the script waits until every acknowledged one reached the sink, then
#   $SETTLE s more (compaction also runs while idle). Every second it
#   samples the spool (du -sk data_dir/spool, number of *.seg), the sink's
#   count and the daemon's RSS into a CSV, and draws the disk use over time
#   (bench/chart.py). The claim: at the end, spool use stays within
#   $PIN_LIMIT_SEGMENTS segments (follows the live queue), instead of
#   holding everything written since the oldest deferred message; else the
#   run FAILS. Last, the daemon is stopped (SIGTERM) and started again, and
#   its "daemon started: ... M messages to deliver" line must show the
#   deferred messages still queued (M = $DEFERRED: nothing lost, nothing
#   left over).
#
# How to run (nothing is installed; python3 for the 4xx server and chart):
#   bash bench/pinning.sh                    # full size
#   N=20000 SETTLE=10 bash bench/pinning.sh  # quick
#
# Environment
#   N=200000           messages to good.test (BENCH.md says 300,000; the
#                      spool grows by ~0.5 KiB per 400 B message, so 200,000
#                      already fill ~25 segments of 4 MiB if pinned)
#   SIZE=400           message size in bytes
#   SESSIONS=100       concurrent generator sessions
#   DEFERRED=5         messages to bad.test, sent first
#   SEGMENT_MIB=4      [spool] segment_mib
#   BACKOFF=10         [queue] minimal_backoff_secs (maximal: 6 x that): the
#                      deferred messages are retried (and deferred again)
#                      during the run
#   SETTLE=30          seconds to keep sampling after the good mail is in
#   PIN_LIMIT_SEGMENTS=4   the final spool must be <= this many segments
#   TEMPFAIL_AT=rcpt   rcpt | mail: where the bad destination says 451
#   DRAIN_TIMEOUT=600  seconds to wait for the good mail after the generator
#   RUN_TIMEOUT=1800   the generator's --max-seconds
#   SMTP_PORT=55145 SINK_PORT=55245 BAD_PORT=55246
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   binary for everything
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   KEEP=0             1: keep the temp dir
#   RESULTS_DIR=bench/results   pinning-$STAMP.{txt,csv,svg} go here
#   STAMP=YYYY-MM-DD
#
# Output
#   Progress on stderr. Files: $RESULTS_DIR/pinning-$STAMP.csv (the samples:
#   secs,spool_kb,segments,delivered,rss_kb), pinning-$STAMP.svg (spool
#   disk use over time), and the RESULT line appended to pinning-$STAMP.txt.
#   Last, on stdout:
#     RESULT system=sluice workload=P n=<N> size=<B> segment_mib=<M>
#       deferred=<D> acked=<n> delivered=<n> lost=<n> inject_msgs_per_s=<x>
#       peak_spool_kb=<kb> peak_segments=<n> delivered_spool_kb=<kb when all
#       good mail was in> final_spool_kb=<kb> final_segments=<n>
#       limit_kb=<kb> deferred_still_queued=<by the mail log>
#       queued_after_restart=<by the restarted daemon> tempfails=<451s sent>
#       peak_rss_kb=<VmHWM>
#   (a failed run adds failed=<reason>). Exit status 1 if the run failed,
#   2 if the set-up failed.

set -euo pipefail

source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/serve.sh"

BENCH_TAG=pinning
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-200000}
SIZE=${SIZE:-400}
SESSIONS=${SESSIONS:-100}
DEFERRED=${DEFERRED:-5}
SEGMENT_MIB=${SEGMENT_MIB:-4}
BACKOFF=${BACKOFF:-10}
SETTLE=${SETTLE:-30}
PIN_LIMIT_SEGMENTS=${PIN_LIMIT_SEGMENTS:-4}
TEMPFAIL_AT=${TEMPFAIL_AT:-rcpt}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-600}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
SMTP_PORT=${SMTP_PORT:-55145}
SINK_PORT=${SINK_PORT:-55245}
BAD_PORT=${BAD_PORT:-55246}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results}
STAMP=${STAMP:-$(date +%F)}
HOST=127.0.0.1

needs_sluice_binary() { true; }
command -v python3 >/dev/null || die "python3 is needed (4xx server, chart)"

make_workdir pinning
BAD_PID=""
TICKER_PID=""
cleanup_processes() {
    kill_wait "$TICKER_PID" TERM 2
    sampler_stop
    kill_wait "$SERVE_PID" TERM 30
    kill_wait "$SINK_PID" TERM 5
    kill_wait "$BAD_PID" TERM 5
}
install_cleanup_traps

ensure_sluice
free_port_or_die "$SMTP_PORT" "$SINK_PORT" "$BAD_PORT"

CONF=$W/sluice.toml
MAILLOG=$W/maillog
SPOOL=$W/var/spool
IDS=$W/sink.ids
CSV=$W/samples.csv
cat >"$CONF" <<EOF
hostname = "sluice.bench"
data_dir = "$W/var"
run_as_root = true
log_file = "$MAILLOG"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]
max_sessions = 2000

[spool]
segment_mib = $SEGMENT_MIB

[queue]
minimal_backoff_secs = $BACKOFF
maximal_backoff_secs = $((BACKOFF * 6))

[delivery]
default_concurrency = 250

[transport]
"good.test" = "smtp:[$HOST]:$SINK_PORT"
"bad.test" = "smtp:[$HOST]:$BAD_PORT"

# Mail to domains with no route (bounces) looks up MX records: point
# the resolver at a port where nothing answers, so no query leaves the
# machine.
[dns]
nameservers = ["127.0.0.1:9"]
timeout_ms = 300
attempts = 1
EOF

log "workload P: N=$N size=$SIZE segment_mib=$SEGMENT_MIB deferred=$DEFERRED backoff=${BACKOFF}s tmp=$W"
sink_start "$SINK_PORT" "$IDS"
python3 "$REPO/bench/lib/tempfail_smtp.py" "$HOST:$BAD_PORT" --at "$TEMPFAIL_AT" \
    --stats "$W/bad.stats" 2>"$W/bad.err" &
BAD_PID=$!
wait_listen "$BAD_PORT" 15 "$BAD_PID" || die "tempfail_smtp.py did not come up"
serve_start "$CONF" "$SMTP_PORT" || die "sluice serve did not come up"
sampler_start "$CSV" "$SPOOL" "$IDS"

# bench_run LABEL COUNT TEMPLATE SESSIONS: one generator run in the
# foreground; its BENCH line in BENCH_LINE.
bench_run() {
    "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions "$4" --count "$2" \
        --size "$SIZE" --recipient-template "$3" --recipient-count 1000 \
        --max-seconds "$RUN_TIMEOUT" --interval 5 --ack-log "$W/acks.$1" \
        >"$W/gen.$1.out" 2>"$W/gen.$1.err" || true
    BENCH_LINE=$(grep '^BENCH ' "$W/gen.$1.out" | tail -1 || true)
    log "generator ($1): ${BENCH_LINE:-<no BENCH line>}"
}
deferred_count() { grep -c '@bad\.test>.*status=deferred' "$MAILLOG" || true; }

fail=""
# ------------------------------------------------------- deferred first ----
bench_run bad "$DEFERRED" 'stuck{n}@bad.test' 1
[ "$(lines "$W/acks.bad")" = "$DEFERRED" ] || die "only $(lines "$W/acks.bad") of $DEFERRED bad.test messages were accepted"
deadline=$(( $(date +%s) + 60 ))
while [ "$(deferred_count)" -lt "$DEFERRED" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
[ "$(deferred_count)" -ge "$DEFERRED" ] || die "the bad.test messages were not deferred within 60 s: $(grep -m3 'bad\.test' "$MAILLOG")"
log "$DEFERRED messages to bad.test deferred: $(grep -m1 '@bad\.test>.*status=deferred' "$MAILLOG" | cut -d' ' -f3-)"

# ------------------------------------------------------------ good mail ----
ticker() {
    set +e
    while sleep 10; do
        log "spool $(spool_kb "$SPOOL") kB in $(seg_count "$SPOOL") segments; sink $(lines "$IDS")"
    done
}
ticker &
TICKER_PID=$!
gen_t0=$(now)
bench_run good "$N" 'u{n}@good.test' "$SESSIONS"
inject_rate=n/a
[[ $BENCH_LINE =~ msgs_per_s=([0-9.]+) ]] && inject_rate=${BASH_REMATCH[1]}
acked=$(uniq_lines "$W/acks.good")
[ "$acked" -gt 0 ] || fail="nothing_acked"

log "waiting (at most $DRAIN_TIMEOUT s) until all $acked acknowledged good messages reached the sink"
deadline=$(( $(date +%s) + DRAIN_TIMEOUT ))
while [ "$(lines "$IDS")" -lt "$acked" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
lost=$(missing_count "$W/acks.good" "$IDS")
[ "$lost" = 0 ] || fail=${fail:+$fail,}lost_$lost
delivered=$(uniq_lines "$IDS")
delivered_kb=$(spool_kb "$SPOOL")
log "good mail delivered after $(fmt %.1f "$(calc "$(now) - $gen_t0")") s (lost $lost); spool $delivered_kb kB in $(seg_count "$SPOOL") segments; settling $SETTLE s"
sleep "$SETTLE"
final_kb=$(spool_kb "$SPOOL")
final_segs=$(seg_count "$SPOOL")
kill_wait "$TICKER_PID" TERM 2
TICKER_PID=""
sampler_stop
peak_rss=$(serve_hwm)

# Deferred messages still queued, by the log: queue IDs whose latest line
# for a bad.test recipient says deferred.
still=$(grep '@bad\.test>' "$MAILLOG" | awk '{
    q = $3; sub(/:$/, "", q)
    if (match($0, /status=[a-z]+/)) st[q] = substr($0, RSTART + 7, RLENGTH - 7)
} END { n = 0; for (q in st) if (st[q] == "deferred") n++; print n }')

# ...and by the daemon itself: stop, start again, read its start line.
serve_stop 60
off=$(log_offset "$MAILLOG")
serve_start "$CONF" "$SMTP_PORT" || die "sluice serve did not come up again"
sleep 1
startline=$(tail -c +"$((off + 1))" "$MAILLOG" | grep -m1 'daemon started' || true)
queued=n/a
[[ $startline =~ ([0-9]+)\ messages\ to\ deliver ]] && queued=${BASH_REMATCH[1]}
log "after a restart: ${startline#* }"
serve_stop 60
kill_wait "$SINK_PID" TERM 5
SINK_PID=""
kill_wait "$BAD_PID" TERM 5
BAD_PID=""
tempfails=n/a
[ -f "$W/bad.stats" ] && [[ $(cat "$W/bad.stats") =~ tempfails=([0-9]+) ]] && tempfails=${BASH_REMATCH[1]}

# ---------------------------------------------------------------- report ----
peak_kb=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$CSV")
peak_segs=$(awk -F, 'NR > 1 && $3 > m { m = $3 } END { print m + 0 }' "$CSV")
limit_kb=$((PIN_LIMIT_SEGMENTS * SEGMENT_MIB * 1024))
if [ "$final_kb" -gt "$limit_kb" ]; then
    fail=${fail:+$fail,}final_spool_${final_kb}kB_over_${limit_kb}kB
fi
[ "$still" = "$DEFERRED" ] || fail=${fail:+$fail,}deferred_still_queued_$still
[ "$queued" = "$DEFERRED" ] || fail=${fail:+$fail,}queued_after_restart_$queued

mkdir -p "$RESULTS_DIR"
cp "$CSV" "$RESULTS_DIR/pinning-$STAMP.csv"
chart_column "$RESULTS_DIR/pinning-$STAMP.csv" 1 "spool disk use (KiB, du -sk)" \
    "Workload P: spool use, $N msgs to a good hop, $DEFERRED always deferred, segment_mib=$SEGMENT_MIB ($STAMP)" \
    "sluice spool" "$RESULTS_DIR/pinning-$STAMP.svg"

keep_if_failed "$fail"
l="RESULT system=sluice workload=P n=$N size=$SIZE segment_mib=$SEGMENT_MIB deferred=$DEFERRED"
l+=" acked=$acked delivered=$delivered lost=$lost inject_msgs_per_s=$inject_rate"
l+=" peak_spool_kb=$peak_kb peak_segments=$peak_segs delivered_spool_kb=$delivered_kb"
l+=" final_spool_kb=$final_kb final_segments=$final_segs limit_kb=$limit_kb"
l+=" deferred_still_queued=$still queued_after_restart=$queued tempfails=$tempfails peak_rss_kb=${peak_rss:-n/a}"
[ -n "$fail" ] && l+=" failed=$fail"
report "$RESULTS_DIR/pinning-$STAMP.txt" "$l"
[ -z "$fail" ]

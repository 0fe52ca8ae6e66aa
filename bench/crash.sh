#!/usr/bin/env bash
# bench/crash.sh — workload K (crash) of /work/shared/BENCH.md.
#
# What it measures
#   Generator (`sluice-bench bench --ack-log`) -> `sluice serve` on 127.0.0.1:$SMTP_PORT
#   (durability on: sync before 250) -> sink (`sluice-bench sink --message-ids`) on
#   127.0.0.1:$SINK_PORT, like workload R (one message per connection, one
#   recipient, 5 domains), $SESSIONS sessions, $N messages of $SIZE bytes.
#   While the generator runs, `sluice serve` is SIGKILLed $KILLS times at
#   random moments ($KILL_MIN..$KILL_MAX s apart) and restarted at once on
#   the same data_dir each time. The generator keeps going (refused
#   connections count as errors, sessions retry after a pause). After it
#   ends, the script waits until every acknowledged message has reached the
#   sink (at most $DRAIN_TIMEOUT s), then until the sink count stays still
#   for $SETTLE s, and compares, by Message-ID:
#     acked       distinct IDs the generator got a 2xx to the final dot for
#     delivered   distinct IDs the sink received
#     lost        acked - delivered (must be 0: otherwise the run FAILS)
#     duplicates  sink lines - distinct sink IDs (and dup_rate = duplicates
#                 / delivered)
#     unacked_delivered  delivered but never acknowledged (the kill came
#                 between the sync and the 250 reaching the client: allowed)
#   and, for each restart, from the exec of the new process (the script's
#   clock) to its `listening on` line and to the first `status=sent` line in
#   the mail log (log timestamps, ms; the log of a killed process may miss
#   its last ~20 ms, never lines of the new one). Also the damage the restarts reported
#   (`spool recovery:` log lines) and files quarantined in spool/corrupt/.
#
# How to run (as root or not; nothing is installed):
#   bash bench/crash.sh                                   # full size
#   N=20000 KILLS=2 KILL_MIN=1 KILL_MAX=3 bash bench/crash.sh   # quick
#
# Environment
#   N=500000           messages the generator sends (errors included); Sluice
#                      takes ~9,000 msg/s here, so the run lasts ~1 min, time
#                      for 5 kills 3-8 s apart under load
#   SIZE=400           message size in bytes
#   SESSIONS=100       concurrent generator sessions
#   KILLS=5            SIGKILLs (only while the generator runs: if it ends
#                      first, fewer; the RESULT says kills=<done>)
#   KILL_MIN=3 KILL_MAX=8   seconds between kills (uniform, ms resolution)
#   SEED=<pid>         seed of the kill moments ($RANDOM)
#   BACKOFF=5          [queue] minimal_backoff_secs (maximal: 6 x that)
#   CONCURRENCY=250    [delivery] default_concurrency
#   DRAIN_TIMEOUT=300  seconds to wait for the acknowledged mail after the
#                      generator ends
#   SETTLE=5           seconds the sink count must stay still at the end
#   RUN_TIMEOUT=1800   the generator's --max-seconds
#   SMTP_PORT=55135 SINK_PORT=55235
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   binary for everything
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   KEEP=0             1: keep the temp dir (maillog, spool, ID lists)
#   RESULTS_FILE=bench/results/crash-YYYY-MM-DD.txt   where the RESULT line goes
#     (beside it, crash-YYYY-MM-DD.svg: messages acknowledged per second,
#     the kills showing as dips)
#
# Output
#   Progress on stderr. Last, one line:
#     RESULT system=sluice workload=K n=<N> size=<B> sessions=<S>
#       acked=<n> delivered=<n> lost=<n> duplicates=<n> dup_rate=<x>
#       unacked_delivered=<n> gen_errors=<n> kills=<done> kills_planned=<K>
#       recovery_ms_max=<exec -> "daemon started" (spool recovered), ms>
#       restart_to_listen_ms_max=<ms> restart_to_first_delivery_ms_max=<ms>
#       restart_to_first_delivery_ms=<ms,ms,...> recovery_damage=<lines>
#       corrupt_files=<n> drain_s=<s after the generator ended> seed=<SEED>
#   (a failed run adds failed=<reason>), also appended, with date and commit,
#   to $RESULTS_FILE. Exit status 1 if the run failed (lost > 0, drain
#   timeout, a restart that did not come up), 2 if the set-up failed.

set -euo pipefail

# log, die, calc, fmt, kill_wait, ports, cleanup trap, results file:
# lib/common.sh; sluice serve/sink helpers: lib/serve.sh.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/serve.sh"

BENCH_TAG=crash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-500000}
SIZE=${SIZE:-400}
SESSIONS=${SESSIONS:-100}
KILLS=${KILLS:-5}
KILL_MIN=${KILL_MIN:-3}
KILL_MAX=${KILL_MAX:-8}
SEED=${SEED:-$$}
BACKOFF=${BACKOFF:-5}
CONCURRENCY=${CONCURRENCY:-250}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-300}
SETTLE=${SETTLE:-5}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
SMTP_PORT=${SMTP_PORT:-55135}
SINK_PORT=${SINK_PORT:-55235}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/crash-$(date +%F).txt}
HOST=127.0.0.1

needs_sluice_binary() { true; }
[ "$KILL_MAX" -ge "$KILL_MIN" ] || die "KILL_MAX must be >= KILL_MIN"
RANDOM=$SEED

make_workdir crash
GEN_PID=""
TICKER_PID=""
cleanup_processes() {
    kill_wait "$TICKER_PID" TERM 2
    kill_wait "$GEN_PID" TERM 40
    kill_wait "$SERVE_PID" TERM 30
    kill_wait "$SINK_PID" TERM 5
}
install_cleanup_traps

ensure_sluice
free_port_or_die "$SMTP_PORT" "$SINK_PORT"

CONF=$W/sluice.toml
MAILLOG=$W/maillog
ACKS=$W/acked.ids
IDS=$W/sink.ids
cat >"$CONF" <<EOF
hostname = "sluice.bench"
data_dir = "$W/var"
run_as_root = true
log_file = "$MAILLOG"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]
max_sessions = 2000

[queue]
minimal_backoff_secs = $BACKOFF
maximal_backoff_secs = $((BACKOFF * 6))

[delivery]
relayhost = "smtp:[$HOST]:$SINK_PORT"
default_concurrency = $CONCURRENCY
EOF

log "workload K: N=$N size=$SIZE sessions=$SESSIONS kills=$KILLS every ${KILL_MIN}-${KILL_MAX}s seed=$SEED tmp=$W"
sink_start "$SINK_PORT" "$IDS"
serve_start "$CONF" "$SMTP_PORT" || die "sluice serve did not come up"

ticker() {
    set +e
    local t0
    t0=$(date +%s)
    while sleep 5; do
        log "[+$(( $(date +%s) - t0 ))s] acked $(lines "$ACKS"), sink $(lines "$IDS"), serve pid $(cat "$W/serve.pid")"
    done
}
ticker &
TICKER_PID=$!

timeout -k 10 $((RUN_TIMEOUT + 60)) \
    "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions "$SESSIONS" \
    --messages-per-session 1 --count "$N" --size "$SIZE" --recipients 1 \
    --domains 5 --max-seconds "$RUN_TIMEOUT" --interval 1 --ack-log "$ACKS" \
    --chart "${RESULTS_FILE%.txt}.svg" \
    >"$W/gen.out" 2>"$W/gen.err" &
GEN_PID=$!

# ---------------------------------------------------------------- kills ----
gen_running() { kill -0 "$GEN_PID" 2>/dev/null; }
R_EXEC=(); R_OFF=(); R_LISTEN_MS=()
fail=""
kills=0
LAST_OFF=0
while [ "$kills" -lt "$KILLS" ]; do
    delay_ms=$(( KILL_MIN * 1000 + (RANDOM * 32768 + RANDOM) % ((KILL_MAX - KILL_MIN) * 1000 + 1) ))
    t_end=$(( $(date +%s%3N) + delay_ms ))
    while gen_running && [ "$(date +%s%3N)" -lt "$t_end" ]; do sleep 0.05; done
    gen_running || break
    serve_kill
    kills=$((kills + 1))
    off=$(log_offset "$MAILLOG")
    if ! serve_start "$CONF" "$SMTP_PORT"; then
        fail="restart_${kills}_did_not_come_up"
        log "restart $kills: sluice serve did not come up"
        break
    fi
    R_EXEC+=("$SERVE_EXEC_T"); R_OFF+=("$off"); LAST_OFF=$off
    R_LISTEN_MS+=("$(awk -v a="$SERVE_EXEC_T" -v b="$SERVE_LISTEN_T" 'BEGIN { printf "%d", (b - a) * 1000 }')")
    log "kill $kills after ${delay_ms} ms: restarted, listening (polled) after ${R_LISTEN_MS[-1]} ms (acked so far $(lines "$ACKS"), sink $(lines "$IDS"))"
done
[ "$kills" -lt "$KILLS" ] && [ -z "$fail" ] && log "generator ended before all $KILLS kills: $kills done (raise N or lower KILL_MAX)"

gen_rc=0
wait "$GEN_PID" || gen_rc=$?
GEN_PID=""
GEN_END=$(now)
benchline=$(grep '^BENCH ' "$W/gen.out" | tail -1 || true)
log "generator (rc=$gen_rc): ${benchline:-<no BENCH line>}"
grep -m3 '^bench:' "$W/gen.err" >&2 || true
gen_errors=n/a
[[ $benchline =~ errors=([0-9]+) ]] && gen_errors=${BASH_REMATCH[1]}
[ -n "$benchline" ] || fail=${fail:-generator_rc_$gen_rc}

# ---------------------------------------------------------------- drain ----
drain_s=n/a
if [ -z "$fail" ]; then
    log "waiting (at most $DRAIN_TIMEOUT s) until every acknowledged message reached the sink"
    deadline=$(( $(date +%s) + DRAIN_TIMEOUT ))
    while true; do
        missing=$(missing_count "$ACKS" "$IDS")
        [ "$missing" = 0 ] && break
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "drain timeout: $missing acknowledged messages not at the sink"
            break
        fi
        sleep 2
    done
    drain_s=$(fmt %.1f "$(calc "$(now) - $GEN_END")")
    # Late duplicates: wait until the sink count has not moved for SETTLE s.
    prev=-1; still=0
    while [ "$still" -lt "$SETTLE" ] && [ "$(date +%s)" -lt $((deadline + 60)) ]; do
        cur=$(lines "$IDS")
        if [ "$cur" = "$prev" ]; then still=$((still + 1)); else still=0; prev=$cur; fi
        sleep 1
    done
fi
kill_wait "$TICKER_PID" TERM 2
TICKER_PID=""
serve_stop 60
kill_wait "$SINK_PID" TERM 5
SINK_PID=""

# -------------------------------------------------------------- analysis ----
acked_lines=$(lines "$ACKS")
acked=$(uniq_lines "$ACKS")
delivered_lines=$(lines "$IDS")
delivered=$(uniq_lines "$IDS")
lost=$(missing_count "$ACKS" "$IDS")
duplicates=$((delivered_lines - delivered))
dup_rate=$(fmt %.6f "$(calc "$duplicates / ($delivered > 0 ? $delivered : 1)")")
unacked_delivered=$(comm -13 <(sort -u "$ACKS") <(sort -u "$IDS") | wc -l | tr -d ' ')
[ "$acked_lines" = "$acked" ] || log "WARNING: the ack log has $((acked_lines - acked)) repeated IDs"

listen_max=0; first_max=0; first_list=(); recovery_max=0
for i in "${!R_EXEC[@]}"; do
    started=$(log_first_after "$MAILLOG" "${R_OFF[$i]}" 'daemon started')
    listened=$(log_first_after "$MAILLOG" "${R_OFF[$i]}" 'master: listening on')
    sent=$(log_first_after "$MAILLOG" "${R_OFF[$i]}" 'status=sent')
    # The log's time of the bind (ms); the script's poll (ss every 0.1 s)
    # only if the line is missing.
    [ -n "$listened" ] && R_LISTEN_MS[i]=$(awk -v a="${R_EXEC[$i]}" -v b="$listened" 'BEGIN { printf "%d", (b - a) * 1000 }')
    [ "${R_LISTEN_MS[$i]}" -gt "$listen_max" ] && listen_max=${R_LISTEN_MS[$i]}
    if [ -n "$sent" ]; then
        ms=$(awk -v a="${R_EXEC[$i]}" -v b="$sent" 'BEGIN { printf "%d", (b - a) * 1000 }')
        [ "$ms" -gt "$first_max" ] && first_max=$ms
    else
        ms=none
    fi
    rec=n/a
    if [ -n "$started" ]; then
        rec=$(awk -v a="${R_EXEC[$i]}" -v b="$started" 'BEGIN { printf "%d", (b - a) * 1000 }')
        [ "$rec" -gt "$recovery_max" ] && recovery_max=$rec
    fi
    log "restart $((i + 1)): exec -> 'daemon started' ${rec} ms, -> listening ${R_LISTEN_MS[$i]} ms, -> first status=sent ${ms} ms; $(tail -c +"$(( R_OFF[i] + 1 ))" "$MAILLOG" | grep -m1 'daemon started' | cut -d' ' -f2- || true)"
    first_list+=("$ms")
done
damage=$(grep -c 'spool recovery:' "$MAILLOG" || true)
[ "$damage" -gt 0 ] && grep 'spool recovery:' "$MAILLOG" | head -10 >&2
corrupt=$(count_files "$W/var/spool/corrupt")
grep -q 'daemon stopped' <(tail -c +"$(( LAST_OFF + 1 ))" "$MAILLOG") \
    || log "WARNING: no 'daemon stopped' line after the final SIGTERM"

log "acked=$acked delivered=$delivered lost=$lost duplicates=$duplicates unacked_delivered=$unacked_delivered"
if [ "$lost" != 0 ]; then
    log "LOST acknowledged messages (first 10 of $lost):"
    comm -23 <(sort -u "$ACKS") <(sort -u "$IDS") | head -10 >&2
    fail=${fail:+$fail,}lost_$lost
fi
[ "$acked" -gt 0 ] || fail=${fail:+$fail,}nothing_acked
keep_if_failed "$fail"

first_csv=$(IFS=,; echo "${first_list[*]:-none}")
l="RESULT system=sluice workload=K n=$N size=$SIZE sessions=$SESSIONS acked=$acked delivered=$delivered"
l+=" lost=$lost duplicates=$duplicates dup_rate=$dup_rate unacked_delivered=$unacked_delivered"
l+=" gen_errors=$gen_errors kills=$kills kills_planned=$KILLS recovery_ms_max=$recovery_max restart_to_listen_ms_max=$listen_max"
l+=" restart_to_first_delivery_ms_max=$first_max restart_to_first_delivery_ms=$first_csv"
l+=" recovery_damage=$damage corrupt_files=$corrupt drain_s=$drain_s seed=$SEED"
[ -n "$fail" ] && l+=" failed=$fail"
report "$RESULTS_FILE" "$l"
[ -z "$fail" ]

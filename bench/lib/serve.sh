# bench/lib/serve.sh — helpers for the scripts that drive one `sluice serve`
# through crashes, backlogs and full disks (crash.sh, pinning.sh,
# diskfull.sh, backlog.sh).
#
# Sourced after lib/common.sh, never run. Defines functions only.
#
# Globals the functions expect
#   SLUICE        the sluice binary
#   W             temp dir of the run
#   HOST          127.0.0.1
#
# Functions
#   now                      unix time with nanoseconds (date +%s.%N)
#   serve_start CONF PORT [SECS]   starts `sluice serve --config CONF` in the
#                            background (stderr appended to $W/serve.err);
#                            sets SERVE_PID, SERVE_EXEC_T (just before exec)
#                            and SERVE_LISTEN_T (when PORT listened); writes
#                            the pid to $W/serve.pid; returns 1 if it did not
#                            listen within SECS (default 60) or died
#   serve_kill               SIGKILL SERVE_PID and reap it
#   serve_stop [SECS]        SIGTERM (the daemon drains deliveries in flight),
#                            wait up to SECS (default 60), then SIGKILL
#   serve_hwm                VmHWM (kB) of SERVE_PID, or empty
#   sink_start PORT IDS [ARGS...]  starts `sluice-bench sink` on PORT recording every
#                            Message-ID in IDS (stderr to $W/sink.err);
#                            sets SINK_PID; dies if it does not come up
#   lines FILE               number of lines in FILE (0 if missing)
#   uniq_lines FILE          number of distinct lines in FILE
#   missing_count ACKS IDS   lines of ACKS (deduplicated) not in IDS
#   spool_kb DIR             du -sk of DIR (0 if missing)
#   sampler_start CSV SPOOL IDS  every second append
#                            "secs,spool_kb,segments,delivered,rss_kb"
#                            to CSV (header first); rss of the pid in
#                            $W/serve.pid; sets SAMPLER_PID
#   sampler_stop             stops it
#   free_port_or_die PORT... dies if something listens on one of them
#   seg_count DIR            number of DIR/*.seg
#   count_files DIR...       regular files below the DIRs (0 if missing)
#   log_offset FILE          size of FILE in bytes (0 if missing)
#   log_first_after FILE OFFSET ERE   unix time (s.ms) of the first mail log
#                            line after byte OFFSET matching ERE, or empty
#   chart_column CSV COLUMN YLABEL TITLE LEGEND OUT   an SVG of one column of
#                            a sampler CSV over time (bench/chart.py)
#   keep_if_failed FAILED    keep $W for inspection when FAILED is non-empty
#                            or 1 (and KEEP is not already 1)
#   report FILE LINE...      append the RESULT lines to FILE and print them

now() { date +%s.%N; }

SERVE_PID=""
SINK_PID=""
SAMPLER_PID=""

serve_start() {
    local conf=$1 port=$2 secs=${3:-60}
    SERVE_EXEC_T=$(now)
    "$SLUICE" serve --config "$conf" 2>>"$W/serve.err" &
    SERVE_PID=$!
    echo "$SERVE_PID" >"$W/serve.pid"
    if ! wait_listen "$port" "$secs" "$SERVE_PID"; then
        tail -20 "$W/serve.err" >&2 || true
        return 1
    fi
    SERVE_LISTEN_T=$(now)
}

serve_kill() {
    [ -n "$SERVE_PID" ] || return 0
    kill -KILL "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=""
}

serve_stop() {
    kill_wait "$SERVE_PID" TERM "${1:-60}"
    SERVE_PID=""
}

serve_hwm() {
    [ -n "$SERVE_PID" ] || return 0
    awk '/^VmHWM:/ { print $2 }' "/proc/$SERVE_PID/status" 2>/dev/null || true
}

sink_start() {
    local port=$1 ids=$2
    shift 2
    "$SLUICE_BENCH" sink --listen "$HOST:$port" --message-ids "$ids" "$@" \
        >>"$W/sink.out" 2>>"$W/sink.err" &
    SINK_PID=$!
    wait_listen "$port" 15 "$SINK_PID" || {
        tail -5 "$W/sink.err" >&2 || true
        die "sink did not come up on $HOST:$port"
    }
}

lines() { if [ -f "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi; }
uniq_lines() { if [ -f "$1" ]; then sort -u "$1" | wc -l | tr -d ' '; else echo 0; fi; }
missing_count() {
    [ -f "$2" ] || { uniq_lines "$1"; return; }
    comm -23 <(sort -u "$1") <(sort -u "$2") | wc -l | tr -d ' '
}
spool_kb() { if [ -d "$1" ]; then du -sk "$1" 2>/dev/null | cut -f1; else echo 0; fi; }
seg_count() {
    local f=("$1"/*.seg)
    if [ -e "${f[0]}" ]; then echo "${#f[@]}"; else echo 0; fi
}
# count_files DIR...: regular files below the DIRs (0 if none or missing)
count_files() { find "$@" -type f 2>/dev/null | wc -l | tr -d ' ' || true; }

sampler_start() {
    local csv=$1 spool=$2 ids=$3
    (
        set +e
        t0=$(date +%s)
        echo "secs,spool_kb,segments,delivered,rss_kb" >"$csv"
        while true; do
            pid=$(cat "$W/serve.pid" 2>/dev/null)
            rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
            echo "$(( $(date +%s) - t0 )),$(spool_kb "$spool"),$(seg_count "$spool"),$(lines "$ids"),${rss:-0}" >>"$csv"
            sleep 1
        done
    ) &
    SAMPLER_PID=$!
}

sampler_stop() {
    kill_wait "$SAMPLER_PID" TERM 2
    SAMPLER_PID=""
}

free_port_or_die() {
    local p
    for p in "$@"; do
        listening "$p" && die "port $p is already in use on this machine (set the *_PORT knobs)"
    done
    return 0
}

# log_offset FILE: its size in bytes now (0 if missing), to search only what
# is logged after this point.
log_offset() { stat -c %s "$1" 2>/dev/null || echo 0; }

# log_first_after FILE OFFSET ERE: unix time (with ms) of the first line
# after byte OFFSET of the mail log that matches ERE; empty if none.
log_first_after() {
    local line
    line=$(tail -c +"$(( $2 + 1 ))" "$1" 2>/dev/null | grep -m1 -E -- "$3" || true)
    [ -n "$line" ] || return 0
    date -d "${line%% *}" +%s.%3N
}

chart_column() {
    local csv=$1 column=$2 ylabel=$3 title=$4 legend=$5 out=$6
    python3 "$REPO/bench/chart.py" --out "$out" --interval 1 \
        --column "$column" --raw --ylabel "$ylabel" --unit " KiB" \
        --title "$title" "$legend=$csv" \
        && log "chart: $out" || log "chart.py failed"
}

keep_if_failed() {
    if [ "$KEEP" != 1 ] && [ -n "$1" ] && [ "$1" != 0 ]; then
        log "failed run: the temp dir $W is kept for inspection"
        KEEP=1
    fi
}

report() {
    local file=$1
    shift
    append_results "$file" "$@"
    printf '%s\n' "$@"
}

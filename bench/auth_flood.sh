#!/usr/bin/env bash
# bench/auth_flood.sh — the AUTH flood of issue 18 item 3.
#
# What it measures
#   `sluice serve` with two loopback listeners:
#     - the flood listener 127.0.0.1:$FLOOD_PORT, a [[smtpd.listeners]]
#       entry of kind smtp with auth_without_tls = true (the worst case for
#       us: the attacker pays no TLS), AUTH against a static users table of
#       $USERS real users whose argon2id hashes `sluice hash-password` made;
#     - a plain port-25-style listener (smtpd.listen) 127.0.0.1:$PLAIN_PORT.
#   mynetworks = ["127.0.0.1/32"] only, so the flood's source addresses
#   127.0.1.1 … 127.0.1.$SESSIONS (all of 127/8 is loopback on Linux) are
#   strangers, subject to client_auth_failure_limit; [auth]
#   failure_delay_ms and the limit stay at their defaults (1000, 10).
#   Before the flood, a check from 127.0.0.1: EHLO offers AUTH PLAIN, a right
#   password gets 235 and a wrong one 535 (else the set-up is wrong: exit 2).
#   Then $SESSIONS concurrent sessions, one per source address, each
#   connecting, EHLO, then AUTH PLAIN with a ~$PASSWORD_BYTES-byte wrong
#   password (user names alternate between the table's users and unknown
#   ones) again and again until the server closes, then reconnecting, for
#   $DURATION s (bench/lib/auth_flood.py flood). Meanwhile
#   (bench/lib/auth_flood.py watch), from a second process: the daemon's
#   VmRSS every 100 ms, and every 500 ms a connection from 127.0.0.1 to the
#   plain listener timed until its whole 220 greeting is in, then QUIT (and
#   once a second a real user's AUTH from 127.0.0.1 on the flood listener); at
#   the end VmHWM (the peak RSS of the daemon's life) and the daemon's CPU
#   seconds (utime + stime, /proc/PID/stat) over the watch.
#
#   Pass: peak RSS < $RSS_LIMIT_MB MB and every probe got its greeting in
#   < $GREETING_LIMIT_MS ms (a probe that got none fails the run too). A 235
#   to a wrong password fails it as well.
#
# How to run (as root or not; nothing is installed):
#   bash bench/auth_flood.sh                 # 30 s, 200 sessions
#   DURATION=5 bash bench/auth_flood.sh      # quick
#
# Environment
#   DURATION=30          seconds of flood
#   SESSIONS=200         concurrent sessions, each from its own address
#   PASSWORD_BYTES=300   length of each wrong password
#   USERS=3              real users in the table (user1@bench.test, …)
#   FAILURE_DELAY_MS=1000          [auth] failure_delay_ms
#   AUTH_FAILURE_LIMIT=10          smtpd.client_auth_failure_limit (0: none,
#                                  every attempt is hashed: the pool's worst case)
#   RSS_LIMIT_MB=150 GREETING_LIMIT_MS=1000   pass/fail thresholds
#   FLOOD_PORT=55155 PLAIN_PORT=55156
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   binary (copied into
#                        the temp dir right after the build, and run from there;
#                        refused unless it has the hashing pool of 8ca8176).
#                        When another worktree builds into the same target dir,
#                        give this run its own: CARGO_TARGET_DIR=target/bench-auth-flood
#                        (cargo may otherwise take the other worktree's binary
#                        for fresh)
#   SLUICE_BUILD=1       `cargo build --release --locked` first (0: as is)
#   KEEP=0               1: keep the temp dir (config, maillog, CSVs)
#   RESULTS_FILE=bench/results/auth-flood-YYYY-MM-DD.txt   where the RESULT
#     line goes; beside it auth-flood-YYYY-MM-DD[-N].svg (RSS and greeting
#     time over the run; -N when an earlier run of the day has one) and
#     the two CSVs it is drawn from (…-rss.csv, …-greeting.csv).
#
# Output
#   Progress on stderr. Last, one line:
#     RESULT system=sluice workload=auth-flood date=<YYYY-MM-DD> commit=<c>
#       duration_s=<s> sessions=<n> addresses=<n> password_bytes=<n>
#       failure_delay_ms=<ms> auth_failure_limit=<n> peak_rss_mb=<VmHWM>
#       rss_before_mb=<first sample> rss_max_sampled_mb=<max of the samples>
#       threads_max=<n> greeting_ms_max=<ms> greeting_ms_p50=<ms>
#       greeting_ms_p99=<ms> probes=<n> probe_failures=<n>
#       connections=<n> auth_attempts=<replies> attempts_per_s=<x>
#       r235=… r535=… r454=… r421=… (r421_authfail=… r421_errors=…)
#       r_other=… resets=… timeouts=… conn_errors=…
#       daemon_cpu_s=<s> daemon_cpu_pct=<% of one core over the watch>
#       legit_auth_tries=… legit_auth_235=… legit_auth_454=…  (a session
#         from 127.0.0.1, in mynetworks, AUTHs with the right password on the
#         flood listener once a second: does a real user still get in?)
#       client_cpu_s=<the flood client's own CPU seconds>
#       machine_busy_pct=<all cores, /proc/stat, over the watch>
#       load_before=… load_after=<1-min load averages>
#       compilers_seen=<cargo/rustc/cc/ld running during the watch, or none>
#       log_errors=<daemon log lines with panic/fatal/error:>
#       [failed=<reasons>]
#   also appended, with date and commit, to $RESULTS_FILE. Exit status 1 if
#   the run failed (thresholds, a 235, no AUTH reply at all), 2 if the
#   set-up failed.

set -euo pipefail

# log, die, calc, fmt, kill_wait, cleanup trap, append_results: lib/common.sh;
# serve_start/serve_hwm, report, keep_if_failed: lib/serve.sh.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/serve.sh"

BENCH_TAG=auth-flood
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${DURATION:-30}
SESSIONS=${SESSIONS:-200}
PASSWORD_BYTES=${PASSWORD_BYTES:-300}
USERS=${USERS:-3}
FAILURE_DELAY_MS=${FAILURE_DELAY_MS:-1000}
AUTH_FAILURE_LIMIT=${AUTH_FAILURE_LIMIT:-10}
RSS_LIMIT_MB=${RSS_LIMIT_MB:-150}
GREETING_LIMIT_MS=${GREETING_LIMIT_MS:-1000}
FLOOD_PORT=${FLOOD_PORT:-55155}
PLAIN_PORT=${PLAIN_PORT:-55156}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$REPO/$TARGET_DIR ;; esac   # cargo runs in $REPO
SLUICE=${SLUICE:-$TARGET_DIR/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/auth-flood-$(date +%F).txt}
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo none)
# The binary is built from the work tree: say so when it differs from HEAD
# (bench/results aside).
[ "$COMMIT" != none ] && [ -n "$(git -C "$REPO" status --porcelain -- . ':!bench/results' 2>/dev/null)" ] \
    && COMMIT="$COMMIT+dirty"
HOST=127.0.0.1
PY=$REPO/bench/lib/auth_flood.py

[ "$SESSIONS" -ge 1 ] && [ "$SESSIONS" -le 60000 ] || die "SESSIONS must be 1..60000"

make_workdir auth-flood
WATCH_PID=""
FLOOD_PID=""
cleanup_processes() {
    kill_wait "$FLOOD_PID" TERM 5
    kill_wait "$WATCH_PID" TERM 5
    kill_wait "$SERVE_PID" TERM 10
}
install_cleanup_traps

# ---------------------------------------------------------------- binary ----
# Another worktree may build into the same target dir: copy the binary we
# just built into the temp dir and run that copy.
if [ "$SLUICE_BUILD" = 1 ]; then
    log "cargo build --release --locked"
    (cd "$REPO" && cargo build --release --locked --workspace >&2)
fi
[ -x "$SLUICE" ] || die "$SLUICE not found (build it: cargo build --release --locked --workspace)"
log "binary: $SLUICE, built $(stat -c %y "$SLUICE" | cut -d. -f1)"
cp "$SLUICE" "$W/sluice"
SLUICE=$W/sluice
"$SLUICE" --version >&2 || die "the copied binary does not run"
# Two worktrees of this repository building into one target dir share
# artifact names (cargo hashes path packages relative to the workspace
# root) and cargo compares only mtimes: it may call another worktree's
# older binary fresh. The hashing pool (8ca8176) names its threads
# sluice-hash-N: a binary without that string is not the code under test.
grep -aq 'sluice-hash-' "$SLUICE" || die "$SLUICE has no hashing pool (no 'sluice-hash-' thread name): a stale binary, or another worktree's build in a shared target dir; build into a target dir of this run's own, e.g. CARGO_TARGET_DIR=$REPO/target/bench-auth-flood"
free_port_or_die "$FLOOD_PORT" "$PLAIN_PORT"
LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)
busy=$(ps -eo pcpu=,comm= | awk '$1 > 20 && $2 ~ /^(cargo|rustc|cc|ld|clang)/' | head -3 | tr '\n' ' ')
[ -n "$busy" ] && log "WARNING: a compile is using the CPU: $busy(load $LOAD_BEFORE)"

# ---------------------------------------------------------------- config ----
: >"$W/users"
KNOWN=""
for i in $(seq 1 "$USERS"); do
    pw=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    [ "$i" = 1 ] && FIRST_PW=$pw
    hash=$(printf '%s\n' "$pw" | "$SLUICE" hash-password)
    echo "user$i@bench.test $hash" >>"$W/users"
    KNOWN+="user$i@bench.test,"
done
CONF=$W/sluice.toml
MAILLOG=$W/maillog
cat >"$CONF" <<EOF
hostname = "sluice.bench"
data_dir = "$W/var"
run_as_root = true
log_file = "$MAILLOG"

[smtpd]
listen = ["$HOST:$PLAIN_PORT"]
mynetworks = ["127.0.0.1/32"]
client_auth_failure_limit = $AUTH_FAILURE_LIMIT

[[smtpd.listeners]]
listen = "$HOST:$FLOOD_PORT"
kind = "smtp"
auth_without_tls = true

[auth]
table = "users"
failure_delay_ms = $FAILURE_DELAY_MS

[tables.users]
kind = "static"
path = "$W/users"
EOF
"$SLUICE" check-config --config "$CONF" >"$W/check-config.out" 2>&1 \
    || { cat "$W/check-config.out" >&2; die "check-config refused the config"; }

log "AUTH flood: $SESSIONS sessions for ${DURATION}s, ${PASSWORD_BYTES}-byte passwords, failure_delay_ms=$FAILURE_DELAY_MS client_auth_failure_limit=$AUTH_FAILURE_LIMIT, load $LOAD_BEFORE, tmp=$W"
serve_start "$CONF" "$FLOOD_PORT" 30 || die "sluice serve did not come up (see above)"
wait_listen "$PLAIN_PORT" 10 "$SERVE_PID" || die "the plain listener $PLAIN_PORT did not come up"
log "sluice serve pid $SERVE_PID listening on $FLOOD_PORT (flood, AUTH in clear) and $PLAIN_PORT (plain)"

# ---------------------------------------------------------------- check -----
python3 "$PY" check "$HOST:$FLOOD_PORT" user1@bench.test "$FIRST_PW" >"$W/check.out" 2>&1 \
    || { cat "$W/check.out" >&2; die "AUTH set-up check failed (expected EHLO with AUTH PLAIN, 235 right, 535 wrong)"; }
log "$(cat "$W/check.out")"

# ---------------------------------------------------------------- run -------
python3 "$PY" watch --pid "$SERVE_PID" --probe "$HOST:$PLAIN_PORT" \
    --rss-csv "$W/rss.csv" --probe-csv "$W/greeting.csv" \
    --auth-probe "$HOST:$FLOOD_PORT" --auth-user user1@bench.test --auth-password "$FIRST_PW" >"$W/watch.out" &
WATCH_PID=$!
for _ in $(seq 50); do grep -q READY "$W/watch.out" 2>/dev/null && break; sleep 0.1; done
grep -q READY "$W/watch.out" || die "the watcher did not start"
sleep 1   # a second of the idle daemon before the flood
flood_rc=0
python3 "$PY" flood --target "$HOST:$FLOOD_PORT" --sessions "$SESSIONS" --duration "$DURATION" \
    --known "$KNOWN" --password-bytes "$PASSWORD_BYTES" >"$W/flood.out" &
FLOOD_PID=$!
wait "$FLOOD_PID" || flood_rc=$?
FLOOD_PID=""
FLOOD_END_EPOCH=$(date +%s.%N)
kill_wait "$WATCH_PID" TERM 10
WATCH_PID=""
LOAD_AFTER=$(cut -d' ' -f1 /proc/loadavg)
HWM_SHELL=$(serve_hwm)
serve_stop 15
FL=$(grep '^FLOOD ' "$W/flood.out" || true)
WA=$(grep '^WATCH ' "$W/watch.out" || true)
[ -n "$WA" ] || die "no WATCH line from the watcher"
log "$FL"
log "$WA"

# kv LINE KEY: the value of KEY=… in LINE (n/a if absent)
kv() { local v; v=$(tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1); echo "${v:-n/a}"; }

# ---------------------------------------------------------------- report ----
hwm_kb=$(kv "$WA" hwm_kb)
[ "$hwm_kb" = 0 ] && [ -n "$HWM_SHELL" ] && hwm_kb=$HWM_SHELL
peak_mb=$(fmt %.1f "$(calc "$hwm_kb / 1024")")
g_max=$(kv "$WA" greeting_ms_max)
probe_failures=$(kv "$WA" probe_failures)
cpu_s=$(kv "$WA" cpu_s)
wall_s=$(kv "$WA" wall_s)
log_errors=$(grep -ciE 'panic|fatal|error:' "$MAILLOG" 2>/dev/null || true)
log_errors=$((log_errors + $(grep -ciE 'panic' "$W/serve.err" 2>/dev/null || true)))
if [ "$log_errors" -gt 0 ]; then
    log "daemon log lines with panic/fatal/error: (first 10)"
    grep -iE 'panic|fatal|error:' "$MAILLOG" "$W/serve.err" 2>/dev/null | head -10 >&2 || true
fi
log "daemon log: $(grep -c 'authentication failed' "$MAILLOG" || true) 'authentication failed', $(grep -c 'cannot check now' "$MAILLOG" || true) 'cannot check now' (454), $(grep -c 'refused: too many failed' "$MAILLOG" || true) AUTH refused in the penalty, $(grep -c '421 4.7.0 too many failed' "$MAILLOG" || true) sessions ended at the limit"
grep -E 'warning|reject' "$MAILLOG" | sed -E 's/^[^ ]+ //; s/\[127\.[0-9.]+\]/[IP]/g; s/"[^"]*"/"…"/g' \
    | sort | uniq -c | sort -rn | head -8 >&2 || true

fail=""
[ -n "$FL" ] || fail+="${fail:+,}flood_rc_$flood_rc"
awk -v p="$peak_mb" -v l="$RSS_LIMIT_MB" 'BEGIN { exit !(p >= l) }' && {
    log "FAIL: peak RSS $peak_mb MB >= $RSS_LIMIT_MB MB"; fail+="${fail:+,}peak_rss"; }
awk -v g="$g_max" -v l="$GREETING_LIMIT_MS" 'BEGIN { exit !(g == "nan" || g >= l) }' && {
    log "FAIL: greeting max $g_max ms >= $GREETING_LIMIT_MS ms"; fail+="${fail:+,}greeting"; }
[ "$probe_failures" != 0 ] && { log "FAIL: $probe_failures probes got no greeting"; fail+="${fail:+,}probe_failures"; }
if [ -n "$FL" ]; then
    [ "$(kv "$FL" r235)" != 0 ] && { log "FAIL: 235 to a wrong password"; fail+="${fail:+,}r235"; }
    [ "$(kv "$FL" attempts)" = 0 ] && { log "FAIL: no AUTH reply at all"; fail+="${fail:+,}no_attempts"; }
fi
keep_if_failed "$fail"

SVG=${RESULTS_FILE%.txt}.svg
k=1
while [ -e "$SVG" ]; do k=$((k + 1)); SVG=${RESULTS_FILE%.txt}-$k.svg; done
t0=$(kv "$WA" t0_epoch)
fs=$(calc "$(kv "$FL" start_epoch) - $t0" 2>/dev/null || echo 0)
fe=$(calc "${fs:-0} + $(kv "$FL" seconds)" 2>/dev/null || calc "$FLOOD_END_EPOCH - $t0")
mkdir -p "$(dirname "$SVG")"
cp "$W/rss.csv" "${SVG%.svg}-rss.csv"
cp "$W/greeting.csv" "${SVG%.svg}-greeting.csv"
python3 "$PY" chart --rss-csv "$W/rss.csv" --probe-csv "$W/greeting.csv" --out "$SVG" \
    --title "AUTH flood: $SESSIONS sessions from $SESSIONS addresses, ${DURATION}s, $(date +%F) $COMMIT" \
    --rss-limit-mb "$RSS_LIMIT_MB" --greeting-limit-ms "$GREETING_LIMIT_MS" \
    --flood-start "${fs:-0}" --flood-end "$fe" && log "chart: $SVG" || log "chart failed"

l="RESULT system=sluice workload=auth-flood date=$(date +%F) commit=$COMMIT"
l+=" duration_s=$(kv "$FL" seconds) sessions=$SESSIONS addresses=$SESSIONS password_bytes=$PASSWORD_BYTES"
l+=" failure_delay_ms=$FAILURE_DELAY_MS auth_failure_limit=$AUTH_FAILURE_LIMIT"
l+=" peak_rss_mb=$peak_mb rss_before_mb=$(fmt %.1f "$(calc "$(kv "$WA" rss_first_kb) / 1024")")"
l+=" rss_max_sampled_mb=$(fmt %.1f "$(calc "$(kv "$WA" rss_max_kb) / 1024")") threads_max=$(kv "$WA" threads_max)"
l+=" greeting_ms_max=$g_max greeting_ms_p50=$(kv "$WA" greeting_ms_p50) greeting_ms_p99=$(kv "$WA" greeting_ms_p99)"
l+=" probes=$(kv "$WA" probes) probe_failures=$probe_failures"
l+=" connections=$(kv "$FL" connections) auth_attempts=$(kv "$FL" attempts) attempts_per_s=$(kv "$FL" attempts_per_s)"
for c in r235 r535 r454 r421 r421_authfail r421_errors r_other resets timeouts conn_errors; do
    l+=" $c=$(kv "$FL" $c)"
done
l+=" daemon_cpu_s=$cpu_s daemon_cpu_pct=$(fmt %.0f "$(calc "100 * $cpu_s / $wall_s")")"
l+=" legit_auth_tries=$(kv "$WA" legit_auth_tries) legit_auth_235=$(kv "$WA" legit_auth_235) legit_auth_454=$(kv "$WA" legit_auth_454)"
l+=" client_cpu_s=$(kv "$FL" client_cpu_s) machine_busy_pct=$(kv "$WA" machine_busy_pct)"
l+=" load_before=$LOAD_BEFORE load_after=$LOAD_AFTER compilers_seen=$(kv "$WA" compilers_seen) log_errors=$log_errors"
[ -n "$fail" ] && l+=" failed=$fail"
report "$RESULTS_FILE" "$l"
[ -z "$fail" ]

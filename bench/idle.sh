#!/usr/bin/env bash
# bench/idle.sh — workload C of /work/shared/BENCH.md: open SESSIONS (default
# 10000; issue 7 measures 100000) SMTP sessions to Sluice that idle after
# EHLO; report Sluice's RSS per session and how fast a new session still gets
# its greeting. Loopback only.
#
#   bash bench/idle.sh            SESSIONS=100000 SLUICE=target/release/sluice
#
# One process may hold only as many sessions as it may open descriptors
# (`ulimit -Hn`; 20,000 on the reference machine, which does not let root
# raise it). When SESSIONS needs more, PROCS Sluice processes share the port
# (smtpd.reuse_port, SO_REUSEPORT) and PROCS generators open the sessions;
# the RSS reported is the sum over all Sluice processes.
#
# Prints, last, `RESULT system=sluice workload=C sessions=… procs=…
# rss_idle_kb=… rss_open_kb=… kb_per_session=… new_session_greeting_ms=…`
# and appends it, with the date and commit, to
# bench/results/idle-YYYY-MM-DD.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SESSIONS=${SESSIONS:-10000}
SLUICE=${SLUICE:-target/release/sluice}
PORT=${PORT:-55135}
[ -x "$SLUICE" ] || cargo build --release --workspace
ulimit -Hn 1048576 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
PER_PROC=$(( $(ulimit -n) - 1000 ))
PROCS=${PROCS:-$(( (SESSIONS + PER_PROC - 1) / PER_PROC ))}
W=$(mktemp -d)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
for p in $(seq 1 "$PROCS"); do
    mkdir -p "$W/$p"
    cat >"$W/$p/sluice.toml" <<CONF
hostname = "sluice.bench"
data_dir = "$W/$p/var"
run_as_root = true
log_file = "$W/$p/var/maillog"
[smtpd]
listen = ["127.0.0.1:$PORT"]
max_sessions = $((SESSIONS + 100))
reuse_port = $([ "$PROCS" -gt 1 ] && echo true || echo false)
CONF
    "$SLUICE" serve --config "$W/$p/sluice.toml" 2>"$W/$p/serve.err" &
    PIDS+=($!)
done
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
sleep 0.5
rss() { local t=0; for pid in "${PIDS[@]}"; do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$pid/status"))); done; echo "$t"; }
IDLE=$(rss)
# One generator per process's share; each prints OPEN when its sessions are
# up and holds them until it reads a line.
GENS=()
for g in $(seq 1 "$PROCS"); do
    mkfifo "$W/in$g"
    share=$(( SESSIONS / PROCS + (g <= SESSIONS % PROCS ? 1 : 0) ))
    python3 bench/lib/idle.py 127.0.0.1 "$PORT" "$share" <"$W/in$g" >"$W/out$g" 2>"$W/err$g" &
    GENS+=($!)
    exec {fd}>"$W/in$g"
    eval "HOLD$g=$fd"
done
n=0
for g in $(seq 1 "$PROCS"); do
    until grep -q '^OPEN' "$W/out$g"; do
        if ! kill -0 "${GENS[$((g - 1))]}" 2>/dev/null; then cat "$W/err$g" >&2; exit 1; fi
        tail -n1 "$W/err$g" >&2 || true
        sleep 2
    done
    n=$(( n + $(sed -nE 's/^OPEN n=([0-9]+)/\1/p' "$W/out$g") ))
done
sleep 1
OPEN_RSS=$(rss)
PROBE=$(echo | python3 bench/lib/idle.py 127.0.0.1 "$PORT" 0 | grep PROBE)
for g in $(seq 1 "$PROCS"); do fd=HOLD$g; echo >&"${!fd}"; done
wait "${GENS[@]}" 2>/dev/null || true
ms=$(sed -E 's/.*greeting_ms=([0-9.]+).*/\1/' <<<"$PROBE")
per=$(awk -v a="$OPEN_RSS" -v b="$IDLE" -v n="$n" 'BEGIN {printf "%.2f", (a - b) / n}')
line="RESULT system=sluice workload=C sessions=$n procs=$PROCS rss_idle_kb=$IDLE rss_open_kb=$OPEN_RSS kb_per_session=$per new_session_greeting_ms=$ms"
echo "$line"
mkdir -p bench/results
echo "$(date -Iseconds) $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $line" >>"bench/results/idle-$(date +%F).txt"

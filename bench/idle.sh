#!/usr/bin/env bash
# bench/idle.sh — workload C of /work/shared/BENCH.md: open SESSIONS (default
# 10000) SMTP sessions to Sluice that idle after EHLO; report Sluice's RSS per
# session and how fast a new session still gets its greeting. Loopback only.
#
#   bash bench/idle.sh            SESSIONS=10000 SLUICE=target/release/sluice
#
# Prints, last, `RESULT system=sluice workload=C sessions=… rss_idle_kb=…
# rss_open_kb=… kb_per_session=… new_session_greeting_ms=…` and appends it,
# with the date and commit, to bench/results/idle-YYYY-MM-DD.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SESSIONS=${SESSIONS:-10000}
SLUICE=${SLUICE:-target/release/sluice}
PORT=${PORT:-55135}
[ -x "$SLUICE" ] || cargo build --release
ulimit -n "$(ulimit -Hn)"
W=$(mktemp -d)
trap 'kill "$SP" 2>/dev/null; rm -rf "$W"' EXIT
cat >"$W/sluice.toml" <<CONF
hostname = "sluice.bench"
data_dir = "$W/var"
log_file = "$W/var/maillog"
[smtpd]
listen = ["127.0.0.1:$PORT"]
max_sessions = $((SESSIONS + 100))
CONF
"$SLUICE" serve --config "$W/sluice.toml" 2>"$W/serve.err" &
SP=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$SP/status"; }
IDLE=$(rss)
coproc IDLER { python3 bench/lib/idle.py 127.0.0.1 "$PORT" "$SESSIONS"; }
read -r OPEN <&"${IDLER[0]}"
sleep 1
OPEN_RSS=$(rss)
echo >&"${IDLER[1]}"
read -r PROBE <&"${IDLER[0]}"
wait "$IDLER_PID" || true
n=${OPEN#OPEN n=}
ms=$(sed -E 's/.*greeting_ms=([0-9.]+).*/\1/' <<<"$PROBE")
per=$(awk -v a="$OPEN_RSS" -v b="$IDLE" -v n="$n" 'BEGIN {printf "%.2f", (a - b) / n}')
line="RESULT system=sluice workload=C sessions=$n rss_idle_kb=$IDLE rss_open_kb=$OPEN_RSS kb_per_session=$per new_session_greeting_ms=$ms"
echo "$line"
mkdir -p bench/results
echo "$(date -Iseconds) $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $line" >>"bench/results/idle-$(date +%F).txt"

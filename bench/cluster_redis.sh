#!/usr/bin/env bash
# bench/cluster_redis.sh — what a cluster costs Redis: script calls per
# message (docs/SCALING.md).
#
# Two `sluice serve` nodes with a [cluster] section (a cluster-wide cap of
# 20 connections, and a rate of $RATE a minute if set) relay to one sink;
# Postfix's smtp-source sends $N messages to each (20 sessions); Redis's
# INFO commandstats counts the script calls the nodes made meanwhile.
#
#   bash bench/cluster_redis.sh              # cap only
#   RATE=600000 bash bench/cluster_redis.sh  # cap and a rate
#
# Needs redis-server, smtp-source (postfix) and a release build
# (SLUICE=target/release/sluice). Prints, and appends to
# bench/results/cluster-redis-$STAMP.txt:
#   RESULT workload=cluster-redis nodes=2 rate=<per min> messages=<n>
#     seconds=<generator start -> last delivery> script_calls=<n>
#     calls_per_message=<x> usec_per_call=<x>
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SINK=${SINK:-$REPO/target/release/sluice-bench}
RATE=${RATE:-0}
N=${N:-10000}
STAMP=${STAMP:-$(date -u +%F)}
W=$(mktemp -d /tmp/sluice-cluster-redis.XXXXXX)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
say() { echo "[cluster-redis $(date +%T)] $*" >&2; }

redis-server --port 0 --save "" --appendonly no --unixsocket "$W/r.sock" --dir "$W" >"$W/redis.log" 2>&1 &
pids+=($!)
SP=56125
"$SINK" sink --listen 127.0.0.1:$SP >"$W/sink.log" 2>&1 &
pids+=($!)
for i in 1 2; do
    mkdir -p "$W/n$i"
    cat >"$W/n$i/s.toml" <<EOT
hostname = "mx$i.test"
data_dir = "$W/n$i/var"
log_file = "$W/n$i/maillog"
run_as_root = true
[smtpd]
listen = ["127.0.0.1:5612$i"]
mynetworks = ["127.0.0.0/8"]
[delivery]
relayhost = "smtp:[127.0.0.1]:$SP"
[cluster]
redis_url = "unix://$W/r.sock"
node = "n$i"
default_concurrency = 20
default_rate_limit = $RATE
peers = ["127.0.0.1:5612$((3 - i))"]
EOT
done
for _ in $(seq 50); do [ -S "$W/r.sock" ] && break; sleep 0.1; done
for i in 1 2; do
    "$SLUICE" serve --config "$W/n$i/s.toml" 2>"$W/n$i/err" &
    pids+=($!)
done
for i in 1 2; do
    for _ in $(seq 100); do grep -q "listening on" "$W/n$i/maillog" 2>/dev/null && break; sleep 0.1; done
done
redis-cli -s "$W/r.sock" CONFIG RESETSTAT >/dev/null
say "sending $N messages to each node (rate $RATE/min)"
t0=$(date +%s.%N)
smtp-source -s 20 -m "$N" -f a@x.test -t b@y.test 127.0.0.1:56121 & g1=$!
smtp-source -s 20 -m "$N" -f a@x.test -t b@y.test 127.0.0.1:56122 & g2=$!
wait $g1 $g2
sent() { cat "$W"/n*/maillog | grep -c 'status=sent' || true; }
deadline=$((SECONDS + 300))
while [ "$(sent)" -lt $((2 * N)) ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
t1=$(date +%s.%N)
stats=$(redis-cli -s "$W/r.sock" INFO commandstats | tr -d '\r')
calls=$(echo "$stats" | awk -F'[=,:]' '/^cmdstat_evalsha:|^cmdstat_eval:/ {s += $3} END {print s + 0}')
usec=$(echo "$stats" | awk -F'[=,:]' '/^cmdstat_evalsha:|^cmdstat_eval:/ {s += $5} END {print s + 0}')
line=$(awk -v r="$RATE" -v m=$((2 * N)) -v d="$(sent)" -v t0="$t0" -v t1="$t1" -v c="$calls" -v u="$usec" \
    'BEGIN {printf "RESULT workload=cluster-redis nodes=2 rate=%s messages=%d delivered=%d seconds=%.2f script_calls=%d calls_per_message=%.4f usec_per_call=%.1f", r, m, d, t1 - t0, c, c / m, (c ? u / c : 0)}')
echo "$line"
mkdir -p "$REPO/bench/results"
echo "$(date -u +%FT%T%:z) $(git -C "$REPO" rev-parse --short HEAD) $line" >>"$REPO/bench/results/cluster-redis-$STAMP.txt"

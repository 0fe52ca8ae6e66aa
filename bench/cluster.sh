#!/usr/bin/env bash
# bench/cluster.sh — issue 23: does a cluster of Sluice nodes scale, keep
# its shared limits, and lose nothing when a node dies with its disk?
#
# What it sets up (as root; all torn down at exit)
#   A "lan" network namespace with a bridge (198.18.0.254/24, the
#   benchmarking range) holding HAProxy (TCP, PROXY v2, SMTP health
#   checks), the sink (`sluice-bench sink`) and the generators; one
#   namespace per node (198.18.0.N, an address that exists only there),
#   each `sluice serve` held to the same CPU share by a cgroup (v1 cpu
#   controller: cfs_quota = $QUOTA % of one core) and counted by cpuacct.
#   Redis (redis-server) on a Unix socket. Every node relays to the sink
#   with a cluster-wide cap of $CAP connections.
#
# Runs
#   ceiling     smtp-source -> HAProxy -> sink directly: what the harness
#               (generator, HAProxy, sink; outside the quotas) can do
#   scale       for each size in $SIZES: 1, 2, 3 nodes, shadow off; then 2
#               and 3 nodes with shadow copies on. smtp-source (Postfix's,
#               5 processes x $SESSIONS/5 sessions, a message per session)
#               sends $N400 / $N64K messages through HAProxy; the rate is
#               messages / (generator start -> last message at the sink)
#   rate        3 nodes, cluster-wide rate $RATE a minute: the sink's first
#               to last message must be no faster than the rate (+2 %)
#   kill        3 nodes, shadow on, `sluice-bench bench --ack-log` through
#               HAProxy; once a third is acknowledged node 1 is SIGKILLed
#               and its spool deleted. Every acknowledged Message-ID must
#               reach the sink; duplicates and the time until the
#               generator's acknowledgements resume are reported
#
# How to run
#   sudo bash bench/cluster.sh                      # everything (~15 min)
#   SIZES=400 RUNS="ceiling scale" bash bench/cluster.sh
#
# Environment
#   SIZES="400 65536"   N400=20000 N64K=3000
#   SESSIONS_LIST="300 600"   smtp-source sessions, each count a series (a
#                       node fed fewer sessions batches less and spends more
#                       CPU per message: 0.465 ms at 15 vs 0.374 ms at 150);
#                       the rate and kill runs use the first
#   QUOTA=12            each node's CPU, % of one core (3 nodes and the
#                       harness then fit in the 2 cores with room)
#   CAP=20              cluster-wide connections to the sink
#   RATE=12000          messages a minute, cluster-wide (rate run), N_RATE=3000
#   N_KILL=10000        messages of the kill run
#   RUNS="ceiling scale rate kill"   NODES="1 2 3"   SHADOW="off on"
#   SLUICE=target/release/sluice  SLUICE_BUILD=1  KEEP=0
#   RESULTS_FILE=bench/results/cluster-YYYY-MM-DD.txt (chart beside it)
#
# Output: progress on stderr; RESULT lines, appended to $RESULTS_FILE:
#   RESULT workload=cluster-ceiling size=<B> msg_per_s=<x> gen_errors=<n>
#   RESULT workload=cluster nodes=<n> shadow=<on|off> size=<B> messages=<n>
#     seconds=<s> msg_per_s=<x> x_one_node=<x> cpu_ms_per_msg=<x>
#     gen_errors=<n> peak_conns=<n> cap=<n>
#   RESULT workload=cluster-rate nodes=3 limit_per_min=<n> messages=<n>
#     observed_per_min=<x> over_limit_pct=<x> peak_conns=<n> cap=<n>
#   RESULT workload=cluster-kill nodes=3 acked=<n> delivered=<n> lost=<n>
#     duplicates=<n> dup_pct=<x> resumed_s=<x> claimed=<n>
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
BENCH_TAG=cluster
REPO=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
SIZES=${SIZES:-"400 65536"}
N400=${N400:-20000}
N64K=${N64K:-3000}
SESSIONS_LIST=${SESSIONS_LIST:-${SESSIONS:-"300 600"}}
SESSIONS=${SESSIONS_LIST%% *}
QUOTA=${QUOTA:-12}
CAP=${CAP:-20}
RATE=${RATE:-12000}
N_RATE=${N_RATE:-3000}
N_KILL=${N_KILL:-10000}
RUNS=${RUNS:-"ceiling scale rate kill"}
NODES=${NODES:-"1 2 3"}
SHADOW=${SHADOW:-"off on"}
STAMP=$(date -u +%F)
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/cluster-$STAMP.txt}
HUB=198.18.0.254
FRONT=$HUB:2525
SINK_AT=$HUB:2526
now() { date +%s.%N; }
needs_sluice_binary() { true; }

require_root
command -v smtp-source >/dev/null || apt_install postfix
stop_system_postfix
command -v haproxy >/dev/null || apt_install haproxy
command -v redis-server >/dev/null || apt_install redis-server
ensure_sluice
make_workdir cluster
install_cleanup_traps

TAG=slc$$
LAN=$TAG-lan
NODE_PIDS=()
AUX_PIDS=()
RESULTS=()

cleanup_processes() {
    local p
    for p in "${NODE_PIDS[@]}" "${AUX_PIDS[@]}"; do kill_wait "$p" KILL 2; done
    for i in 1 2 3; do
        ip netns del "$TAG-n$i" 2>/dev/null
        rmdir "/sys/fs/cgroup/cpu/$TAG-n$i" "/sys/fs/cgroup/cpuacct/$TAG-n$i" 2>/dev/null
    done
    ip netns del "$LAN" 2>/dev/null
    true
}

in_lan() { ip netns exec "$LAN" "$@"; }

make_lan() {
    ip netns add "$LAN"
    in_lan ip link set lo up
    in_lan ip link add br0 type bridge
    in_lan ip addr add $HUB/24 dev br0
    in_lan ip link set br0 up
    local i
    for i in 1 2 3; do
        ip netns add "$TAG-n$i"
        ip link add "v$i" netns "$LAN" type veth peer name eth0 netns "$TAG-n$i"
        in_lan ip link set "v$i" master br0 up
        ip netns exec "$TAG-n$i" ip addr add "198.18.0.$i/24" dev eth0
        ip netns exec "$TAG-n$i" ip link set eth0 up
        ip netns exec "$TAG-n$i" ip link set lo up
        mkdir -p "/sys/fs/cgroup/cpu/$TAG-n$i" "/sys/fs/cgroup/cpuacct/$TAG-n$i"
        echo 100000 >"/sys/fs/cgroup/cpu/$TAG-n$i/cpu.cfs_period_us"
        echo $((QUOTA * 1000)) >"/sys/fs/cgroup/cpu/$TAG-n$i/cpu.cfs_quota_us"
    done
    log "lan $LAN: nodes at 198.18.0.1-3, hub $HUB; each node held to $QUOTA % of a core"
}

start_redis() {
    redis-server --port 0 --save "" --appendonly no --unixsocket "$W/redis.sock" \
        --dir "$W" >"$W/redis.log" 2>&1 &
    AUX_PIDS+=($!)
    local i
    for ((i = 0; i < 100; i++)); do [ -S "$W/redis.sock" ] && return 0; sleep 0.1; done
    die "redis-server did not start"
}

# write_node I NODES SHADOW RATE_PER_MIN
write_node() {
    local i=$1 n=$2 shadow=$3 rate=$4 d="$W/n$1" peers="" j
    for ((j = 1; j <= 3; j++)); do
        [ "$j" = "$i" ] && continue
        if [ "$j" -le "$n" ] || [ "$shadow" = off ]; then
            peers+="${peers:+, }\"198.18.0.$j:2527\""
        fi
    done
    rm -rf "$d"; mkdir -p "$d"
    # The shadow link's TLS: one cluster CA per run, a certificate per node.
    [ -e "$W/pki/ca.pem" ] || "$SLUICE" cluster-ca "$W/pki" >/dev/null
    [ -e "$W/pki/n$i.pem" ] || "$SLUICE" cluster-cert --ca "$W/pki" --node "n$i" "$W/pki" >/dev/null
    cat >"$d/s.toml" <<EOT
hostname = "n$i.bench.test"
data_dir = "$d/var"
log_file = "$d/maillog"
run_as_root = true
[smtpd]
listen = []
mynetworks = ["$HUB/32"]
[[smtpd.listeners]]
listen = "198.18.0.$i:25"
kind = "smtp"
proxy_protocol = true
proxy_protocol_from = ["$HUB/32"]
[delivery]
relayhost = "smtp:[$HUB]:2526"
default_concurrency = $CAP
[dns]
nameservers = ["127.0.0.1:9"]
[cluster]
node = "n$i"
redis_url = "unix://$W/redis.sock"
default_concurrency = $CAP
default_rate_limit = $rate
peers = [$peers]
shadow = $([ "$shadow" = on ] && echo true || echo false)
shadow_listen = "198.18.0.$i:2527"
shadow_secret = "bench-secret-0123456789"
shadow_ca = "$W/pki/ca.pem"
shadow_cert = "$W/pki/n$i.pem"
shadow_key = "$W/pki/n$i.key"
heartbeat_ms = 500
node_dead_secs = 3
lease_secs = 5
shadow_claim_secs = 2
EOT
}

start_node() {
    local i=$1 cg=/sys/fs/cgroup
    echo 0 >"$cg/cpuacct/$TAG-n$i/cpuacct.usage"
    sh -c 'echo $$ >"$1/cgroup.procs" && echo $$ >"$2/cgroup.procs" && shift 2 && exec "$@"' sh \
        "$cg/cpu/$TAG-n$i" "$cg/cpuacct/$TAG-n$i" \
        ip netns exec "$TAG-n$i" "$SLUICE" serve --config "$W/n$i/s.toml" \
        2>"$W/n$i/stderr" &
    NODE_PIDS[$i]=$!
}

node_up() { ip netns exec "$TAG-n$1" ss -Hltn "sport = :25" 2>/dev/null | grep -q .; }

stop_nodes() {
    local i
    for i in "${!NODE_PIDS[@]}"; do kill_wait "${NODE_PIDS[$i]}" TERM 20; done
    NODE_PIDS=()
}

# start_haproxy BACKEND... (host:port; "sink" for the ceiling run: no checks)
start_haproxy() {
    local servers="" k=0 b
    for b in "$@"; do
        k=$((k + 1))
        if [ "$b" = sink ]; then
            servers+="  server sink $SINK_AT\n"
        else
            servers+="  server n$k $b send-proxy-v2 check-send-proxy check inter 500 fall 2 rise 1\n"
        fi
    done
    printf "global\n  maxconn 4000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  timeout check 2s\nlisten smtp\n  bind $FRONT\n  balance roundrobin\n  option smtpchk EHLO lb.bench.test\n$servers" >"$W/haproxy.cfg"
    ip netns exec "$LAN" haproxy -db -f "$W/haproxy.cfg" >"$W/haproxy.log" 2>&1 &
    HAPROXY_PID=$!
    AUX_PIDS+=($HAPROXY_PID)
    local i
    for ((i = 0; i < 100; i++)); do in_lan ss -Hltn "sport = :2525" | grep -q . && return 0; sleep 0.1; done
    die "haproxy did not start: $(tail -3 "$W/haproxy.log")"
}
stop_haproxy() { kill_wait "$HAPROXY_PID" TERM 5; }

# (Background processes are started with `ip netns exec` itself, never
# through a shell function: $! must be the process, for kill_wait.)
# start_sink [sink options...]: counts into $W/sink.out (SINK line at exit)
start_sink() {
    ip netns exec "$LAN" "$SLUICE_BENCH" sink --listen "$SINK_AT" "$@" >"$W/sink.out" 2>"$W/sink.err" &
    SINK_PID=$!
    AUX_PIDS+=($SINK_PID)
    local i
    for ((i = 0; i < 100; i++)); do in_lan ss -Hltn "sport = :2526" | grep -q . && return 0; sleep 0.1; done
    die "sink did not start"
}
stop_sink() { kill_wait "$SINK_PID" TERM 5; }
# The sink's count: its SINK line once it has exited (--exit-after), else
# its last progress line.
sink_count() {
    if grep -q '^SINK ' "$W/sink.out" 2>/dev/null; then
        grep -o 'SINK messages=[0-9]*' "$W/sink.out" | cut -d= -f2
    else
        { grep -o 'sink: [0-9]* messages' "$W/sink.err" || echo "sink: 0 messages"; } | tail -1 | grep -o '[0-9]*'
    fi
}
sink_peak() { grep -o '[0-9]* at most' "$W/sink.err" | tail -1 | grep -o '^[0-9]*' || echo 0; }
sink_last() { grep -o 'last=[0-9.]*' "$W/sink.out" | cut -d= -f2; }
sink_first() { grep -o 'first=[0-9.]*' "$W/sink.out" | cut -d= -f2; }

# wait_sink N SECS: until the sink has counted N messages
wait_sink() {
    local want=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        [ "$(sink_count)" -ge "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# smtp_source N SIZE: 5 processes x SESSIONS/5; sets GEN_ERRORS, T0
smtp_source() {
    local n=$1 size=$2 i per=$(($1 / 5)) pids=()
    T0=$(now)
    for i in 1 2 3 4 5; do
        ip netns exec "$LAN" smtp-source -s $((SESSIONS / 5)) -m $per -l "$size" \
            -M gen.bench.test -f sender@gen.bench.test -t "x@dest$i.test" "$FRONT" \
            >"$W/gen.$i.out" 2>&1 &
        pids+=($!)
    done
    GEN_ERRORS=0
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || GEN_ERRORS=$((GEN_ERRORS + 1)); done
    GEN_ERRORS=$((GEN_ERRORS + $(cat "$W"/gen.*.out | grep -c -E 'warning|fatal' || true)))
    cat "$W"/gen.*.out >>"$W/gen-all.out"
}

wait_nodes_up() {
    local n=$1 i k
    for ((k = 0; k < 200; k++)); do
        local up=0
        for ((i = 1; i <= n; i++)); do node_up "$i" && up=$((up + 1)); done
        [ "$up" = "$n" ] && break
        sleep 0.1
    done
    [ "$up" = "$n" ] || die "nodes did not start: $(cat "$W"/n*/stderr | tail -5)"
    # HAProxy's checks see them up.
    sleep 1.5
}

cluster_cpu_ms() {
    local n=$1 i tot=0
    for ((i = 1; i <= n; i++)); do
        tot=$((tot + $(cat "/sys/fs/cgroup/cpuacct/$TAG-n$i/cpuacct.usage")))
    done
    calc "$tot/1e6"
}

run_ceiling() {
    local size=$1 n=$2
    start_sink --max-seconds 600
    start_haproxy sink
    smtp_source $((n / 5 * 5)) "$size"
    wait_sink $((n / 5 * 5)) 120 || log "ceiling: sink short"
    stop_sink
    local secs rate
    secs=$(calc "$(sink_last)-$T0"); rate=$(calc "$((n / 5 * 5))/$secs")
    stop_haproxy
    RESULTS+=("RESULT workload=cluster-ceiling size=$size messages=$((n / 5 * 5)) seconds=$(fmt %.2f "$secs") msg_per_s=$(fmt %.0f "$rate") gen_errors=$GEN_ERRORS")
    log "${RESULTS[-1]}"
}

declare -A ONE
run_scale() {
    local size=$1 n=$2 nodes=$3 shadow=$4 i backends=()
    n=$((n / 5 * 5))
    for ((i = 1; i <= nodes; i++)); do
        write_node "$i" "$nodes" "$shadow" 0
        start_node "$i"
        backends+=("198.18.0.$i:25")
    done
    start_sink --max-seconds 900
    wait_nodes_up "$nodes"
    start_haproxy "${backends[@]}"
    sleep 1.5
    for ((i = 1; i <= nodes; i++)); do echo 0 >"/sys/fs/cgroup/cpuacct/$TAG-n$i/cpuacct.usage"; done
    smtp_source "$n" "$size"
    wait_sink "$n" 300 || log "scale: sink has $(sink_count) of $n"
    local cpu secs rate peak x
    cpu=$(cluster_cpu_ms "$nodes")
    stop_sink
    secs=$(calc "$(sink_last)-$T0"); rate=$(calc "$n/$secs"); peak=$(grep -o 'peak_open=[0-9]*' "$W/sink.out" | cut -d= -f2)
    stop_haproxy
    stop_nodes
    [ "$nodes" = 1 ] && ONE[$size-$SESSIONS]=$rate
    x=n/a
    [ -n "${ONE[$size-$SESSIONS]:-}" ] && x=$(fmt %.2f "$(calc "$rate/${ONE[$size-$SESSIONS]}")")
    RESULTS+=("RESULT workload=cluster nodes=$nodes shadow=$shadow size=$size quota_pct=$QUOTA sessions=$SESSIONS messages=$n seconds=$(fmt %.2f "$secs") msg_per_s=$(fmt %.0f "$rate") x_one_node=$x cpu_ms_per_msg=$(fmt %.3f "$(calc "$cpu/$n")") gen_errors=$GEN_ERRORS peak_conns=$peak cap=$CAP")
    log "${RESULTS[-1]}"
    echo "$nodes,$shadow,$size,$SESSIONS,$(fmt %.0f "$rate")" >>"$W/chart.csv"
}

run_rate() {
    local n=$((N_RATE / 5 * 5)) i backends=()
    for i in 1 2 3; do write_node "$i" 3 off "$RATE"; start_node "$i"; backends+=("198.18.0.$i:25"); done
    start_sink --max-seconds 900
    wait_nodes_up 3
    start_haproxy "${backends[@]}"
    sleep 1.5
    smtp_source "$n" 400
    wait_sink "$n" 600 || log "rate: sink has $(sink_count) of $n"
    stop_sink
    local span per_min over peak
    span=$(calc "$(sink_last)-$(sink_first)")
    per_min=$(calc "($n-1)/$span*60"); over=$(calc "($per_min/$RATE-1)*100")
    peak=$(grep -o 'peak_open=[0-9]*' "$W/sink.out" | cut -d= -f2)
    stop_haproxy; stop_nodes
    RESULTS+=("RESULT workload=cluster-rate nodes=3 limit_per_min=$RATE messages=$n first_to_last_s=$(fmt %.2f "$span") observed_per_min=$(fmt %.0f "$per_min") over_limit_pct=$(fmt %.2f "$over") gen_errors=$GEN_ERRORS peak_conns=$peak cap=$CAP")
    log "${RESULTS[-1]}"
}

run_kill() {
    local n=$N_KILL i backends=()
    for i in 1 2 3; do write_node "$i" 3 on 0; start_node "$i"; backends+=("198.18.0.$i:25"); done
    : >"$W/acked"; : >"$W/ids"
    start_sink --message-ids "$W/ids" --max-seconds 900
    wait_nodes_up 3
    start_haproxy "${backends[@]}"
    sleep 1.5
    ip netns exec "$LAN" "$SLUICE_BENCH" bench --target "$FRONT" --sessions "$SESSIONS" --count "$n" --size 400 \
        --ack-log "$W/acked" --retry-pause-ms 100 --max-seconds 600 >"$W/kill-gen.out" 2>"$W/kill-gen.err" &
    local gen=$! k
    AUX_PIDS+=($gen)
    for ((k = 0; k < 6000; k++)); do [ "$(wc -l <"$W/acked")" -ge $((n / 3)) ] && break; sleep 0.05; done
    kill -KILL "${NODE_PIDS[1]}"; wait "${NODE_PIDS[1]}" 2>/dev/null || true
    unset 'NODE_PIDS[1]'
    local t_kill before
    t_kill=$(now); before=$(wc -l <"$W/acked")
    rm -rf "$W/n1/var/spool"
    log "kill: node 1 SIGKILLed after $before acknowledgements, its spool deleted"
    for ((k = 0; k < 3000; k++)); do [ "$(wc -l <"$W/acked")" -ge $((before + 50)) ] && break; sleep 0.01; done
    local resumed
    resumed=$(calc "$(now)-$t_kill")
    wait "$gen" || log "kill: generator exited $?"
    local acked delivered lost dups claimed
    acked=$(sort -u "$W/acked" | wc -l)
    for ((k = 0; k < 1200; k++)); do
        lost=$(comm -23 <(sort -u "$W/acked") <(sort -u "$W/ids") | wc -l)
        [ "$lost" = 0 ] && break
        sleep 0.1
    done
    sleep 2
    delivered=$(sort -u "$W/ids" | wc -l)
    dups=$(($(wc -l <"$W/ids") - delivered))
    claimed=$(cat "$W"/n2/maillog "$W"/n3/maillog | grep -c 'claimed from node n1' || true)
    stop_sink; stop_haproxy; stop_nodes
    RESULTS+=("RESULT workload=cluster-kill nodes=3 messages=$n acked=$acked acked_before_kill=$before delivered=$delivered lost=$lost duplicates=$dups dup_pct=$(fmt %.2f "$(calc "$dups*100/$acked")") resumed_s=$(fmt %.2f "$resumed") claimed=$claimed")
    log "${RESULTS[-1]}"
}

chart() {
    [ -s "$W/chart.csv" ] || return 0
    local size svg
    for size in $SIZES; do
    svg="${RESULTS_FILE%.txt}-$size.svg"
    python3 - "$W/chart.csv" "$svg" "$QUOTA" "$size" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
series = {}
for nodes, shadow, size, sessions, rate in rows:
    if size == sys.argv[4]:
        series.setdefault((shadow, int(sessions)), {})[int(nodes)] = float(rate)
W, H, L, B = 640, 360, 70, 50
top = max(v for s in series.values() for v in s.values()) * 1.15
colors = ["#1f77b4", "#aec7e8", "#d62728", "#ff9896"]
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 80}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="18" text-anchor="middle" font-size="14">Sluice cluster behind HAProxy: {sys.argv[4]} B, messages/s by nodes (each node {sys.argv[3]} % of a core)</text>']
pw, ph = W - L - 20, H - B - 40
for k in range(5):
    y = 30 + ph - ph * k / 4
    out.append(f'<line x1="{L}" x2="{W-20}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{L-6}" y="{y+4}" text-anchor="end">{top*k/4:.0f}</text>')
keys = sorted(series)
bw = pw / 3 / (len(keys) + 1)
for n in (1, 2, 3):
    x0 = L + pw * (n - 1) / 3
    out.append(f'<text x="{x0 + pw/6}" y="{H-B+20}" text-anchor="middle">{n} node{"s" if n > 1 else ""}</text>')
    for j, key in enumerate(keys):
        v = series[key].get(n)
        if v is None:
            continue
        h = ph * v / top
        x = x0 + bw * (j + 0.5)
        out.append(f'<rect x="{x}" y="{30+ph-h}" width="{bw*0.9}" height="{h}" fill="{colors[j % 4]}"/><text x="{x+bw*0.45}" y="{26+ph-h}" text-anchor="middle" font-size="10">{v:.0f}</text>')
for j, key in enumerate(keys):
    out.append(f'<rect x="{L + 10 + 160*j}" y="{H-18}" width="10" height="10" fill="{colors[j % 4]}"/><text x="{L + 24 + 160*j}" y="{H-9}">shadow {key[0]}, {key[1]} sessions</text>')
out.append('</svg>')
open(sys.argv[2], "w").write("\n".join(out))
EOF
    log "chart: $svg"
    done
}

make_lan
start_redis
for run in $RUNS; do
    case $run in
    ceiling) for s in $SIZES; do run_ceiling "$s" "$([ "$s" = 400 ] && echo "$N400" || echo "$N64K")"; done ;;
    scale)
        for s in $SIZES; do
            n=$([ "$s" = 400 ] && echo "$N400" || echo "$N64K")
            for SESSIONS in $SESSIONS_LIST; do
                for shadow in $SHADOW; do
                    for nodes in $NODES; do
                        [ "$shadow" = on ] && [ "$nodes" = 1 ] && continue
                        run_scale "$s" "$n" "$nodes" "$shadow"
                    done
                done
            done
            SESSIONS=${SESSIONS_LIST%% *}
        done
        ;;
    rate) run_rate ;;
    kill) run_kill ;;
    *) die "unknown run $run" ;;
    esac
done
chart
append_results "$RESULTS_FILE" "${RESULTS[@]}"
printf '%s\n' "${RESULTS[@]}"

#!/usr/bin/env bash
# bench/trust_memory.sh — the memory attacks of the 2026-11-27 security
# review (M6, M7), measured on a release binary as the review measured them:
#   M6  one local account (uid 65534) opens 60 connections to the public
#       submission socket, each sending 13 MiB of a request without a line
#       end, and holds them 25 s: the daemon's peak RSS.
#   M7  40 sessions from 127.0.0.2 each send a 5 MB message while a milter
#       sleeps 20 s at the end of each message, against a 20 MiB body
#       budget: the daemon's peak RSS and the replies.
# Prints a RESULT line per attack and appends them to
# bench/results/trust-YYYY-MM-DD.txt. Usage (as root):
#   SLUICE=target/release/sluice bash bench/trust_memory.sh
# Everything on 127.0.0.0/8; each attack is bounded (60 s).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$REPO/target/release/sluice}
W=$(mktemp -d /tmp/sluice-trust.XXXXXX); chmod 755 "$W"
OUT="$REPO/bench/results/trust-$(date -u +%F).txt"
L="$REPO/bench/lib/trust"
trap 'pkill -f "$W/" 2>/dev/null || true; rm -rf "$W"' EXIT
peak_of() { # PID SECONDS: peak VmRSS (kB) sampled every second
    local p=0 r
    for _ in $(seq 1 "$2"); do
        r=$(awk '/VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0)
        [ "${r:-0}" -gt "$p" ] && p=$r
        sleep 1
    done
    echo "$p"
}
serve() { # NAME CONFIG-BODY: starts serve, prints its pid
    mkdir -p "$W/$1"
    printf 'run_as_root = true\nhostname = "%s.test"\ndata_dir = "%s"\nlog_file = "%s"\n%s\n' \
        "$1" "$W/$1/var" "$W/$1/maillog" "$2" >"$W/$1/s.toml"
    "$SLUICE" serve --config "$W/$1/s.toml" >"$W/$1/serve.log" 2>&1 &
    echo $!
}
rev=$(git -C "$REPO" rev-parse --short HEAD)

pid=$(serve m6 '[smtpd]
listen = ["127.0.0.1:0"]')
sleep 2
timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 \
    "$L/submit_hog.py" "$W/m6/var/public/submit.sock" 60 13 25 >"$W/m6/hog.out" 2>&1 &
peak=$(peak_of "$pid" 26)
kill "$pid"
line="RESULT attack=M6 connections=60 mib_each=13 uid=65534 peak_rss_kb=$peak"
echo "$line"; echo "$(date -u +%FT%T%:z) $rev $line" >>"$OUT"

/usr/bin/python3 "$L/slow_milter.py" "$W/milter.sock" >/dev/null 2>&1 &
sleep 1
pid=$(serve m7 "[smtpd]
listen = [\"127.0.0.1:26025\"]
message_memory_budget_kib = 20480
milters = [\"unix:$W/milter.sock\"]
[transport]
\"dest.test\" = \"discard\"")
sleep 2
timeout 60 /usr/bin/python3 "$L/big_senders.py" 40 5000000 >"$W/m7.out" 2>&1 &
peak=$(peak_of "$pid" 40)
kill "$pid"
replies=$(tr -d " {}b'" <"$W/m7.out" | tr ',' ' ')
line="RESULT attack=M7 sessions=40 size=5000000 budget_kib=20480 milter_delay_s=20 peak_rss_kb=$peak replies=$replies"
echo "$line"; echo "$(date -u +%FT%T%:z) $rev $line" >>"$OUT"

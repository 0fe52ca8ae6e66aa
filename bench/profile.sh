#!/usr/bin/env bash
# bench/profile.sh — a CPU profile of Sluice during a workload run, drawn
# as a flame graph, so that a benchmark's figures can be explained.
#
# What it does
#   Runs the workload command given after `--` (one of the bench scripts,
#   set to run Sluice only), waits for its `sluice serve` process to
#   appear, and records that process with `perf record -g` (DWARF call
#   graphs: the release build has debug info but no frame pointers) until
#   it exits. Then:
#     bench/results/profile-<NAME>-<DATE>.svg   the flame graph (inferno)
#     bench/results/profile-<NAME>-<DATE>.txt   the top functions (self
#                                                time), and the command
#   Timing figures of a profiled run are lower than those of the workload
#   run on its own (perf takes its share of the two cores): take the shape
#   from here, the figures from the benchmark itself.
#
# How to run (as root: perf needs it to attach, the workloads need it)
#   bash bench/profile.sh NAME -- SYSTEMS=sluice COUNT=100000 \
#        RECIPIENTS=distinct SESSIONS=100 bash bench/local.sh
#   bash bench/profile.sh relay-400 -- SYSTEMS=sluice SIZES=400 \
#        TLS_MODES=off bash bench/relay.sh
#   (the words after -- are run by `env`: assignments, then the command)
#
# Environment
#   FREQ=199          samples per second
#   STACK=16384       bytes of stack copied per sample (DWARF unwinding)
#   RESULTS_DIR=bench/results
#   FOLDED_TO=FILE    also keep the folded stacks (inferno's input) there
#
# perf comes from Debian (linux-perf); inferno (inferno-collapse-perf,
# inferno-flamegraph) is installed with cargo into target/tools when it is
# not on PATH.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

BENCH_TAG=profile
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FREQ=${FREQ:-199}
STACK=${STACK:-16384}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results}
STAMP=$(date +%F)

[ $# -ge 3 ] && [ "$2" = "--" ] || die "usage: bash bench/profile.sh NAME -- [VAR=VALUE...] COMMAND..."
NAME=$1
shift 2
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "NAME: letters, digits, . _ - only"
require_root

command -v perf >/dev/null || apt_install linux-perf
TOOLS=$REPO/target/tools
export PATH=$PATH:$TOOLS/bin
if ! command -v inferno-flamegraph >/dev/null; then
    log "installing inferno into $TOOLS (cargo install, once)"
    cargo install --quiet --locked --root "$TOOLS" inferno >&2 \
        || die "cargo install inferno failed"
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/sluice-profile.XXXXXX")
WORK_PID=""
PERF_PID=""
cleanup_profile() {
    local rc=$?
    [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null
    [ -n "$WORK_PID" ] && kill -TERM "$WORK_PID" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$W"
    exit "$rc"
}
trap cleanup_profile EXIT

# A `sluice serve` already running (another daemon, a test's) is not the
# workload's: only a process that appears after this point is recorded.
existing=" $( (pgrep -f 'sluice serve' || true) | tr '\n' ' ') "
log "workload: $*"
env "$@" >"$W/workload.out" 2>"$W/workload.err" &
WORK_PID=$!

# The serve process appears after the workload's set-up (minutes for
# slapd's 500,000 users): wait for it as long as the workload runs.
pid=""
while kill -0 "$WORK_PID" 2>/dev/null; do
    for p in $(pgrep -f 'sluice serve' || true); do
        [[ $existing == *" $p "* ]] || pid=$p
    done
    [ -n "$pid" ] && break
    sleep 0.2
done
[ -n "$pid" ] || { tail -20 "$W/workload.err" >&2; die "the workload ended without a sluice serve process"; }
log "recording sluice serve (pid $pid) at $FREQ Hz until it exits"
perf record -q -F "$FREQ" -g --call-graph "dwarf,$STACK" -p "$pid" -o "$W/perf.data" \
    >"$W/perf.out" 2>&1 &
PERF_PID=$!
while kill -0 "$pid" 2>/dev/null; do sleep 0.5; done
kill -INT "$PERF_PID" 2>/dev/null || true
wait "$PERF_PID" 2>/dev/null || true
PERF_PID=""
log "sluice serve ended; waiting for the workload"
wait "$WORK_PID" || log "the workload exited with $?"
WORK_PID=""
grep -h 'RESULT ' "$W/workload.out" | sed 's/^/  /' >&2 || true

mkdir -p "$RESULTS_DIR"
svg=$RESULTS_DIR/profile-$NAME-$STAMP.svg
txt=$RESULTS_DIR/profile-$NAME-$STAMP.txt
log "drawing $svg"
perf script -i "$W/perf.data" 2>/dev/null \
    | inferno-collapse-perf --kernel >"$W/folded"
inferno-flamegraph --title "sluice serve: $NAME ($STAMP, $(git -C "$REPO" rev-parse --short HEAD))" \
    <"$W/folded" >"$svg"
{
    echo "# bench/profile.sh $NAME -- $*"
    echo "# $(date -Is) $(git -C "$REPO" rev-parse --short HEAD), perf at $FREQ Hz, $(wc -l <"$W/folded") distinct stacks"
    echo "# by thread (perf report --sort comm):"
    perf report -i "$W/perf.data" --no-children --sort comm --stdio 2>/dev/null \
        | awk '/^ +[0-9]/ && n++ < 12'
    echo "# top functions by self time (perf report --no-children):"
    perf report -i "$W/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
        | awk '/^ +[0-9]/ && n++ < 40 { sub(/ +- +- *$/, ""); print }'
    echo "# by the user-space frame the samples are under (the last frame before the"
    echo "# kernel's: the system call wrapper, or the function itself when in user space):"
    python3 - "$W/folded" <<'PYEOF2'
import collections, sys
by, total = collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    frames = stack.split(";")
    user = [f for f in frames if not f.endswith("_[k]")]
    by[user[-1] if user else frames[0]] += int(n)
    total += int(n)
for f, n in by.most_common(25):
    print("%8.2f%%  %s" % (100.0 * n / total, f[:110]))
PYEOF2
} >"$txt"
if [ -n "${FOLDED_TO:-}" ]; then cp "$W/folded" "$FOLDED_TO"; log "folded stacks: $FOLDED_TO"; fi
log "done: $svg, $txt"

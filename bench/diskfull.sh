#!/usr/bin/env bash
# bench/diskfull.sh — "Disk full" of /work/shared/BENCH.md.
#
# What it measures
#   Phase "spool": the spool (data_dir) sits on a tmpfs of $FS_MB MiB that
#   the script mounts; the next hop (a sink on 127.0.0.1:$SINK_PORT) is down.
#   `sluice-bench bench` ($FILL_SESSIONS sessions, --ack-log) sends $SIZE-byte
#   messages until no message has been accepted for $FULL_SECS seconds in a
#   row (the spool refuses: [spool] reserve_mib keeps room for outcome
#   records), then stops gracefully (SIGTERM: the ack log is complete).
#   Checks: the replies were 4xx (the generator's temp_4xx), and one probe
#   (bench/lib/smtpprobe.py) gets exactly `452 4.3.1`. Then the sink comes
#   up; the script waits until every acknowledged message reached it
#   (deferred mail is retried after [queue] minimal_backoff_secs = $BACKOFF),
#   probing once a second whether new mail is accepted again, without any
#   restart (resume_s: sink up -> first probe accepted); after the drain a
#   burst of $RESUME_COUNT messages must all be accepted. Then one restart
#   (SIGTERM + start) and $RESTART_WAIT s of watching: no acknowledged
#   message may reach the sink twice (duplicates counts sink lines minus
#   distinct IDs over the whole phase). lost = acknowledged (generator and
#   probes) not at the sink: must be 0.
#   Phase "maildir": a fresh data_dir on the ordinary disk, local domain
#   local.test with maildir_base on a second tmpfs of $MAILFS_MB MiB, filled
#   with a filler file until ENOSPC. $MAIL_N messages to local.test are
#   accepted (the spool has room) and must be deferred with
#   `status=deferred (4.2.2 ...` (not bounced); then the filler is deleted
#   and they must all be delivered on retry (backoff 1..2 s), each exactly
#   once (Message-IDs of the Maildir files against the ack log).
#
# How to run (as root: it mounts tmpfs):
#   bash bench/diskfull.sh                          # both phases
#   FS_MB=24 FULL_SECS=5 bash bench/diskfull.sh     # quicker
#   PHASES=maildir bash bench/diskfull.sh
#
# Environment
#   PHASES="spool maildir"   which phases to run
#   FS_MB=40           size of the spool tmpfs (MiB)
#   SEGMENT_MIB=4      [spool] segment_mib (the default reserve is two
#                      segments, >= 4 MiB: 8 MiB here; 64 MiB segments would
#                      not fit on the tmpfs at all)
#   RESERVE_MIB=       [spool] reserve_mib (empty: the daemon's default)
#   SIZE=400           message size in bytes
#   FILL_SESSIONS=50   generator sessions while filling
#   FULL_SECS=10       seconds without any accepted message that count as
#                      "full" (the generator then stops)
#   FILL_TIMEOUT=600   the filling generator's --max-seconds
#   BACKOFF=2          [queue] minimal_backoff_secs of phase spool (maximal 5)
#   DRAIN_TIMEOUT=300  seconds for the acknowledged mail to reach the sink
#   RESUME_TIMEOUT=120 seconds (after the drain) for new mail to be accepted
#   RESUME_COUNT=200   messages of the burst that must all be accepted
#   RESTART_WAIT=15    seconds to watch the sink after the restart
#   MAILFS_MB=4        size of the Maildir tmpfs (MiB)
#   MAIL_N=20          messages to local.test in phase maildir
#   SMTP_PORT=55155 SINK_PORT=55255
#   SLUICE=${CARGO_TARGET_DIR:-target}/release/sluice   binary for everything
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   KEEP=0             1: keep the temp dir (unmounted; logs, configs)
#   RESULTS_FILE=bench/results/diskfull-YYYY-MM-DD.txt   where RESULT lines go
#     (beside it, diskfull-YYYY-MM-DD-fill.svg: messages acknowledged per
#     second while the spool fills, falling to 0 when it is full)
#
# Output
#   Progress on stderr. Last, one line per phase:
#     RESULT system=sluice workload=diskfull phase=spool fs_mb=<M>
#       segment_mib=<M> acked=<n> temp_4xx=<n> full_reply=<code>_<enhanced>
#       fill_s=<s> full_spool_kb=<kb> delivered=<n> lost=<n> duplicates=<n>
#       drain_s=<s> resumed=<yes|no> resume_s=<s> drained_spool_kb=<kb>
#       burst_accepted=<n>/<RESUME_COUNT> recovery_damage=<n> corrupt_files=<n>
#     RESULT system=sluice workload=diskfull phase=maildir fs_mb=<M> n=<N>
#       acked=<n> deferred_4_2_2=<distinct queue IDs> bounced=<n>
#       delivered=<n> lost=<n> duplicates=<n> deliver_after_free_s=<s>
#   (a failed phase adds failed=<reason>), also appended, with date and
#   commit, to $RESULTS_FILE. Exit status 1 if a phase failed, 2 if the
#   set-up failed.

set -euo pipefail

source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/serve.sh"

BENCH_TAG=diskfull
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PHASES=${PHASES:-"spool maildir"}
FS_MB=${FS_MB:-40}
SEGMENT_MIB=${SEGMENT_MIB:-4}
RESERVE_MIB=${RESERVE_MIB:-}
SIZE=${SIZE:-400}
FILL_SESSIONS=${FILL_SESSIONS:-50}
FULL_SECS=${FULL_SECS:-10}
FILL_TIMEOUT=${FILL_TIMEOUT:-600}
BACKOFF=${BACKOFF:-2}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-300}
RESUME_TIMEOUT=${RESUME_TIMEOUT:-120}
RESUME_COUNT=${RESUME_COUNT:-200}
RESTART_WAIT=${RESTART_WAIT:-15}
MAILFS_MB=${MAILFS_MB:-4}
MAIL_N=${MAIL_N:-20}
SMTP_PORT=${SMTP_PORT:-55155}
SINK_PORT=${SINK_PORT:-55255}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
KEEP=${KEEP:-0}
RESULTS_FILE=${RESULTS_FILE:-$REPO/bench/results/diskfull-$(date +%F).txt}
HOST=127.0.0.1

needs_sluice_binary() { true; }
for p in $PHASES; do
    case $p in spool|maildir) ;; *) die "unknown phase '$p' in PHASES" ;; esac
done
require_root
command -v python3 >/dev/null || die "python3 is needed (bench/lib/smtpprobe.py)"

make_workdir diskfull
GEN_PID=""
MOUNTS=()
cleanup_processes() {
    kill_wait "$GEN_PID" TERM 40
    kill_wait "$SERVE_PID" TERM 30
    kill_wait "$SINK_PID" TERM 5
    local m
    for m in "${MOUNTS[@]}"; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}
install_cleanup_traps

ensure_sluice
free_port_or_die "$SMTP_PORT" "$SINK_PORT"

# mount_tmpfs DIR MB
mount_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "size=${2}m,mode=0755" tmpfs "$1" || die "cannot mount a tmpfs on $1"
    MOUNTS+=("$1")
}
unmount_all() {
    local m
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    MOUNTS=()
}
fs_used_kb() { df -k --output=used "$1" | tail -1 | tr -d ' '; }
fs_avail_kb() { df -k --output=avail "$1" | tail -1 | tr -d ' '; }
secs_since() { fmt %.1f "$(calc "$(now) - $1")"; }

# probe RCPT: one message through smtpprobe.py; PROBE_REPLY is its reply,
# PROBE_RC its exit status; accepted IDs are appended to $ACKS.
PROBE_N=0
probe() {
    PROBE_N=$((PROBE_N + 1))
    local id="probe$PROBE_N.$$@diskfull.bench"
    PROBE_RC=0
    PROBE_REPLY=$(python3 "$REPO/bench/lib/smtpprobe.py" "$HOST:$SMTP_PORT" "$1" "$id") || PROBE_RC=$?
    [ "$PROBE_RC" = 0 ] && echo "<$id>" >>"$ACKS"
    return 0
}

LINES=()
any_failed=0

# ============================================================ phase spool ====
phase_spool() {
    local fail="" fs=$W/spoolfs var conf maillog
    var=$fs/var; conf=$W/spool.toml; maillog=$W/maillog.spool
    ACKS=$W/spool.acks; IDS=$W/spool.sink.ids
    mount_tmpfs "$fs" "$FS_MB"
    cat >"$conf" <<EOF
hostname = "sluice.bench"
data_dir = "$var"
run_as_root = true
log_file = "$maillog"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]
max_sessions = 2000

[spool]
segment_mib = $SEGMENT_MIB
$( [ -n "$RESERVE_MIB" ] && echo "reserve_mib = $RESERVE_MIB" )

[queue]
minimal_backoff_secs = $BACKOFF
maximal_backoff_secs = $((BACKOFF > 5 ? BACKOFF : 5))

[delivery]
relayhost = "smtp:[$HOST]:$SINK_PORT"
default_concurrency = 100
# The dead next hop is tried again as soon as the backoff allows (the
# 60 s default of the dead-host cache would measure that cache, not the
# spool's recovery).
dead_host_secs = $BACKOFF
EOF
    log "=== phase spool: tmpfs ${FS_MB} MiB, segment_mib=$SEGMENT_MIB, next hop down; filling"
    serve_start "$conf" "$SMTP_PORT" || die "sluice serve did not come up"

    # -- fill until FULL_SECS seconds without an accepted message
    local t0 gen_rc=0 zero=0 rows=0 row msgs
    t0=$(now)
    "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions "$FILL_SESSIONS" \
        --count 100000000 --size "$SIZE" --max-seconds "$FILL_TIMEOUT" --interval 1 \
        --ack-log "$ACKS" --chart "${RESULTS_FILE%.txt}-fill.svg" \
        >"$W/fill.out" 2>"$W/fill.err" &
    GEN_PID=$!
    while kill -0 "$GEN_PID" 2>/dev/null; do
        sleep 1
        # CSV rows: time,messages,data(K),errors,connections,SSL
        row=$(grep -c '^[0-9][0-9]:' "$W/fill.out" || true)
        [ "$row" -gt "$rows" ] || continue
        while read -r msgs; do
            if [ "$msgs" = 0 ]; then zero=$((zero + 1)); else zero=0; fi
        done < <(grep '^[0-9][0-9]:' "$W/fill.out" | sed -n "$((rows + 1)),${row}p" | cut -d, -f2)
        rows=$row
        if [ $((rows % 5)) = 0 ]; then
            log "filling: $(lines "$ACKS") acked, tmpfs used $(fs_used_kb "$fs") kB, avail $(fs_avail_kb "$fs") kB, $zero s without a 250"
        fi
        [ "$zero" -ge "$FULL_SECS" ] && break
    done
    kill -TERM "$GEN_PID" 2>/dev/null || true
    wait "$GEN_PID" || gen_rc=$?
    GEN_PID=""
    local fill_s benchline acked_gen temp4 errors
    fill_s=$(secs_since "$t0")
    benchline=$(grep '^BENCH ' "$W/fill.out" | tail -1 || true)
    log "generator (rc=$gen_rc): ${benchline:-<no BENCH line>}"
    grep -m3 '^bench:' "$W/fill.err" >&2 || true
    temp4=n/a; acked_gen=n/a
    [[ $benchline =~ temp_4xx=([0-9]+) ]] && temp4=${BASH_REMATCH[1]}
    [[ $benchline =~ messages=([0-9]+) ]] && acked_gen=${BASH_REMATCH[1]}
    [ "$zero" -ge "$FULL_SECS" ] || fail=${fail:+$fail,}never_full_within_${FILL_TIMEOUT}s
    [ "$temp4" != n/a ] && [ "$temp4" -gt 0 ] || fail=${fail:+$fail,}no_4xx_replies
    [ "$acked_gen" = "$(lines "$ACKS")" ] || log "WARNING: BENCH messages=$acked_gen but the ack log has $(lines "$ACKS") lines"

    local full_kb full_reply
    full_kb=$(spool_kb "$var/spool")
    probe "probe@domain1.example"
    full_reply=$(awk '{ print $1 "_" $2 }' <<<"$PROBE_REPLY")
    log "full: spool $full_kb kB, tmpfs avail $(fs_avail_kb "$fs") kB; a probe got: $PROBE_REPLY"
    [ "$full_reply" = "452_4.3.1" ] || fail=${fail:+$fail,}probe_reply_${full_reply}
    local acked
    acked=$(uniq_lines "$ACKS")

    # -- next hop up: drain, and probe whether new mail is accepted again
    local t_sink resumed=no resume_s=n/a drain_s=n/a deadline missing
    sink_start "$SINK_PORT" "$IDS"
    t_sink=$(now)
    log "sink up; waiting for $acked acknowledged messages (at most $DRAIN_TIMEOUT s), probing new mail every second"
    deadline=$(( $(date +%s) + DRAIN_TIMEOUT ))
    while true; do
        if [ "$resumed" = no ]; then
            probe "probe@domain2.example"
            if [ "$PROBE_RC" = 0 ]; then
                resumed=yes; resume_s=$(secs_since "$t_sink")
                log "new mail accepted again after $resume_s s (no restart)"
            fi
        fi
        missing=$(missing_count "$ACKS" "$IDS")
        if [ "$missing" = 0 ]; then drain_s=$(secs_since "$t_sink"); break; fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "drain timeout: $missing acknowledged messages not at the sink"
            fail=${fail:+$fail,}drain_timeout
            break
        fi
        sleep 1
    done
    [ "$drain_s" != n/a ] && log "all acknowledged mail delivered after $drain_s s; spool $(spool_kb "$var/spool") kB"
    deadline=$(( $(date +%s) + RESUME_TIMEOUT ))
    while [ "$resumed" = no ] && [ "$(date +%s)" -lt "$deadline" ]; do
        sleep 1
        probe "probe@domain2.example"
        if [ "$PROBE_RC" = 0 ]; then
            resumed=yes; resume_s=$(secs_since "$t_sink")
            log "new mail accepted again after $resume_s s (no restart)"
        fi
    done
    [ "$resumed" = yes ] || { log "new mail still refused: $PROBE_REPLY"; fail=${fail:+$fail,}not_resumed; }
    local burst=0 drained_kb
    if [ "$resumed" = yes ]; then
        "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions 10 --count "$RESUME_COUNT" \
            --size "$SIZE" --interval 5 --ack-log "$ACKS" >"$W/burst.out" 2>"$W/burst.err" || true
        [[ $(grep '^BENCH ' "$W/burst.out" | tail -1) =~ messages=([0-9]+) ]] && burst=${BASH_REMATCH[1]}
        log "burst after the drain: $burst of $RESUME_COUNT accepted"
        [ "$burst" = "$RESUME_COUNT" ] || fail=${fail:+$fail,}burst_${burst}_of_$RESUME_COUNT
    fi
    # Everything acknowledged (fill, probes, burst) must arrive.
    deadline=$(( $(date +%s) + 60 ))
    while [ "$(missing_count "$ACKS" "$IDS")" != 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
    drained_kb=$(spool_kb "$var/spool")

    # -- one restart; nothing acknowledged may come twice
    local off
    serve_stop 60
    off=$(log_offset "$maillog")
    serve_start "$conf" "$SMTP_PORT" || die "sluice serve did not come up again"
    log "restarted: $(tail -c +"$((off + 1))" "$maillog" | grep -m1 'daemon started' | cut -d' ' -f2- || true); watching the sink for $RESTART_WAIT s"
    sleep "$RESTART_WAIT"
    serve_stop 60
    kill_wait "$SINK_PID" TERM 5
    SINK_PID=""

    local delivered lost dups damage corrupt
    acked=$(uniq_lines "$ACKS")
    delivered=$(uniq_lines "$IDS")
    lost=$(missing_count "$ACKS" "$IDS")
    dups=$(( $(lines "$IDS") - delivered ))
    damage=$(grep -c 'spool recovery:' "$maillog" || true)
    corrupt=$(count_files "$var/spool/corrupt")
    [ "$lost" = 0 ] || fail=${fail:+$fail,}lost_$lost
    [ "$dups" = 0 ] || fail=${fail:+$fail,}duplicates_$dups
    log "phase spool: acked=$acked delivered=$delivered lost=$lost duplicates=$dups"
    unmount_all

    local l="RESULT system=sluice workload=diskfull phase=spool fs_mb=$FS_MB segment_mib=$SEGMENT_MIB"
    l+=" acked=$acked temp_4xx=$temp4 full_reply=$full_reply fill_s=$fill_s full_spool_kb=$full_kb"
    l+=" delivered=$delivered lost=$lost duplicates=$dups drain_s=$drain_s resumed=$resumed"
    l+=" resume_s=$resume_s drained_spool_kb=$drained_kb burst_accepted=$burst/$RESUME_COUNT"
    l+=" recovery_damage=$damage corrupt_files=$corrupt"
    [ -n "$fail" ] && { l+=" failed=$fail"; any_failed=1; }
    LINES+=("$l")
}

# ========================================================== phase maildir ====
phase_maildir() {
    local fail="" fs=$W/mailfs conf maillog base
    conf=$W/maildir.toml; maillog=$W/maillog.maildir; base=$fs/mail
    ACKS=$W/maildir.acks
    mount_tmpfs "$fs" "$MAILFS_MB"
    mkdir -p "$base"
    cat >"$conf" <<EOF
hostname = "sluice.bench"
data_dir = "$W/var-maildir"
run_as_root = true
log_file = "$maillog"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]

[queue]
minimal_backoff_secs = 1
maximal_backoff_secs = 2

[local]
domains = ["local.test"]
maildir_base = "$base"
EOF
    log "=== phase maildir: tmpfs ${MAILFS_MB} MiB for Maildirs; filling it with $fs/filler"
    dd if=/dev/zero of="$fs/filler" bs=64k 2>/dev/null || true
    log "tmpfs avail $(fs_avail_kb "$fs") kB after the filler ($(( $(stat -c %s "$fs/filler") / 1024 )) kB)"
    serve_start "$conf" "$SMTP_PORT" || die "sluice serve did not come up"
    "$SLUICE_BENCH" bench --target "$HOST:$SMTP_PORT" --sessions 5 --count "$MAIL_N" \
        --size "$SIZE" --recipient-template 'box{n}@local.test' --recipient-count 5 \
        --interval 5 --ack-log "$ACKS" >"$W/mail.out" 2>"$W/mail.err" || true
    log "generator: $(grep '^BENCH ' "$W/mail.out" | tail -1 || true)"
    local acked deferred_ids deadline
    acked=$(uniq_lines "$ACKS")
    [ "$acked" = "$MAIL_N" ] || fail=${fail:+$fail,}acked_${acked}_of_$MAIL_N
    deferred_qids() {
        grep 'status=deferred (4\.2\.2' "$maillog" | awk '{ print $3 }' | sort -u | wc -l | tr -d ' '
    }
    deadline=$(( $(date +%s) + 30 ))
    while [ "$(deferred_qids)" -lt "$acked" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
    # Let them be retried (and deferred again) a few times.
    sleep 4
    deferred_ids=$(deferred_qids)
    log "deferred with 4.2.2: $deferred_ids distinct messages, $(grep -c 'status=deferred (4\.2\.2' "$maillog" || true) attempts; e.g. $(grep -m1 'status=deferred (4\.2\.2' "$maillog" | cut -d' ' -f3- || true)"
    [ "$deferred_ids" -ge "$acked" ] || fail=${fail:+$fail,}deferred_${deferred_ids}_of_$acked
    local early
    early=$(find "$base" -path '*/new/*' -type f 2>/dev/null | wc -l | tr -d ' ' || true)
    [ "$early" = 0 ] || log "WARNING: $early files in new/ while the filesystem was full"

    local t_free delivered=0 deliver_s=n/a
    rm -f "$fs/filler"
    t_free=$(now)
    log "filler deleted (tmpfs avail $(fs_avail_kb "$fs") kB); waiting for delivery"
    deadline=$(( $(date +%s) + 60 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        delivered=$(find "$base" -path '*/new/*' -type f 2>/dev/null | wc -l | tr -d ' ' || true)
        if [ "$delivered" -ge "$acked" ]; then deliver_s=$(secs_since "$t_free"); break; fi
        sleep 0.5
    done
    sleep 2   # anything more (duplicates) would come now
    serve_stop 60
    find "$base" -path '*/new/*' -type f -exec grep -h -m1 -i '^Message-ID:' {} + 2>/dev/null \
        | awk '{ print $2 }' | tr -d '\r' >"$W/maildir.ids" || true
    local lost dups bounced files
    files=$(lines "$W/maildir.ids")
    delivered=$(uniq_lines "$W/maildir.ids")
    lost=$(missing_count "$ACKS" "$W/maildir.ids")
    dups=$((files - delivered))
    bounced=$(grep -c 'status=bounced' "$maillog" || true)
    [ "$lost" = 0 ] || fail=${fail:+$fail,}lost_$lost
    [ "$dups" = 0 ] || fail=${fail:+$fail,}duplicates_$dups
    [ "$bounced" = 0 ] || fail=${fail:+$fail,}bounced_$bounced
    [ "$deliver_s" != n/a ] || fail=${fail:+$fail,}not_delivered_within_60s
    log "phase maildir: acked=$acked delivered=$delivered lost=$lost duplicates=$dups bounced=$bounced after ${deliver_s} s"
    unmount_all

    local l="RESULT system=sluice workload=diskfull phase=maildir fs_mb=$MAILFS_MB n=$MAIL_N acked=$acked"
    l+=" deferred_4_2_2=$deferred_ids bounced=$bounced delivered=$delivered lost=$lost duplicates=$dups"
    l+=" deliver_after_free_s=$deliver_s"
    [ -n "$fail" ] && { l+=" failed=$fail"; any_failed=1; }
    LINES+=("$l")
}

log "disk full: phases [$PHASES] tmp=$W"
for p in $PHASES; do
    wait_free "$SMTP_PORT" 30 || die "port $SMTP_PORT still in use"
    "phase_$p"
done
keep_if_failed "$any_failed"
report "$RESULTS_FILE" "${LINES[@]}"
exit "$any_failed"

# bench/lib/filter.sh — FILTER=sluice for bench/relay.sh (issue 40's
# benchmark): both systems hand every message to the same after-queue
# content filter, as Postfix's FILTER_README "advanced content filter",
# and relay the copy it sends back:
#
#   generator -> system :55125 (content_filter = smtp:[127.0.0.1]:55324)
#             -> filter :55324 (a Sluice relay, its own fresh data_dir,
#                durability on, outside the measured cgroup)
#             -> system :55126 (the reinjection listener: no filter)
#             -> sink   :55225
#
# So each message is queued twice by the system under test and once by
# the filter. The filter is the same program with the same settings for
# both systems; its CPU is not in cpu_s (the system's cgroup), it is
# quoted apart as filter_cpu_ms_per_msg. The run fails unless the
# filter's log shows it relayed to the reinjection port (filter_check).
#
# Postfix's side is FILTER_README's: main.cf content_filter, and a
# reinjection smtpd on 127.0.0.1:55126 with -o content_filter= and
# receive_override_options (no_unknown_recipient_checks,
# no_header_body_checks, no_milters). Sluice's: [content_checks]
# content_filter and a [[smtpd.listeners]] with content_filter = "".

FILTER=${FILTER:-none}
FILTER_PORT=55324
REINJECT_PORT=55126
FILTER_PID=""

filter_on() { [ "$FILTER" = sluice ]; }

filter_setup() {
    case $FILTER in none|sluice) ;; *) die "FILTER must be none or sluice" ;; esac
    filter_on || return 0
    [ "$RESTRICTIONS" = none ] && [ "$REWRITE" = none ] \
        || die "FILTER=sluice runs alone (RESTRICTIONS=none REWRITE=none)"
    local p
    for p in $FILTER_PORT $REINJECT_PORT; do
        listening "$p" && die "port $p is already in use on this machine"
    done
    log "filter: every message through an after-queue content filter (a Sluice relay on :$FILTER_PORT, back on :$REINJECT_PORT)"
}

# filter_start: a fresh filter instance for one run.
filter_start() {
    filter_on || return 0
    local var="$W/filter-var"
    rm -rf "$var"; mkdir -p "$var"
    cat >"$W/filter.toml" <<EOF
hostname = "filter.bench"
data_dir = "$var"
$(grep -qa run_as_root "$SLUICE" && echo "run_as_root = true")

[smtpd]
listen = ["$HOST:$FILTER_PORT"]
max_sessions = 2000

[delivery]
relayhost = "smtp:[$HOST]:$REINJECT_PORT"
default_concurrency = 250
EOF
    "$SLUICE" serve --config "$W/filter.toml" >"$W/filter.log" 2>&1 &
    FILTER_PID=$!
    wait_listen "$FILTER_PORT" 30 "$FILTER_PID" || {
        tail -20 "$W/filter.log" >&2 || true
        die "the filter did not come up on $HOST:$FILTER_PORT"
    }
}

# filter_stop: stops it; sets FILTER_CPU_S (user + system seconds).
filter_stop() {
    FILTER_CPU_S=n/a
    filter_on || return 0
    [ -n "$FILTER_PID" ] || return 0
    local ticks
    ticks=$(awk '{ print $14 + $15 }' "/proc/$FILTER_PID/stat" 2>/dev/null || true)
    [ -n "$ticks" ] && FILTER_CPU_S=$(calc "$ticks / $(getconf CLK_TCK)")
    kill_wait "$FILTER_PID" TERM 30
    FILTER_PID=""
}

# filter_check: the filter relayed mail back to the reinjection port.
filter_check() {
    filter_on || return 0
    grep -qE "$HOST\]?:$REINJECT_PORT" "$W/filter.log"
}

# Sluice's sections.
filter_sluice_toml() {
    filter_on || return 0
    cat <<TOML

[content_checks]
content_filter = "smtp:[$HOST]:$FILTER_PORT"

[[smtpd.listeners]]
listen = "$HOST:$REINJECT_PORT"
content_filter = ""
TOML
}

# Lines appended to Postfix's main.cf.
filter_postfix_main_cf() {
    filter_on || return 0
    cat <<CF

# FILTER=sluice (bench/lib/filter.sh)
content_filter = smtp:[$HOST]:$FILTER_PORT
CF
}

# Lines appended to Postfix's master.cf: FILTER_README's reinjection
# service.
filter_postfix_master_cf() {
    filter_on || return 0
    cat <<CF
$HOST:$REINJECT_PORT inet n - n - - smtpd
  -o content_filter=
  -o receive_override_options=no_unknown_recipient_checks,no_header_body_checks,no_milters
  -o mynetworks=127.0.0.0/8
CF
}

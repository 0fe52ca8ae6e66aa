#!/usr/bin/env bash
# packaging/test-deb.sh — tests the .deb as it ships (issue 18 item 5).
#
# Builds it (SLUICE_BUILD=1, the default: cargo build --release --locked;
# SLUICE_BUILD=0 packs the binary as it is) and on this machine, as root:
#  1. installs it and checks the owner and mode of every path it ships or
#     makes, and that the unit's user can read and write what the shipped
#     configuration names;
#  2. starts the daemon exactly as the installed unit says, read from
#     /lib/systemd/system/sluice.service (nothing masked or overridden):
#     its ExecStartPre= and ExecStart= with the shipped configuration,
#     User=, Group=, UMask=, AmbientCapabilities=, CapabilityBoundingSet=,
#     NoNewPrivileges=, LimitNOFILE= (setpriv, prlimit) and, in a mount
#     namespace, ProtectSystem=strict with ReadWritePaths=, PrivateTmp=,
#     ProtectHome=, PrivateDevices=; waits until it listens on the shipped
#     addresses; mail to localhost over SMTP (both addresses) and through
#     the installed sendmail lands in the Maildir; SIGTERM stops it;
#  3. upgrades the package over itself with the daemon running and with
#     the administrator's changes (conffile, aliases, a dpkg-statoverride):
#     all kept, the daemon goes on, and started again it delivers;
#  4. removes and purges it (everything gone but delivered mail), installs
#     it again after the purge: it starts and delivers;
#  5. with systemd emulated (in a mount namespace: /run/systemd/system and
#     a systemctl that runs the unit as above, the real deb-systemd-helper
#     and deb-systemd-invoke): the upgrade stops the daemon in prerm and
#     restarts it in postinst; purge stops it; a fresh install starts it.
# Everything listens on 127.0.0.1/::1 and mail goes only to localhost and
# this host's name (local domains): nothing leaves the machine, no DNS.
# Leaves no daemon, no package, no mail, and no sluice user if there was none.
set -euo pipefail
SELF=$(readlink -f "$0")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
UNIT=/lib/systemd/system/sluice.service
CONF=/etc/sluice/sluice.toml
STATE=${SLUICE_TEST_STATE:-}
MODE=main   # or exec-unit, systemctl (the test runs itself as those)
T0=$(date +%s)

log() { printf '[test-deb] %s\n' "$*" >&2; }
fail() {
    log "FAIL: $*"
    case $MODE in
    systemctl) echo "FAILED: $*" >>"$STATE/systemctl.log" ;;
    main)
        if [ -n "$STATE" ] && [ -s "$STATE/unit.log" ]; then
            log "the unit's output (journal):"; tail -20 "$STATE/unit.log" >&2
        fi
        if [ -s /var/log/sluice/mail.log ]; then
            log "mail.log:"; tail -10 /var/log/sluice/mail.log >&2
        fi ;;
    esac
    exit 1
}
note() { # once each
    [ -n "$STATE" ] && ! grep -qxF -- "$*" "$STATE/notes" 2>/dev/null || return 0
    log "note: $*"; echo "$*" >>"$STATE/notes"
}

# ---------------------------------------------------------------- the unit
# parse_unit FILE: the [Service] settings into U[...] (one value each) and
# U_PRE (ExecStartPre= lines), as systemd reads them: later assignments win,
# an empty one resets a list. A setting this test cannot apply as systemd
# would fails the test, unless it only restricts the process further
# without changing what it can reach (those are listed as not emulated).
declare -A U
U_PRE=()
U_NOT_EMULATED=()
parse_unit() {
    local section='' line key val
    U=([UMask]=0022 [WorkingDirectory]=/ [TimeoutStopSec]=90 [Type]=simple)
    U_PRE=()
    U_NOT_EMULATED=()
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line#"${line%%[![:space:]]*}"}
        case $line in
        '' | '#'* | ';'*) continue ;;
        '['*']') section=$line; continue ;;
        *'\') fail "$1: continuation lines are not handled by this test: $line" ;;
        esac
        [ "$section" = "[Service]" ] || continue
        key=${line%%=*}; val=${line#*=}
        key=${key%"${key##*[![:space:]]}"}; val=${val#"${val%%[![:space:]]*}"}
        case $key in
        ExecStartPre) if [ -z "$val" ]; then U_PRE=(); else U_PRE+=("$val"); fi ;;
        ExecStart | User | Group | UMask | LimitNOFILE | NoNewPrivileges | ProtectSystem | \
            ProtectHome | PrivateTmp | PrivateDevices | TimeoutStopSec | Type | WorkingDirectory)
            U[$key]=$val ;;
        AmbientCapabilities | CapabilityBoundingSet | ReadWritePaths)
            if [ -z "$val" ]; then U[$key]=; else U[$key]="${U[$key]:-} $val"; fi ;;
        # Not part of starting it (reload, restart policy).
        ExecReload | Restart | RestartSec) ;;
        # Restrictions on top of the above (syscalls, address families,
        # kernel knobs): systemd would apply them; this test cannot.
        RestrictAddressFamilies | RestrictNamespaces | LockPersonality | MemoryDenyWriteExecute | \
            SystemCallArchitectures | SystemCallFilter | ProtectKernelTunables | ProtectKernelModules | \
            ProtectKernelLogs | ProtectControlGroups | ProtectClock | ProtectHostname | RestrictRealtime | \
            RestrictSUIDSGID | RemoveIPC | PrivateUsers)
            U_NOT_EMULATED+=("$key") ;;
        *) fail "$1: [Service] $key= is unknown to this test: teach it how systemd applies it" ;;
        esac
    done <"$1"
    [ "${U[Type]}" = simple ] || fail "$1: Type=${U[Type]}: only simple is emulated"
    [ -n "${U[ExecStart]:-}" ] && [ -n "${U[User]:-}" ] || fail "$1: no ExecStart= or User="
    U[Group]=${U[Group]:-$(id -gn "${U[User]}")}
}

# exec_argv LINE: the argv of an Exec line into ARGV; ARGV_IGNORE=1 with
# a "-" prefix. Quoting, specifiers, variables and the other prefixes are
# not handled: refused rather than guessed.
exec_argv() {
    local line=$1
    ARGV_IGNORE=0
    case $line in -*) ARGV_IGNORE=1; line=${line#-} ;; esac
    case $line in
    [@:+!]* | *[\"\'\\%\$]*) fail "Exec line not handled by this test: $1" ;;
    esac
    read -r -a ARGV <<<"$line"
}

# cap_names "CAP_A CAP_B": setpriv's form, +a,+b
cap_list() {
    local c out=
    for c in $1; do
        case $c in CAP_*) ;; *) fail "capability $c not handled by this test" ;; esac
        c=${c#CAP_}; out="$out,+${c,,}"
    done
    printf '%s' "${out#,}"
}

# cap_mask "CAP_A ...": the /proc/PID/status hex mask
cap_mask() {
    local c bit mask=0
    for c in $1; do
        case $c in
        CAP_NET_BIND_SERVICE) bit=10 ;;
        CAP_NET_ADMIN) bit=12 ;;
        CAP_NET_RAW) bit=13 ;;
        CAP_SETUID) bit=7 ;;
        CAP_SETGID) bit=6 ;;
        CAP_DAC_READ_SEARCH) bit=2 ;;
        CAP_SYS_RESOURCE) bit=24 ;;
        *) fail "capability $c: add its bit to cap_mask" ;;
        esac
        mask=$((mask | (1 << bit)))
    done
    printf '%016x' "$mask"
}

# --exec-unit (run by unit_start, as root, in its own mount namespace when
# SANDBOX=1): what systemd does between fork and exec of the service:
# the file system view, the limits, the umask, the credentials, a clean
# environment, ExecStartPre= in order (one failing fails the start), then
# exec of ExecStart= (the same PID throughout: the daemon's).
exec_unit() {
    echo $$ >"$STATE/pid"
    # Only 0-2 open, as systemd starts services.
    local fd
    for fd in /proc/$$/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null || true
    done
    parse_unit "$UNIT"
    # LimitNOFILE= raises the hard limit: that needs CAP_SYS_RESOURCE,
    # which some containers do not give root (systemd has it).
    if [ -n "${U[LimitNOFILE]:-}" ]; then
        ulimit -n "${U[LimitNOFILE]}" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
        ulimit -n >"$STATE/nofile"
    fi
    # The state directory is out of sight from here on (PrivateTmp=).
    if [ "${SANDBOX:-0}" = 1 ]; then sandbox; fi
    umask "${U[UMask]}"
    cd "${U[WorkingDirectory]}"
    local home shell caps
    home=$(getent passwd "${U[User]}" | cut -d: -f6)
    shell=$(getent passwd "${U[User]}" | cut -d: -f7)
    local priv=(setpriv --reuid="${U[User]}" --regid="${U[Group]}" --init-groups)
    case ${U[NoNewPrivileges]:-no} in yes | true | on | 1) priv+=(--no-new-privs) ;; esac
    if [ -n "${U[CapabilityBoundingSet]+x}" ]; then
        caps=$(cap_list "${U[CapabilityBoundingSet]}")
        priv+=(--bounding-set="-all${caps:+,$caps}")
    fi
    if [ -n "${U[AmbientCapabilities]:-}" ]; then
        caps=$(cap_list "${U[AmbientCapabilities]}")
        priv+=(--inh-caps="$caps" --ambient-caps="$caps")
    fi
    priv+=(-- env -i "HOME=$home" "USER=${U[User]}" "LOGNAME=${U[User]}" "SHELL=$shell"
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    local line rc
    for line in "${U_PRE[@]}"; do
        exec_argv "$line"
        echo "ExecStartPre=$line"
        rc=0
        "${priv[@]}" "${ARGV[@]}" </dev/null || rc=$?
        if [ "$rc" != 0 ] && [ "$ARGV_IGNORE" = 0 ]; then
            echo "sluice.service: control process exited, status=$rc: the unit fails to start"
            exit "$rc"
        fi
    done
    exec_argv "${U[ExecStart]}"
    echo "ExecStart=${U[ExecStart]} (as ${U[User]}:${U[Group]}, umask ${U[UMask]}, ${priv[*]:1:6})"
    exec "${priv[@]}" "${ARGV[@]}" </dev/null
}

# The mount namespace of ProtectSystem=strict + ReadWritePaths=,
# PrivateTmp=, ProtectHome=yes, PrivateDevices=.
sandbox() {
    local p m rw=()
    mount --make-rprivate /
    for p in ${U[ReadWritePaths]:-}; do
        case $p in -*) p=${p#-}; [ -e "$p" ] || continue ;; esac
        # systemd: a missing path fails the start (status=226/NAMESPACE)
        [ -e "$p" ] || { echo "ReadWritePaths=$p does not exist: status=226/NAMESPACE"; exit 226; }
        mount --bind "$p" "$p"
        rw+=("$p")
    done
    if [ "${U[PrivateDevices]:-no}" = yes ]; then
        local dev
        dev=$(mktemp -d /tmp/sluice-dev.XXXXXX)
        mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$dev"
        for p in null zero full random urandom tty; do
            touch "$dev/$p"; mount --bind "/dev/$p" "$dev/$p"
        done
        mkdir "$dev/shm" "$dev/pts"; chmod 1777 "$dev/shm"
        ln -s /proc/self/fd "$dev/fd"
        for p in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${p%%:*}" "$dev/${p#*:}"; done
        mount --move "$dev" /dev
        rmdir "$dev"
    fi
    case ${U[ProtectSystem]:-no} in
    strict)
        while read -r _ _ _ _ m _; do
            case $m in /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) continue ;; esac
            for p in "${rw[@]}"; do [ "$m" = "$p" ] && continue 2; done
            mount -o remount,bind,ro "$m" 2>/dev/null || true
        done </proc/self/mountinfo ;;
    no | false) ;;
    *) fail "ProtectSystem=${U[ProtectSystem]} not emulated" ;;
    esac
    if [ "${U[PrivateTmp]:-no}" = yes ]; then
        mount -t tmpfs -o mode=1777 tmpfs /tmp
        mount -t tmpfs -o mode=1777 tmpfs /var/tmp
    fi
    case ${U[ProtectHome]:-no} in
    yes | true)
        for p in /home /root /run/user; do
            [ -d "$p" ] && mount -t tmpfs -o ro,mode=000 tmpfs "$p"
        done ;;
    no | false) ;;
    *) fail "ProtectHome=${U[ProtectHome]} not emulated" ;;
    esac
}

# ------------------------------------------------ the daemon, as a service
alive() { # PID: running (not gone, not a zombie)
    [ -r "/proc/$1/stat" ] || return 1
    local s
    s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]
}
daemon_pid() { [ -s "$STATE/pid" ] && alive "$(cat "$STATE/pid")" && cat "$STATE/pid"; }

# The shipped configuration's listen addresses, as ss prints them.
listen_addrs() {
    python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb")).get("smtpd", {}).get("listen", [])))' "$CONF"
}

# unit_start: systemctl start, without systemd. Waits (30 s at most) until
# the daemon listens on every shipped address, or fails.
unit_start() {
    local pid='' want have='' deadline
    daemon_pid >/dev/null && fail "unit_start: already running"
    rm -f "$STATE/pid"
    echo "--- start $(date +%T)" >>"$STATE/unit.log"
    local ns=()
    [ "$SANDBOX" = 1 ] && ns=(unshare -m --propagation private)
    SLUICE_TEST_STATE=$STATE SANDBOX=$SANDBOX setsid -f "${ns[@]}" bash "$SELF" --exec-unit \
        </dev/null >>"$STATE/unit.log" 2>&1
    want=$(listen_addrs | sort)
    deadline=$((SECONDS + 30))
    while :; do
        [ -n "$pid" ] || pid=$(cat "$STATE/pid" 2>/dev/null || true)
        if [ -n "$pid" ]; then
            alive "$pid" || fail "the unit did not start (the daemon exited)"
            have=$(ss -Hltnp | awk -v p="pid=$pid," 'index($0, p) { print $4 }' | sort)
            [ "$have" = "$want" ] && break
        fi
        [ $SECONDS -lt $deadline ] || fail "not listening on ${want//$'\n'/ } after 30 s (listening: ${have:-nothing})"
        sleep 0.1
    done
}

# unit_stop: systemctl stop: SIGTERM, wait TimeoutStopSec=, then SIGKILL (a fail).
unit_stop() {
    local pid deadline stopped
    pid=$(daemon_pid) || return 0
    stopped=$(grep -c "daemon stopped" /var/log/sluice/mail.log || true)
    kill -TERM "$pid"
    deadline=$((SECONDS + ${U[TimeoutStopSec]%s}))
    while alive "$pid"; do
        if [ $SECONDS -ge $deadline ]; then
            kill -KILL "$pid"; fail "the daemon did not exit within TimeoutStopSec=${U[TimeoutStopSec]} of SIGTERM"
        fi
        sleep 0.1
    done
    rm -f "$STATE/pid"
    [ "$(grep -c "daemon stopped" /var/log/sluice/mail.log)" -gt "$stopped" ] || fail "the daemon did not log a clean stop"
}

# --systemctl (PATH's systemctl inside with_systemd): what the maintainer
# scripts (through deb-systemd-invoke and deb-systemd-helper) ask of
# systemd, logged as "<script> <verb> <unit>" and carried out on the unit.
systemctl_stub() {
    local verb='' unit='' a
    if printf '%s\n' "$@" | grep -q '^--root='; then exec /usr/bin/systemctl "$@"; fi
    for a in "$@"; do
        case $a in -*) ;; *) if [ -z "$verb" ]; then verb=$a; else unit=$a; fi ;; esac
    done
    echo "${DPKG_MAINTSCRIPT_NAME:-?} $verb${unit:+ $unit}" >>"$STATE/systemctl.log"
    case $verb in start | stop | restart) parse_unit "$UNIT" ;; esac
    case $verb in
    daemon-reload) ;;
    is-enabled)
        if [ -L /etc/systemd/system/multi-user.target.wants/sluice.service ]; then echo enabled
        else echo disabled; return 1; fi ;;
    is-active) if daemon_pid >/dev/null; then echo active; else echo inactive; return 3; fi ;;
    start) daemon_pid >/dev/null || unit_start ;;
    stop) unit_stop ;;
    restart) unit_stop; unit_start ;;
    *) echo "${DPKG_MAINTSCRIPT_NAME:-?} UNHANDLED $*" >>"$STATE/systemctl.log"; return 1 ;;
    esac
}

# with_systemd CMD...: CMD in a mount namespace where systemd seems to run
# (/run/systemd/system) and systemctl is the stub above; this machine's
# policy-rc.d (if it forbids starting services) is set aside there.
with_systemd() {
    mkdir -p "$STATE/bin"
    printf '#!/bin/sh\nexec bash %q --systemctl "$@"\n' "$SELF" >"$STATE/bin/systemctl"
    printf '#!/bin/sh\nexit 0\n' >"$STATE/policy-rc.d"
    chmod 0755 "$STATE/bin/systemctl" "$STATE/policy-rc.d"
    : >"$STATE/systemctl.log"
    [ -d /run/systemd ] || { mkdir /run/systemd; RUN_SYSTEMD_MADE=1; }
    SLUICE_TEST_STATE=$STATE SANDBOX=$SANDBOX unshare -m --propagation private bash -c '
        set -e
        mount -t tmpfs -o mode=0755 tmpfs /run/systemd
        mkdir /run/systemd/system
        [ ! -e /usr/sbin/policy-rc.d ] || mount --bind "$SLUICE_TEST_STATE/policy-rc.d" /usr/sbin/policy-rc.d
        PATH=$SLUICE_TEST_STATE/bin:$PATH exec "$@"' with-systemd "$@"
}

# expect_calls WHAT "prerm stop" ...: the maintainer scripts of WHAT
# started, stopped or restarted sluice.service exactly so, in this order
# (a postinst that starts it reloads systemd first).
expect_calls() {
    local want got what=$1
    shift
    want=$(printf '%s sluice.service\n' "$@")
    got=$(grep -E ' (start|stop|restart) ' "$STATE/systemctl.log" || true)
    if grep -qE 'UNHANDLED|FAILED' "$STATE/systemctl.log"; then fail "systemctl (emulated): $(grep -E 'UNHANDLED|FAILED' "$STATE/systemctl.log")"; fi
    [ "$got" = "$want" ] || fail "systemctl calls: got [${got//$'\n'/, }], want [${want//$'\n'/, }] (all: $(paste -sd, "$STATE/systemctl.log"))"
    if grep -qE '^postinst (start|restart)' "$STATE/systemctl.log"; then
        grep -B100 -E '^postinst (start|restart)' "$STATE/systemctl.log" | grep -q '^postinst daemon-reload' ||
            fail "postinst started the unit without daemon-reload"
    fi
    log "   $what: $(grep -vE ' (is-enabled|is-active)' "$STATE/systemctl.log" | sed 's/ sluice.service//' | paste -sd, | sed 's/,/, /g')"
}

if [ "${1:-}" = --exec-unit ]; then MODE=exec-unit; exec_unit; fi
if [ "${1:-}" = --systemctl ]; then MODE=systemctl; shift; systemctl_stub "$@"; exit; fi
# Processes of the user sluice (zombies aside).
sluice_procs() { ps -u sluice -o pid=,stat=,args= 2>/dev/null | awk '$2 !~ /^Z/' || true; }

# ---------------------------------------------------------------- checks
# expect_path PATH OWNER GROUP MODE
expect_path() {
    local got
    got=$(stat -c '%U %G %a' "$1" 2>/dev/null) || fail "$1 missing"
    [ "$got" = "$2 $3 $4" ] || fail "$1 is $got, want $2 $3 $4"
}

check_installed() { # [vhosts mode]
    local p
    [ "$(dpkg-query -W -f='${Status}' sluice 2>/dev/null)" = "install ok installed" ] || fail "not installed"
    # Every shipped path: root's, not writable by group or others (but symlinks).
    while read -r p; do
        [ -e "$p" ] && [ ! -L "$p" ] || continue
        [ "$(stat -c %U "$p")" = root ] || fail "shipped $p owned by $(stat -c %U "$p")"
        [ $((0$(stat -c %a "$p") & 022)) = 0 ] || fail "shipped $p is group/world writable"
    done < <(dpkg -L sluice)
    getent passwd sluice >/dev/null || fail "no sluice user"
    expect_path /usr/bin/sluice root root 755
    expect_path "$UNIT" root root 644
    # Man pages (gzipped roff, section 8) and completions, made by the
    # binary (unless dpkg is told not to install man pages, as in Docker).
    if grep -qs '^path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg /etc/dpkg/dpkg.cfg.d/*; then
        note "dpkg excludes /usr/share/man: man pages not checked"
    else
        for p in /usr/share/man/man8/sluice.8.gz /usr/share/man/man8/sluice-queue.8.gz; do
            expect_path "$p" root root 644
        done
        zgrep -q '^\.TH sluice 8 ' /usr/share/man/man8/sluice.8.gz || fail "sluice.8.gz is not a section 8 page"
    fi
    for p in /usr/share/bash-completion/completions/sluice /usr/share/zsh/vendor-completions/_sluice \
        /usr/share/fish/vendor_completions.d/sluice.fish; do
        expect_path "$p" root root 644
    done
    expect_path /etc/sluice root sluice 750
    expect_path /etc/sluice/sluice.toml root sluice 640
    for p in local-domains mailboxes aliases; do expect_path "/etc/sluice/$p" root sluice 640; done
    expect_path /etc/sluice/dkim root sluice 2750
    expect_path /var/spool/sluice sluice sluice 711
    expect_path /var/log/sluice sluice adm 2750
    expect_path /var/mail/vhosts sluice sluice "${1:-700}"
    dpkg-query -W -f='${Conffiles}\n' sluice | grep -q " $CONF " || fail "$CONF is not a conffile"
    for p in /usr/sbin/sendmail /usr/bin/mailq /usr/bin/newaliases; do
        [ "$(readlink "$p")" = /usr/bin/sluice ] || fail "$p is not linked to sluice"
    done
    for p in /etc/sluice/*.dpkg-*; do [ ! -e "$p" ] || fail "dpkg leftover $p"; done
    # As shipped: nothing masks or overrides the unit.
    for p in /etc/systemd/system /run/systemd/system; do
        [ ! -e "$p/sluice.service" ] && [ ! -L "$p/sluice.service" ] || fail "$p/sluice.service overrides the unit"
        [ ! -d "$p/sluice.service.d" ] || fail "$p/sluice.service.d overrides the unit"
    done
    [ ! -d /lib/systemd/system/sluice.service.d ] || fail "drop-ins for the unit"
    # Enabled for the next boot (deb-systemd-helper), as Debian does.
    [ -L /etc/systemd/system/multi-user.target.wants/sluice.service ] || fail "the unit is not enabled"
    # The shipped configuration: loopback only, valid.
    while read -r p; do
        case $p in 127.*:* | '[::1]':*) ;; *) fail "the shipped config listens on $p (not loopback)" ;; esac
    done < <(listen_addrs)
    /usr/bin/sluice check-config --config "$CONF" >/dev/null || fail "check-config $CONF"
}

# What the configuration names, checked as the unit's user: read the
# configuration, its tables and key files, write data_dir, the log's
# directory and the Maildir base.
check_access_as_user() {
    local line kind p
    while read -r kind p; do
        case $kind in
        r) setpriv --reuid="${U[User]}" --regid="${U[Group]}" --init-groups test -r "$p" ||
            fail "${U[User]} cannot read $p" ;;
        w) setpriv --reuid="${U[User]}" --regid="${U[Group]}" --init-groups test -w "$p" -a -x "$p" ||
            fail "${U[User]} cannot write $p" ;;
        esac
    done < <(python3 - "$CONF" <<'EOF'
import os, sys, tomllib
path = sys.argv[1]
c = tomllib.load(open(path, "rb"))
print("r", path)
data = c.get("data_dir", "./var")
print("w", data)
if c.get("log_file"):
    print("w", os.path.dirname(c["log_file"]))
for t in c.get("tables", {}).values():
    if t.get("path"):
        print("r", t["path"])
for k in c.get("dkim", {}).get("keys", []):
    print("r", k["key_file"])
for k in ("cert_file", "key_file"):
    if c.get("tls", {}).get(k):
        print("r", c["tls"][k])
local = c.get("local", {})
if local.get("domains") or local.get("domain_table"):
    print("w", local.get("maildir_base") or os.path.join(data, "mail"))
EOF
)
}

# The process as systemd would have made it.
check_process() {
    local pid=$1 st uid gid want_caps p
    st=$(cat "/proc/$pid/status")
    uid=$(id -u "${U[User]}"); gid=$(getent group "${U[Group]}" | cut -d: -f3)
    [ "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' <<<"$st")" = "$uid $uid $uid $uid" ] || fail "daemon $(grep ^Uid <<<"$st")"
    [ "$(awk '/^Gid:/ { print $2, $3, $4, $5 }' <<<"$st")" = "$gid $gid $gid $gid" ] || fail "daemon $(grep ^Gid <<<"$st")"
    [ "$(awk '/^Groups:/ { $1 = ""; print }' <<<"$st" | xargs)" = "$(id -G "${U[User]}")" ] || fail "daemon $(grep ^Groups <<<"$st")"
    want_caps=$(cap_mask "${U[AmbientCapabilities]:-}")
    for f in CapEff CapPrm CapAmb; do
        grep -q "^$f:.$want_caps$" <<<"$st" || fail "daemon $f: $(grep "^$f" <<<"$st"), want $want_caps"
    done
    grep -q "^CapBnd:.$(cap_mask "${U[CapabilityBoundingSet]:-}")$" <<<"$st" || fail "daemon $(grep ^CapBnd <<<"$st")"
    grep -q "^Umask:.${U[UMask]}$" <<<"$st" || fail "daemon $(grep ^Umask <<<"$st"), want ${U[UMask]}"
    grep -q "^NoNewPrivs:.1$" <<<"$st" || fail "daemon NoNewPrivs not set"
    [ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" = "${U[ExecStart]#-} " ] || fail "daemon runs $(tr '\0' ' ' <"/proc/$pid/cmdline")"
    if [ "$SANDBOX" = 1 ]; then # the emulated ProtectSystem=strict is in force
        awk '$5 == "/" { exit $6 !~ /(^|,)ro(,|$)/ }' "/proc/$pid/mountinfo" || fail "daemon: / is not read-only"
        for p in ${U[ReadWritePaths]:-}; do
            awk -v p="${p#-}" '$5 == p { found = 1; exit $6 !~ /(^|,)rw(,|$)/ } END { exit !found }' \
                "/proc/$pid/mountinfo" || fail "daemon: ${p#-} is not writable"
        done
    fi
    if [ -n "${U[LimitNOFILE]:-}" ]; then
        local n
        n=$(cat "$STATE/nofile")
        grep -qE "^Max open files +$n +$n " "/proc/$pid/limits" || fail "daemon $(grep 'open files' "/proc/$pid/limits")"
        [ "$n" = "${U[LimitNOFILE]}" ] ||
            note "LimitNOFILE=${U[LimitNOFILE]}: root here cannot raise the hard limit (no CAP_SYS_RESOURCE); ran with $n"
    fi
}

# root@localhost's Maildir, as the shipped [local] and its tables say.
root_maildir() {
    python3 - "$CONF" <<'EOF'
import os, sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
local = c.get("local", {})
if "localhost" not in [d.lower() for d in local.get("domains", [])]:
    sys.exit("localhost is not a local domain in the shipped configuration")
base = local.get("maildir_base") or os.path.join(c.get("data_dir", "./var"), "mail")
value = None
t = local.get("mailbox_table")
if t:
    for line in open(c["tables"][t]["path"]):
        f = line.split()
        if f and not f[0].startswith("#") and f[0].lower() == "root@localhost":
            value = f[1]
    if value is None:
        sys.exit("root@localhost has no mailbox")
if value is None or value == "root@localhost":
    value = local.get("maildir_template", "{base}/{domain}/{localpart}/Maildir").format(
        base=base, domain="localhost", localpart="root")
print(os.path.join(base, value))
EOF
}

# smtp HOST RCPT TOKEN: one message over SMTP to HOST:25; prints the greeting.
smtp() {
    python3 - "$@" <<'EOF'
import smtplib, sys, email.utils
host, rcpt, token = sys.argv[1:4]
s = smtplib.SMTP(timeout=30)
code, greeting = s.connect(host, 25)
print(code, greeting.decode())
s.ehlo("test-deb.localhost")
msg = (f"From: root@localhost\r\nTo: {rcpt}\r\nSubject: {token}\r\n"
       f"Date: {email.utils.formatdate()}\r\nMessage-ID: <{token}@test-deb.localhost>\r\n\r\n"
       f"test-deb {token}\r\n")
refused = s.sendmail("root@localhost", [rcpt], msg.encode())
s.quit()
sys.exit(1 if refused else 0)
EOF
}

# wait_mail TOKEN: the message is a file in root's Maildir (new/), 30 s at
# most; one file, not two.
wait_mail() {
    local deadline=$((SECONDS + 30)) f p
    while :; do
        f=$(grep -rlF -- "$1" "$MAILDIR/new" 2>/dev/null || true)
        [ -z "$f" ] || break
        [ $SECONDS -lt $deadline ] || fail "message $1 not delivered to $MAILDIR within 30 s"
        sleep 0.1
    done
    [ "$(wc -l <<<"$f")" = 1 ] || fail "message $1 delivered more than once: $f"
    DELIVERED=$((DELIVERED + 1))
    # What the daemon made, with UMask= and the directories' modes.
    expect_path "$f" sluice sluice 600
    for p in "$MAILDIR" "$MAILDIR/new" "$(dirname "$MAILDIR")"; do expect_path "$p" sluice sluice 700; done
    expect_path /var/log/sluice/mail.log sluice adm 640
    expect_path /var/spool/sluice/admin.sock sluice sluice 660
    expect_path /var/spool/sluice/public/submit.sock sluice sluice 666
    grep -q "^Delivered-To: root@localhost" "$f" || fail "$f: $(grep -m1 ^Delivered-To "$f")"
}

# token LABEL: a new unique Subject in T (not in a subshell: the count stays).
TOKENS=0 DELIVERED=0
token() { TOKENS=$((TOKENS + 1)); T="test-deb-$$-$TOKENS-$1"; }

# The unit started, mail in over both addresses, through sendmail, to the
# aliases; checked delivered. ARGS: extra recipients (aliases) to try.
deliver_all() {
    local t pid a rc out
    pid=$(daemon_pid) || fail "no daemon"
    for a in $(listen_addrs); do
        a=${a%:*}; a=${a#\[}; a=${a%\]}
        token "smtp-$a"; t=$T
        smtp "$a" root@localhost "$t" >/dev/null || fail "SMTP to $a refused"
        wait_mail "$t"
    done
    for a in postmaster@localhost ${HOSTDOMAIN:+root@$HOSTDOMAIN postmaster@$HOSTDOMAIN} "$@"; do
        token alias; t=$T
        smtp 127.0.0.1 "$a" "$t" >/dev/null || fail "SMTP to $a refused"
        wait_mail "$t"
    done
    token sendmail; t=$T
    printf 'Subject: %s\n\n%s\n' "$t" "$t" | /usr/sbin/sendmail -i root || fail "sendmail as root: exit $?"
    wait_mail "$t"
    # An ordinary account made here runs sendmail with no -C, from a
    # directory where another account (nobody) planted
    # ./var/public/submit.sock (2026-11-27 review H1): the mail reaches the
    # daemon (the package's socket, found without reading the 0640
    # config), and the plant gets no connection.
    unprivileged_sendmail
    UNPRIV="works (no -C, a planted ./var/public/submit.sock untouched)"
    local deadline=$((SECONDS + 30))
    until /usr/sbin/sendmail -bp | grep -q "Mail queue is empty"; do
        [ $SECONDS -lt $deadline ] || fail "queue not empty: $(/usr/sbin/sendmail -bp)"
        sleep 0.1
    done
    # newaliases (Debian packages' postinst scripts run it): success.
    /usr/bin/newaliases || fail "newaliases: exit $?"
    # The mailq link, as root (noted, not required).
    rc=0; out=$(/usr/bin/mailq 2>&1) || rc=$?
    if [ "$rc" = 0 ]; then MAILQ="works"; else MAILQ="fails: exit $rc: $out"; fi
    # Only local deliveries: nothing went off this machine.
    if grep 'status=' /var/log/sluice/mail.log | grep -v 'relay=maildir' | grep -q .; then
        fail "a delivery that is not to a Maildir: $(grep 'status=' /var/log/sluice/mail.log | grep -v relay=maildir | head -1)"
    fi
}

# sendmail as an ordinary account, from a directory with another account's
# planted socket: delivered, and the plant never connected to.
unprivileged_sendmail() {
    local user="sldeb$$" trap_dir plant t rc=0 out
    getent passwd "$user" >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    trap_dir=$(mktemp -d /tmp/sluice-plant.XXXXXX); chmod 1777 "$trap_dir"
    mkdir -p "$trap_dir/var/public"; chown -R nobody "$trap_dir/var"
    plant="$trap_dir/var/public/submit.sock"
    setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)
s.settimeout(60)
try:
    c, _ = s.accept(); open(sys.argv[2], "w").write("connected\n")
except socket.timeout:
    pass' "$plant" "$trap_dir/caught" &
    local plant_pid=$!
    local deadline=$((SECONDS + 10))
    until [ -S "$plant" ]; do [ $SECONDS -lt $deadline ] || fail "no plant"; sleep 0.1; done
    token unprivileged; t=$T
    out=$(printf 'Subject: %s\n\n%s\n' "$t" "$t" | (cd "$trap_dir" && setpriv --reuid="$user" --regid="$user" \
        --clear-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin USER="$user" /usr/sbin/sendmail -i root) 2>&1) || rc=$?
    kill "$plant_pid" 2>/dev/null || true; wait "$plant_pid" 2>/dev/null || true
    [ ! -e "$trap_dir/caught" ] || fail "sendmail as $user connected to the planted ./var/public/submit.sock"
    [ "$rc" = 0 ] || fail "sendmail as $user (no -C): exit $rc: $out"
    wait_mail "$t"
    rm -rf "$trap_dir"; userdel "$user" 2>/dev/null || true
}

start_and_deliver() { # as the unit, check the process, deliver
    parse_unit "$UNIT"
    check_access_as_user
    unit_start
    check_process "$(daemon_pid)"
    MAILDIR=$(root_maildir) || fail "shipped configuration: no Maildir for root@localhost"
    deliver_all "$@"
}

check_purged() { # everything gone but delivered mail (and the sluice user)
    local p
    [ "$(dpkg-query -W -f='${Status}' sluice 2>/dev/null || true)" != "install ok installed" ] || fail "still installed"
    for p in /usr/bin/sluice "$UNIT" /usr/share/doc/sluice /etc/sluice /var/spool/sluice /var/log/sluice \
        /usr/share/man/man8/sluice.8.gz /usr/share/bash-completion/completions/sluice \
        /etc/systemd/system/sluice.service /etc/systemd/system/multi-user.target.wants/sluice.service \
        /var/lib/systemd/deb-systemd-helper-enabled/sluice.service.dsh-also \
        /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/sluice.service \
        /var/lib/systemd/deb-systemd-helper-masked/sluice.service; do
        [ ! -e "$p" ] && [ ! -L "$p" ] || fail "purge left $p"
    done
    for p in /usr/sbin/sendmail /usr/bin/mailq /usr/bin/newaliases; do
        [ "$(readlink "$p" || true)" != /usr/bin/sluice ] || fail "purge left $p"
    done
    [ -z "$(sluice_procs)" ] || fail "a process of sluice is left: $(sluice_procs)"
    [ -d "$MAILDIR/new" ] && [ -n "$(ls "$MAILDIR/new")" ] || fail "purge removed delivered mail ($MAILDIR)"
    getent passwd sluice >/dev/null || fail "purge removed the sluice user (Debian keeps system users)"
}

dpkg_run() { # dpkg ARGS, its output kept for a failure; waits (5 min at
    local rc deadline=$((SECONDS + 300))   # most) while another dpkg or apt runs
    while :; do
        rc=0
        "$@" >"$STATE/dpkg.out" 2>&1 || rc=$?
        [ "$rc" != 0 ] && grep -q "lock was locked by another process" "$STATE/dpkg.out" &&
            [ $SECONDS -lt $deadline ] || break
        sleep 1
    done
    [ "$rc" = 0 ] || { cat "$STATE/dpkg.out" >&2; fail "$* failed ($rc)"; }
    if grep -qi warning "$STATE/dpkg.out"; then fail "$*: $(grep -i warning "$STATE/dpkg.out")"; fi
}

# ---------------------------------------------------------------- main
[ "$(id -u)" = 0 ] || fail "run as root"
for c in setpriv unshare python3 ss dpkg-statoverride deb-systemd-helper deb-systemd-invoke; do
    command -v "$c" >/dev/null || fail "needs $c"
done
if dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q installed; then
    fail "sluice is installed here already: this test installs and purges it; remove it first"
fi
[ ! -e /var/mail/vhosts ] || fail "/var/mail/vhosts exists: this test would deliver into it"
if ss -Hltn | awk '{ print $4 }' | grep -qE '(^|[]:*])25$'; then
    fail "something listens on port 25 already: $(ss -Hltnp | awk '$4 ~ /:25$/')"
fi
STATE=$(mktemp -d /tmp/sluice-test-deb.XXXXXX)
: >"$STATE/unit.log"
USER_EXISTED=0; getent passwd sluice >/dev/null && USER_EXISTED=1
OVERRIDE=0 RUN_SYSTEMD_MADE=0 UNPRIV=untried MAILQ=untried
cleanup() {
    local rc=$? pid
    set +e
    if [ -s "$STATE/pid" ]; then
        pid=$(cat "$STATE/pid")
        if alive "$pid"; then
            kill -TERM "$pid"
            for _ in $(seq 300); do alive "$pid" || break; sleep 0.1; done
            alive "$pid" && kill -KILL "$pid"
        fi
    fi
    [ "$OVERRIDE" = 0 ] || dpkg-statoverride --remove /var/mail/vhosts >/dev/null 2>&1
    for _ in $(seq 300); do # (another dpkg may hold the lock a while)
        dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q installed || break
        dpkg -P sluice >/dev/null 2>&1 || sleep 1
    done
    rm -rf /var/mail/vhosts
    [ "$RUN_SYSTEMD_MADE" = 0 ] || rmdir /run/systemd
    if [ "$USER_EXISTED" = 0 ] && getent passwd sluice >/dev/null; then
        userdel sluice 2>/dev/null; getent group sluice >/dev/null && groupdel sluice 2>/dev/null
    fi
    if [ "$rc" = 0 ]; then rm -rf "$STATE"; else log "state kept in $STATE"; fi
}
trap cleanup EXIT
SANDBOX=0
if unshare -m --propagation private true 2>/dev/null; then SANDBOX=1
else note "no mount namespace here: ProtectSystem=, ReadWritePaths=, PrivateTmp=, ProtectHome=, PrivateDevices= not emulated"; fi

DEB=$(bash "$REPO/packaging/build-deb.sh" | tail -1)
log "built $DEB ($(du -h "$DEB" | cut -f1))"
dpkg-deb --info "$DEB" >/dev/null
dpkg-deb -c "$DEB" | awk '$2 != "root/root" { bad = 1; print } END { exit bad }' >&2 || fail "files in the .deb not root/root"

log "1. install (no systemd running)"
dpkg_run dpkg -i "$DEB"
[ -z "$(sluice_procs)" ] || fail "postinst started a daemon without systemd: $(sluice_procs)"
check_installed
# A DKIM key made as the shipped configuration's comment says is one the
# unit's user can load.
/usr/bin/sluice dkim-keygen --domain localhost --selector test-deb --algorithm ed25519 \
    --out /etc/sluice/dkim/test-deb.pem >/dev/null 2>&1
chmod 0640 /etc/sluice/dkim/test-deb.pem
expect_path /etc/sluice/dkim/test-deb.pem root sluice 640
parse_unit "$UNIT"
install -o root -g sluice -m 0640 "$CONF" /etc/sluice/test-deb-dkim.toml
printf '\n[[dkim.keys]]\ndomain = "localhost"\nselector = "test-deb"\nkey_file = "%s"\n' \
    /etc/sluice/dkim/test-deb.pem >>/etc/sluice/test-deb-dkim.toml
setpriv --reuid="${U[User]}" --regid="${U[Group]}" --init-groups \
    /usr/bin/sluice check-config --config /etc/sluice/test-deb-dkim.toml >/dev/null ||
    fail "${U[User]} cannot load a DKIM key made as the comment says"
rm /etc/sluice/dkim/test-deb.pem /etc/sluice/test-deb-dkim.toml
HOSTDOMAIN=$(awk '!/^#/ && NF { print $1; exit }' /etc/sluice/local-domains)
log "   this host's mail name: ${HOSTDOMAIN:-none} (local-domains); modes ok"
# (systemd-analyze leaves a timestamp in /run/systemd: given its own there)
verify=(systemd-analyze verify "$UNIT")
[ "$SANDBOX" = 0 ] || verify=(unshare -m --propagation private sh -c \
    'mount -t tmpfs tmpfs /run/systemd && exec "$@"' verify "${verify[@]}")
if command -v systemd-analyze >/dev/null && ! "${verify[@]}" >"$STATE/verify" 2>&1; then
    note "systemd-analyze verify: $(tr '\n' ' ' <"$STATE/verify")"
fi

log "2. start as the unit says: $(parse_unit "$UNIT"; echo "User=${U[User]} ExecStart=${U[ExecStart]}")"
start_and_deliver
PID1=$(daemon_pid)
LISTEN=$(listen_addrs | paste -sd' ')
log "   listening on $LISTEN as pid $PID1; delivered to $MAILDIR"
[ ${#U_NOT_EMULATED[@]} = 0 ] || log "   not emulated (restrictions only): ${U_NOT_EMULATED[*]}"

log "3. upgrade over itself, daemon running, administrator's changes in place"
sed -i 's/^\[smtpd\]$/[smtpd]\nbanner = "ESMTP test-deb kept"/' "$CONF"
cp -p /etc/sluice/aliases "$STATE/aliases"
echo "test-deb@localhost  root@localhost" >>"$STATE/aliases"
cp -p "$STATE/aliases" /etc/sluice/aliases.new && mv /etc/sluice/aliases.new /etc/sluice/aliases
deadline=$((SECONDS + 30))   # the running daemon picks the change up once the file settled
until grep -q "table aliases: reloaded" /var/log/sluice/mail.log; do
    [ $SECONDS -lt $deadline ] || fail "the daemon did not reload the changed aliases"
    sleep 0.1
done
dpkg-statoverride --update --add sluice sluice 0750 /var/mail/vhosts; OVERRIDE=1
dpkg_run dpkg -i "$DEB"
[ "$(daemon_pid)" = "$PID1" ] || fail "the running daemon did not survive the upgrade without systemd"
check_installed 750
grep -q '^banner = "ESMTP test-deb kept"' "$CONF" || fail "the conffile change was lost"
grep -q '^test-deb@localhost' /etc/sluice/aliases || fail "the aliases change was lost"
deliver_all test-deb@localhost
unit_stop
start_and_deliver test-deb@localhost
token banner
smtp 127.0.0.1 root@localhost "$T" | grep -q "ESMTP test-deb kept" || fail "restarted without the kept config"
dpkg-statoverride --remove /var/mail/vhosts; OVERRIDE=0
unit_stop

log "4. remove, purge, install again"
dpkg_run dpkg -r sluice
[ ! -e /usr/bin/sluice ] && [ ! -e "$UNIT" ] || fail "remove left the program"
[ -f "$CONF" ] && [ -f /etc/sluice/aliases ] || fail "remove took the configuration"
for p in /usr/sbin/sendmail /usr/bin/mailq /usr/bin/newaliases; do [ ! -L "$p" ] || fail "remove left $p"; done
dpkg_run dpkg -P sluice
grep -q "/var/mail/vhosts holds mailboxes; left in place" "$STATE/dpkg.out" || fail "purge did not say it kept the mail"
check_purged
dpkg_run dpkg -i "$DEB"
check_installed
start_and_deliver
unit_stop

log "5. with systemd (emulated): upgrade restarts, purge stops, install starts"
unit_start
PID1=$(daemon_pid)
dpkg_run with_systemd dpkg -i "$DEB"
expect_calls "upgrade over itself" "prerm stop" "postinst restart"
PID2=$(daemon_pid) || fail "not running after the upgrade"
[ "$PID2" != "$PID1" ] && ! alive "$PID1" || fail "the upgrade did not restart the daemon"
log "   daemon pid $PID1 stopped, pid $PID2 started"
check_installed
MAILDIR=$(root_maildir); deliver_all
dpkg_run with_systemd dpkg -P sluice
expect_calls purge "prerm stop"
! alive "$PID2" || fail "purge did not stop the daemon"
check_purged
dpkg_run with_systemd dpkg -i "$DEB"
expect_calls "install after purge" "postinst start"
daemon_pid >/dev/null || fail "install did not start the daemon"
check_installed
parse_unit "$UNIT"; check_process "$(daemon_pid)"; deliver_all
dpkg_run with_systemd dpkg -P sluice
expect_calls purge "prerm stop"
daemon_pid >/dev/null && fail "purge did not stop the daemon"
check_purged

log "   sendmail as an unprivileged user: $UNPRIV"
log "   mailq (the link) as root: $MAILQ"
[ ! -s "$STATE/notes" ] || while read -r n; do log "   note: $n"; done <"$STATE/notes"
log "ok: installed, ran as the unit says (User=${U[User]}, shipped config and modes), listened on $LISTEN, delivered $DELIVERED messages to the Maildir; upgrade over itself, remove, purge, reinstall, with and without systemd ($(($(date +%s) - T0)) s)"

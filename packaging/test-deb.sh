#!/usr/bin/env bash
# packaging/test-deb.sh — builds the .deb, installs it on this machine and
# checks it: the sluice user and directories, the conffile, check-config,
# the systemd unit (systemd-analyze verify), the daemon started as the
# unit starts it (user sluice, only CAP_NET_BIND_SERVICE) on a loopback
# test port, mail submitted with the installed sendmail and seen by
# mailq/queue, then remove and purge. Needs root. Nothing leaves the
# machine: the test configuration discards all mail and asks no DNS.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
log() { printf '[test-deb] %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root"
command -v systemd-analyze >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >&2
DEB=$(bash "$REPO/packaging/build-deb.sh" | tail -1)
log "built $DEB ($(du -h "$DEB" | cut -f1))"
dpkg-deb --info "$DEB" >/dev/null
dpkg -i "$DEB" >&2
trap 'pkill -u sluice -f "sluice serve" 2>/dev/null || true; dpkg -P sluice >/dev/null 2>&1 || true' EXIT

getent passwd sluice >/dev/null || fail "no sluice user"
[ "$(stat -c '%U %a' /var/spool/sluice)" = "sluice 750" ] || fail "spool dir owner/mode"
[ -x /usr/bin/sluice ] && [ -f /etc/sluice/sluice.toml ] || fail "files"
dpkg-query -W -f='${Conffiles}\n' sluice | grep -q /etc/sluice/sluice.toml || fail "conffile"
/usr/bin/sluice check-config --config /etc/sluice/sluice.toml >/dev/null || fail "check-config"
systemd-analyze verify /lib/systemd/system/sluice.service 2>&1 | grep -v "^$" | grep -vi "not found\|Cannot add dependency\|network-online" >&2 || true
systemd-analyze verify /lib/systemd/system/sluice.service >/dev/null 2>&1 || log "note: systemd-analyze reports issues above (outside a booted systemd some are expected)"

# The installed config, on a loopback port, discarding everything.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
CONF=/etc/sluice/test.toml
sed -e "s|listen = \[\"0.0.0.0:25\"\]|listen = [\"127.0.0.1:$PORT\"]|" /etc/sluice/sluice.toml >"$CONF"
printf '\n[dns]\nnameservers = ["127.0.0.1:9"]\n\n[transport]\n"*" = "discard"\n' >>"$CONF"
chown root:sluice "$CONF"; chmod 0640 "$CONF"
# As the unit runs it: user sluice, only CAP_NET_BIND_SERVICE.
setpriv --reuid=sluice --regid=sluice --init-groups --inh-caps=+net_bind_service \
    --ambient-caps=+net_bind_service /usr/bin/sluice serve --config "$CONF" \
    >/tmp/sluice-test-deb.err 2>&1 &
for _ in $(seq 100); do ss -Hltn "sport = :$PORT" | grep -q . && break; sleep 0.1; done
ss -Hltn "sport = :$PORT" | grep -q . || { cat /tmp/sluice-test-deb.err >&2; fail "daemon did not start"; }
[ "$(stat -c %U /var/spool/sluice/admin.sock)" = sluice ] || fail "admin socket owner"
printf 'Subject: package test\n\nhello\n' | SLUICE_CONFIG="$CONF" /usr/bin/sluice sendmail -i root@example.test \
    || fail "sendmail"
for _ in $(seq 100); do grep -q "status=sent (discarded)" /var/log/sluice/mail.log && break; sleep 0.1; done
grep -q "status=sent (discarded)" /var/log/sluice/mail.log || fail "not delivered: $(tail -5 /var/log/sluice/mail.log)"
grep -q "sluice/sendmail: .*uid=0, from=<root@localhost>" /var/log/sluice/mail.log \
    || fail "the submission is not logged with its uid"
/usr/bin/sluice queue --config "$CONF" list | grep -q "Mail queue is empty" || fail "queue not empty"
pkill -TERM -u sluice -f "sluice serve"; sleep 1
rm -f "$CONF"
dpkg -r sluice >&2
[ ! -e /usr/bin/sluice ] || fail "binary left after remove"
[ -f /etc/sluice/sluice.toml ] || fail "conffile should stay after remove"
dpkg -P sluice >&2
[ ! -e /etc/sluice ] && [ ! -e /var/spool/sluice ] || fail "purge left files"
trap - EXIT
log "ok: install, run as sluice with CAP_NET_BIND_SERVICE, sendmail, remove, purge"

# bench/lib/restrictions.sh — RESTRICTIONS=typical for bench/local.sh and
# bench/relay.sh (issue 38's benchmark): both systems apply the same
# restriction set, a typical site's (docker-mailserver's shape), to every
# RCPT:
#
#   smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated,
#       reject_unauth_destination
#   smtpd_recipient_restrictions = permit_mynetworks,
#       permit_sasl_authenticated, reject_unauth_pipelining,
#       reject_invalid_helo_hostname, reject_non_fqdn_helo_hostname,
#       reject_non_fqdn_sender, reject_non_fqdn_recipient,
#       reject_unknown_sender_domain, reject_unknown_recipient_domain,
#       check_sender_access texthash:ACCESS, reject_rbl_client rbl.bench,
#       reject_unauth_destination
#
# with mynetworks = 127.0.0.2/32, so the generator (127.0.0.1) is a
# stranger and every check runs. DNS: an nsd of the benchmark's own on
# 127.0.0.1:53 serves gen.bench (the sender's domain: an MX and its
# address; sender.example likewise, the smoke test's) and rbl.bench (lists nothing: every query is NXDOMAIN). Sluice
# asks it through [dns]; Postfix through a resolv.conf bind-mounted in a
# private mount namespace (the machine's is untouched). Nothing leaves
# 127.0.0.0/8. Sluice's per-client connection limit is lifted (Postfix
# exempts 127.0.0.0/8 through smtpd_client_event_limit_exceptions; Sluice
# exempts only mynetworks).
#
# bench/relay.sh sets, before restrictions_setup:
#   RS_EXTRA_ZONES    more zones served like gen.bench (an MX and its
#                     address): its recipients' and senders' domains, so
#                     reject_unknown_{recipient,sender}_domain pass;
#   RS_RELAY_DOMAINS  relay_domains on both systems (the generator, a
#                     stranger, may relay there: reject_unauth_destination
#                     at the end of the list lets it through, after every
#                     check above it ran).
# local.sh sets neither: its recipients are local.

RS_RELAY="permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"
RS_RECIPIENT="permit_mynetworks, permit_sasl_authenticated, reject_unauth_pipelining, reject_invalid_helo_hostname, reject_non_fqdn_helo_hostname, reject_non_fqdn_sender, reject_non_fqdn_recipient, reject_unknown_sender_domain, reject_unknown_recipient_domain, check_sender_access texthash:__ACCESS__, reject_rbl_client rbl.bench, reject_unauth_destination"
RS_NSD_PID=""
RS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

restrictions_on() { [ "${RESTRICTIONS:-none}" = typical ]; }

# One query to nsd: true when it answers gen.bench's MX.
rs_dns_answers() {
    python3 - <<'PY' 2>/dev/null
import socket, struct, sys
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p for p in b"gen.bench".split(b".")) + b"\0"
q += struct.pack(">HH", 15, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
s.sendto(q, ("127.0.0.1", 53))
r = s.recv(512)
sys.exit(0 if struct.unpack(">H", r[6:8])[0] > 0 else 1)
PY
}

restrictions_setup() {
    restrictions_on || return 0
    [ -x /usr/sbin/nsd ] || { apt-get install -y -qq nsd >/dev/null && service nsd stop >/dev/null 2>&1 || true; }
    local d="$W/rs"
    mkdir -p "$d"
    local soa='$TTL 3600
@ SOA ns.bench. hostmaster.bench. 1 3600 600 86400 3600
@ NS ns.bench.'
    printf '%s\n@ MX 10 mx\nmx A 127.0.0.9\n' "$soa" >"$d/gen.bench.zone"
    # The smoke test's sender (check@sender.example) must pass too.
    printf '%s\n@ MX 10 mx\nmx A 127.0.0.9\n' "$soa" >"$d/sender.example.zone"
    printf '%s\n' "$soa" >"$d/rbl.bench.zone"
    local z
    for z in ${RS_EXTRA_ZONES:-}; do
        printf '%s\n@ MX 10 mx\nmx A 127.0.0.9\n' "$soa" >"$d/$z.zone"
    done
    cat >"$d/nsd.conf" <<EOF
server:
  ip-address: 127.0.0.1@53
  username: ""
  chroot: ""
  zonesdir: "$d"
  zonelistfile: "$d/zone.list"
  database: ""
  pidfile: "$d/nsd.pid"
  xfrdfile: "$d/xfrd.state"
  logfile: "$d/nsd.log"
  server-count: 1
  # No response rate limiting (nsd's default, 200 a second per client,
  # drops Postfix's uncached queries under load: "Domain not found").
  rrl-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: "gen.bench"
  zonefile: "$d/gen.bench.zone"
zone:
  name: "rbl.bench"
  zonefile: "$d/rbl.bench.zone"
zone:
  name: "sender.example"
  zonefile: "$d/sender.example.zone"
EOF
    for z in ${RS_EXTRA_ZONES:-}; do
        printf 'zone:\n  name: "%s"\n  zonefile: "%s"\n' "$z" "$d/$z.zone" >>"$d/nsd.conf"
    done
    /usr/sbin/nsd -d -c "$d/nsd.conf" 2>"$d/nsd.err" &
    RS_NSD_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        rs_dns_answers && break
        kill -0 "$RS_NSD_PID" 2>/dev/null || break
        sleep 0.1
    done
    rs_dns_answers || { cat "$d/nsd.err" >&2; die "nsd did not answer for gen.bench on 127.0.0.1:53"; }
    printf 'spammer@bad.example REJECT\nbad.example REJECT\n' >"$d/access"
    chmod 644 "$d/access"
    echo "nameserver 127.0.0.1" >"$d/resolv.conf"
    log "restrictions: typical set; nsd on 127.0.0.1:53 (gen.bench, rbl.bench${RS_EXTRA_ZONES:+, $RS_EXTRA_ZONES})${RS_RELAY_DOMAINS:+; relay_domains: $RS_RELAY_DOMAINS}"
}

restrictions_stop() {
    [ -n "$RS_NSD_PID" ] || return 0
    kill "$RS_NSD_PID" 2>/dev/null || true
    wait "$RS_NSD_PID" 2>/dev/null || true
    RS_NSD_PID=""
}

rs_recipient_list() { echo "${RS_RECIPIENT//__ACCESS__/$W/rs/access}"; }

# Lines inside Sluice's [smtpd] section.
restrictions_sluice_smtpd() {
    restrictions_on || return 0
    printf 'mynetworks = ["127.0.0.2/32"]\nclient_connection_limit = 0\n'
    if [ -n "${RS_RELAY_DOMAINS:-}" ]; then
        local d list=""
        for d in $RS_RELAY_DOMAINS; do list+="${list:+, }\"$d\""; done
        printf 'relay_domains = [%s]\n' "$list"
    fi
}

# Sluice's [restrictions] section and its resolver.
restrictions_sluice_toml() {
    restrictions_on || return 0
    cat <<EOF

[restrictions]
relay = "$RS_RELAY"
recipient = "$(rs_recipient_list)"
EOF
}

restrictions_sluice_nameserver() {
    if restrictions_on; then echo '"127.0.0.1:53"'; else echo '"127.0.0.1:9"'; fi
}

# Lines appended to Postfix's main.cf (the last setting of a name wins).
restrictions_postfix_main_cf() {
    restrictions_on || return 0
    cat <<EOF

# RESTRICTIONS=typical (bench/lib/restrictions.sh)
mynetworks = 127.0.0.2/32
smtpd_relay_restrictions = $RS_RELAY
smtpd_recipient_restrictions = $(rs_recipient_list)
EOF
    [ -z "${RS_RELAY_DOMAINS:-}" ] || echo "relay_domains = $RS_RELAY_DOMAINS"
}

# A [dns] section for a configuration that has none (relay.sh's): the
# benchmark's nsd.
restrictions_sluice_dns() {
    restrictions_on || return 0
    printf '\n[dns]\nnameservers = ["127.0.0.1:53"]\ntimeout_ms = 300\nattempts = 1\n'
}

# rs_check HOST:PORT RCPT: the lists are in force for the generator (a
# stranger), without sending a message (bench/lib/rscheck.py); its lines
# go to stderr. Returns its exit status.
rs_check() {
    python3 "$RS_LIB_DIR/rscheck.py" "$1" "$2" 2>&1 | sed 's/^/  /' >&2
    return "${PIPESTATUS[0]}"
}

# `postfix start`, in a private mount namespace with the benchmark's
# resolv.conf when the restrictions need DNS.
restrictions_postfix_start() {
    if restrictions_on; then
        cg_run unshare -m --propagation private sh -c \
            "mount --bind '$W/rs/resolv.conf' /etc/resolv.conf && exec postfix -c '$PF_ETC' start"
    else
        cg_run postfix -c "$PF_ETC" start
    fi
}

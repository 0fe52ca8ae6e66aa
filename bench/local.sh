#!/usr/bin/env bash
# bench/local.sh — workload L (local delivery with a directory) of
# /work/shared/BENCH.md.
#
# What it measures
#   A directory holds $USERS virtual users of one domain (userN@example.com,
#   Maildir example.com/userN/Maildir/); which one is DIRECTORY's choice:
#     ldap   (default) a real slapd on 127.0.0.1:$LDAP_PORT
#            (uid=userN,ou=people,dc=example,dc=com, mail userN@example.com,
#            homeDirectory example.com/userN/Maildir/);
#     pgsql  a real PostgreSQL 15 cluster of the script's own on
#            127.0.0.1:$PG_PORT, database mail, table users(email text
#            primary key, maildir text not null), read by both systems
#            through one Postfix pgsql_table(5) query file;
#     text   a text map file (userN@example.com example.com/userN/Maildir/),
#            no directory process.
#   In one run, one after the other, Sluice and Postfix listen on
#   127.0.0.1:55125, take mail from the same generator for $DURATION
#   seconds, validate every recipient in the directory at RCPT time (unknown users: 550 5.1.1) and deliver into
#   Maildirs below a base directory:
#     sluice   target/release/sluice serve, [local] + a table named users
#              (kind ldap, pgsql with the query file as path, or text)
#     postfix  Debian's Postfix as an isolated instance (own config dir, own
#              queue under a temp dir, `postfix -c DIR start`), virtual(8)
#              transport, virtual_mailbox_maps = ldap:... (ldap),
#              proxy:pgsql:<the query file> (pgsql) or hash:<the map>
#              (text, after postmap; lmdb: would be the other choice),
#              Postfix defaults otherwise (fsync on, default concurrency
#              limits).
#   Generator: $SESSIONS concurrent sessions, ~1 KiB messages, one
#   recipient each. Two variants (RECIPIENTS):
#     random    1-3 messages per session, recipients drawn at random from
#               the users (so they repeat: lookups hit caches), 3 % unknown;
#     distinct  one message per session, every recipient a different user
#               in turn (user1, user2, ...: no lookup is ever cached, every
#               message makes a new Maildir), none unknown. It prints postal's CSV every minute
#   (time,messages,data(K),errors,connections,SSL connections); messages =
#   accepted with 250 in that minute, errors = not accepted (including the
#   ~3 % unknown users refused with 550).
#   After the generator stops, the script waits (at most $DRAIN_TIMEOUT s)
#   until the system has delivered everything, checks that the number of
#   Maildir files equals the number of accepted messages (else MISMATCH and
#   the run is FAILED) and that $SPOT_CHECKS random files sit in the Maildir
#   of the user in their Delivered-To: header.
#
# How to run (as root; it apt-installs slapd, ldap-utils, postfix,
# postfix-ldap if missing; with DIRECTORY=pgsql postgresql-15 and
# postfix-pgsql instead of the LDAP ones):
#   bash bench/local.sh                               # the real thing, ~25 min
#   RECIPIENTS=distinct COUNT=100000 SESSIONS=250 bash bench/local.sh
#                                                      # issue 10's variant
#   USERS=20000 DURATION=60 bash bench/local.sh        # a quick run
#   DIRECTORY=pgsql SESSIONS=250 bash bench/local.sh   # issue 37's: the
#   DIRECTORY=text SESSIONS=250 bash bench/local.sh    #   other directories
#   RESTRICTIONS=typical DIRECTORY=text SESSIONS=250 bash bench/local.sh
#                      # issue 38's: a typical site's restriction lists on
#                      # both (bench/lib/restrictions.sh says which)
#
# Environment
#   DURATION=600       seconds each system receives mail
#   COUNT=0            >0: send this many messages instead (then the rate is
#                      the generator's messages/s x 60, and INTERVAL
#                      defaults to 5)
#   RECIPIENTS=random  random | distinct (see above)
#   DIRECTORY=ldap     ldap | pgsql | text: where the users are (see above)
#   USERS=500000       users in the directory
#   SYSTEMS="sluice postfix"   which systems to run, in that order
#   SESSIONS=50        concurrent generator sessions
#   INTERVAL=60        seconds per CSV row (the per-minute figures assume 60)
#   UNKNOWN_PERCENT=3  share of recipients that do not exist
#   SIZE=1024          message size in bytes (headers included)
#   DRAIN_TIMEOUT=300  seconds to wait for the queue to drain after a run
#   SPOT_CHECKS=5      delivered files checked against their Maildir
#   SLUICE=target/release/sluice      binary for `serve` and `bench`
#   SLUICE_BENCH=<beside $SLUICE>     the generator (sluice-bench); default
#                      $(dirname $SLUICE)/sluice-bench, else target/release's
#   SLUICE_BUILD=1     run `cargo build --release` first (0: use the binary as is)
#   MAILDIR_SYNC=batch Sluice's local.maildir_sync (batch | each)
#   SLUICE_CONF_EXTRA  TOML appended to Sluice's configuration (experiments;
#                      \n for new lines)
#   GENERATOR=sluice   sluice (`sluice-bench bench`) | smtp-source (Postfix's
#                      own generator, not ours; also `-G smtp-source` on the
#                      command line). smtp-source needs RECIPIENTS=distinct and
#                      COUNT>0: one process, $SESSIONS sessions, one message
#                      per session, -N prepends its sequence number to the
#                      recipient (1user@, 2user@, ...), so every user also has
#                      the address <N>user@example.com in the directory; SIZE
#                      is then its payload (-l) plus the ~200 B of headers it
#                      adds. It reports no per-minute rows: accepted_per_min is
#                      COUNT over its run time, and the CSV/chart are skipped.
#   LDAP_PORT=55389    slapd's port on 127.0.0.1 (DIRECTORY=ldap)
#   PG_PORT=55432      PostgreSQL's port on 127.0.0.1 (DIRECTORY=pgsql)
#   PG_BIN=/usr/lib/postgresql/15/bin   initdb, postgres, psql
#   POSTFIX_MAILLOG=1  Postfix logs to a file in its temp dir (0: no logging)
#   KEEP=0             1: keep the temp dir (slapd or PostgreSQL data, the
#                      map, configs, logs, Maildirs)
#   FRESH_FS=1         each system's spool and Maildirs on new ext4 file
#                      systems (loop images of FS_GB=16 GiB, sparse, in the
#                      temp dir), so no run pays for the inodes the run
#                      before it freed (0: plain directories)
#   RESULTS_DIR=bench/results   CSVs, the SVG chart and the RESULT lines go here
#   STAMP=YYYY-MM-DD   date part of the output file names
#
# Output
#   Progress on stderr (the CSV rows as they come). Files in $RESULTS_DIR:
#     local-$STAMP-<system>.csv   the generator's CSV of each system's run
#     local-$STAMP.svg            messages/minute over time, both systems
#     local-$STAMP.txt            RESULT lines, prefixed with date and commit
#   (local-distinct-... for RECIPIENTS=distinct; local-pgsql-...,
#   local-text-..., local-pgsql-distinct-... for the other directories)
#   Then both CSVs on stdout and, last, one line per system:
#     RESULT system=<sluice|postfix> workload=L users=<U> sessions=<S>
#       duration=<s> accepted=<n> msgs_per_min=<avg over the full minutes>
#       first_min=<n> last_min=<n> last_vs_first=<ratio> temp_4xx=<n>
#       ratio_vs_postfix=<x|n/a> rejected_5xx=<n> errors=<n> delivered=<n>
#       drain_s=<s> cpu_busy_pct=<machine CPU busy % while receiving>
#       recipients=<random|distinct> count=<n|0> cpu_s=<MTA CPU, every
#       process of it, from the generator's start to the end of the drain>
#       cpu_ms_per_msg=<cpu_s per delivered message> flushes_per_msg=<disk
#       flush requests of the whole machine's disk per delivered message>
#       slapd_cpu_s=<s> ldap_queries_per_msg=<Sluice's LDAP queries per
#       delivered message, from its counters; n/a for Postfix> (these two
#       with DIRECTORY=ldap only, where they always were)
#       delivered_per_min=<delivered x 60 / (generator seconds + drain_s)>
#       delivered_ratio_vs_postfix=<x>
#       accepted_per_min=<accepted per minute while the generator ran>
#       last_delivery_after_ack_s=<the newest Maildir file's rename time
#       minus the generator's exit, to the ms: how far delivery lagged
#       receipt; negative when the last file landed before the last reply>
#       directory=<ldap|pgsql|text> directory_cpu_s=<CPU seconds of the
#       directory server over the same span as cpu_s: slapd, or every
#       PostgreSQL server process (postmaster, backends, checkpointer ...,
#       exited ones included); n/a for text>
#       table_queries_per_msg=<queries the directory answered per delivered
#       message: pgsql, both systems: PostgreSQL's own count, index plus
#       sequential scans of table users (pg_stat_user_tables idx_scan +
#       seq_scan, one per SELECT), from the generator's start until the
#       system stopped; ldap: Sluice's counters (= ldap_queries_per_msg),
#       n/a for Postfix; text: n/a>
#       sluice_queries_per_msg=<pgsql, Sluice only: its own table counters,
#       beside PostgreSQL's count; like ldap_queries_per_msg they count from
#       Sluice's start, so the smoke test's 2 lookups are in them>
#   (a failed run adds failed=<reason>). Exit status 1 if any run failed,
#   2 if the set-up failed. rejected_5xx/temp_4xx are as the generator counts
#   them (`sluice-bench bench`: replies, so a refused RCPT plus the 554 to the
#   pipelined DATA count 2).
#
# Notes (Postfix + LDAP)
#   - `postconf -m` fails without /etc/postfix/main.cf (a "No configuration"
#     install has none): check postfix-ldap with dpkg-query, and the map type
#     with `postconf -c <our dir> -m`. The ldap map is found through
#     /etc/postfix/dynamicmaps.cf.d (meta_directory), also with -c.
#   - homeDirectory must end in "/" for virtual(8) to write a Maildir (else
#     it appends to an mbox file); relative paths are taken below
#     virtual_mailbox_base, and virtual(8) creates the missing directories.
#   - virtual_uid_maps must give a uid >= virtual_minimum_uid (100) that owns
#     virtual_mailbox_base: the `postfix` user (102 on Debian) is used.
#   - An LDAP error at RCPT gives "451 4.3.0 Temporary lookup failure"; the
#     script counts such lines in the Postfix maillog after the run.
#
# Notes (Postfix + PostgreSQL, DIRECTORY=pgsql)
#   - The cluster: initdb (as the postgres OS user, data dir owned by it) in
#     the temp dir, postgres started in the foreground as a child of this
#     script, on 127.0.0.1:$PG_PORT and a socket dir in the temp dir (the
#     script's own psql goes through it as postgres, trust); the role `mail`
#     logs in over TCP with a password (scram-sha-256). max_connections is
#     2 x SESSIONS + 100: Postfix opens one connection per proxymap process.
#     Defaults otherwise (fsync on, shared_buffers 128 MB).
#   - The users are loaded with COPY into a table without its index, then
#     the primary key is built, then VACUUM (FREEZE, ANALYZE) and CHECKPOINT:
#     no hint-bit writes or autovacuum during the runs.
#   - The query file (pgsql_table(5)) is written once, $W/pgsql/mailboxes.cf:
#     hosts = inet:127.0.0.1:$PG_PORT (3.7 takes inet:host:port, host:port
#     or a postgresql:// URI), user, password, dbname = mail,
#     query = SELECT maildir FROM users WHERE email='%s'. Postfix reads it
#     as proxy:pgsql:FILE (proxymap(8): one connection per proxymap process,
#     shared by every smtpd and virtual; proxy_read_maps' default includes
#     $virtual_mailbox_maps), Sluice as [tables.users] kind = "pgsql",
#     path = FILE, with the same (default) cache settings as its ldap table.
#     `postmap -q` and psql, as the mail role over TCP, must answer before
#     the runs.
#   - Queries are counted by PostgreSQL (idx_scan + seq_scan of users), read
#     after the system has stopped and its connections are gone (a backend
#     reports its counters when idle, up to 10 s late, or at exit; the count
#     starts 11 s after the smoke test for the same reason). virtual(8)
#     looks the recipient up again at delivery: Postfix's count includes
#     that (2 per message; an unknown user costs 2 at RCPT, user@domain
#     and @domain).
#
# Notes (text, DIRECTORY=text)
#   - One map file, $W/text/users; Postfix gets hash:FILE after `postmap
#     -c <our dir> hash:FILE` (FILE.db beside it), Sluice reads the source
#     file itself (kind = "text"). No directory process: directory_cpu_s and
#     table_queries_per_msg are n/a.

set -euo pipefail

# log, die, calc, fmt, kill_wait, ports, Postfix instance helpers, cleanup
# trap, results file: see the top of bench/lib/common.sh.
source "$(dirname "$0")/lib/common.sh"
source "$(dirname "$0")/lib/restrictions.sh"

BENCH_TAG=local
ANNOUNCE_RM=1           # removing the Maildirs can take minutes: say so
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${DURATION:-600}
COUNT=${COUNT:-0}
RECIPIENTS_ENV=${RECIPIENTS:-}
RECIPIENTS=${RECIPIENTS:-random}
USERS=${USERS:-500000}
SYSTEMS=${SYSTEMS:-"sluice postfix"}
SESSIONS=${SESSIONS:-50}
if [ "$COUNT" -gt 0 ]; then INTERVAL=${INTERVAL:-5}; else INTERVAL=${INTERVAL:-60}; fi
UNKNOWN_PERCENT=${UNKNOWN_PERCENT:-3}
SIZE=${SIZE:-1024}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-300}
SPOT_CHECKS=${SPOT_CHECKS:-5}
SLUICE=${SLUICE:-$REPO/target/release/sluice}
SLUICE_BUILD=${SLUICE_BUILD:-1}
generator_option "$@"
# smtp-source only sends distinct recipients: that is its default there.
[ "$GENERATOR" = smtp-source ] && RECIPIENTS=${RECIPIENTS_ENV:-distinct}
DIRECTORY=${DIRECTORY:-ldap}
LDAP_PORT=${LDAP_PORT:-55389}
PG_PORT=${PG_PORT:-55432}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
POSTFIX_MAILLOG=${POSTFIX_MAILLOG:-1}
KEEP=${KEEP:-0}
FRESH_FS=${FRESH_FS:-1}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results}
STAMP=${STAMP:-$(date +%F)}

HOST=127.0.0.1
SMTP_PORT=55125
DOMAIN=example.com
SUFFIX="dc=example,dc=com"
PEOPLE="ou=people,$SUFFIX"

# ---------------------------------------------------------------- sanity ----
for s in $SYSTEMS; do
    case $s in sluice|postfix) ;; *) die "unknown system '$s' in SYSTEMS" ;; esac
done
case $RECIPIENTS in random|distinct) ;; *) die "RECIPIENTS is random or distinct (is '$RECIPIENTS')" ;; esac
# DIR_LABEL: the directory's name in logs, comments and chart titles.
case $DIRECTORY in
ldap) DIR_LABEL=LDAP ;;
pgsql) DIR_LABEL=PostgreSQL ;;
text) DIR_LABEL="text map" ;;
*) die "DIRECTORY is ldap, pgsql or text (is '$DIRECTORY')" ;;
esac
case $GENERATOR in
sluice) ;;
smtp-source)
    [ "$RECIPIENTS" = distinct ] && [ "$COUNT" -gt 0 ] \
        || die "GENERATOR=smtp-source needs RECIPIENTS=distinct and COUNT>0"
    [ "$COUNT" -le "$USERS" ] || die "GENERATOR=smtp-source: COUNT ($COUNT) must not exceed USERS ($USERS)"
    [ "$SIZE" -gt 400 ] || die "GENERATOR=smtp-source: SIZE must exceed 400 (it adds its own headers)" ;;
*) die "GENERATOR must be sluice or smtp-source (is '$GENERATOR')" ;;
esac
[[ $COUNT =~ ^[0-9]+$ ]] || die "COUNT must be a number (is '$COUNT')"
# Output file names: the random variant with LDAP keeps the historical ones;
# another directory and then the other variant are added to them
# (local-pgsql-distinct-...).
TAG=local
[ "$DIRECTORY" = ldap ] || TAG=$TAG-$DIRECTORY
[ "$RECIPIENTS" = random ] || TAG=$TAG-$RECIPIENTS
restrictions_on && TAG=$TAG-restrict
for v in DURATION USERS SESSIONS INTERVAL SIZE DRAIN_TIMEOUT SPOT_CHECKS LDAP_PORT PG_PORT; do
    [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -gt 0 ] || die "$v must be a positive integer (is '${!v}')"
done
require_root

# ------------------------------------------------------------- installs ----
ensure_packages() {
    local pkgs=() pg_installed=1
    if [ "$DIRECTORY" = ldap ]; then
        command -v slapd >/dev/null 2>&1 || pkgs+=(slapd)
        command -v slapadd >/dev/null 2>&1 || pkgs+=(slapd)
        command -v ldapsearch >/dev/null 2>&1 || pkgs+=(ldap-utils)
    fi
    command -v postfix >/dev/null 2>&1 || pkgs+=(postfix)
    # (not `postconf -m`: it needs an /etc/postfix/main.cf, which a "No
    # configuration" install does not have)
    case $DIRECTORY in
    ldap)
        dpkg-query -W -f='${Status}' postfix-ldap 2>/dev/null | grep -q 'ok installed' \
            || pkgs+=(postfix-ldap) ;;
    pgsql)
        dpkg-query -W -f='${Status}' postfix-pgsql 2>/dev/null | grep -q 'ok installed' \
            || pkgs+=(postfix-pgsql)
        if [ ! -x "$PG_BIN/postgres" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/psql" ]; then
            pkgs+=(postgresql-15 postgresql-client-15)
            pg_installed=0
        fi ;;
    esac
    command -v ss >/dev/null 2>&1 || pkgs+=(iproute2)
    command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
    [ "$GENERATOR" = smtp-source ] && ! command -v smtp-source >/dev/null 2>&1 && pkgs+=(postfix)
    [ ${#pkgs[@]} -eq 0 ] && return 0
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    log "installing ${pkgs[*]}"
    # slapd: no configuration, no database, so no system slapd to stop.
    # postfix: "No configuration": no /etc/postfix/main.cf, no system instance.
    debconf-set-selections <<'EOF'
slapd slapd/no_configuration boolean true
postfix postfix/main_mailer_type select No configuration
EOF
    apt_install "${pkgs[@]}"
    # Should a package have started a system daemon anyway, stop it.
    stop_system_postfix
    # postgresql-15 creates and starts the system cluster "main" (5432):
    # stop it, so that it takes no CPU during the runs.
    if [ "$pg_installed" = 0 ] && command -v pg_ctlcluster >/dev/null 2>&1; then
        log "stopping the system PostgreSQL cluster the package started"
        pg_ctlcluster 15 main stop >&2 2>/dev/null || true
    fi
}

needs_sluice_binary() {
    [[ " $SYSTEMS " == *" sluice "* || $GENERATOR == sluice ]]
}

# After ensure_sluice (common.sh): the generator needs `sluice-bench bench` with
# --recipient-template.
ensure_sluice_generator() {
    [ "$GENERATOR" = sluice ] || return 0
    # (the usage text into a variable first: `| grep -q` would end the pipe
    # early and, with pipefail, fail it)
    local usage
    usage=$("$SLUICE_BENCH" bench --help 2>&1 || true)
    if [[ $usage != *--recipient-template* ]]; then
        die "$SLUICE_BENCH bench does not know --recipient-template"
    fi
}

# ------------------------------------------------------------ temp dir -----
make_workdir local      # W, PF, PF_ETC
LD="$W/ldap"            # slapd: $LD/slapd.conf, $LD/db, $LD/users.ldif
PGW="$W/pgsql"          # PostgreSQL: $PGW/data, $PGW/sock, $PGW/mailboxes.cf
PG_CF="$PGW/mailboxes.cf"   # the pgsql_table(5) query file both systems read
TEXT_MAP="$W/text/users"    # DIRECTORY=text: the map (and users.db for Postfix)
PF_MAIL="$W/postfix-mail"
SL_VAR="$W/sluice-var"
SL_MAIL="$W/sluice-mail"

SLAPD_PID=""
PG_PID=""
SLUICE_PID=""
GEN_PID=""
TICKER_PID=""

# The EXIT trap (cleanup in common.sh) calls this, then removes $W.
cleanup_processes() {
    kill_wait "$TICKER_PID" TERM 2
    kill_wait "$GEN_PID" TERM 5
    kill_wait "$SLUICE_PID" TERM 30
    stop_postfix_instance
    kill_wait "$SLAPD_PID" TERM 15
    # SIGINT: PostgreSQL's fast shutdown (TERM would wait for the clients).
    kill_wait "$PG_PID" INT 30
    restrictions_stop
}
install_cleanup_traps

# ---------------------------------------------------------------- slapd ----
# An own slapd.conf (no cn=config, nothing in /etc/ldap touched), an mdb
# database under $LD/db loaded offline with slapadd, then slapd on
# ldap://127.0.0.1:$LDAP_PORT/ in the foreground (-d 0) as a child of this
# script. Anonymous read (the default ACL when there are no access lines).
setup_slapd() {
    mkdir -p "$LD/db"
    # mdb maps maxsize as a sparse file: 1 KiB per user with room to spare.
    local maxsize=$(( (USERS / 1000 + 64) * 4 * 1024 * 1024 ))
    cat >"$LD/slapd.conf" <<EOF
# slapd for workload L (bench/local.sh)
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile $LD/slapd.pid
argsfile $LD/slapd.args
loglevel none
tool-threads 2

database mdb
maxsize $maxsize
suffix "$SUFFIX"
rootdn "cn=admin,$SUFFIX"
rootpw secret
directory $LD/db
index objectClass eq
index mail eq
EOF
    slaptest -u -f "$LD/slapd.conf" >"$LD/slaptest.log" 2>&1 || {
        cat "$LD/slaptest.log" >&2; die "slaptest rejected $LD/slapd.conf"
    }

    local t0=$SECONDS
    log "slapd: generating $USERS users into $LD/users.ldif"
    # (smtp-source: a second address <i>user@, the recipients of its -N)
    awk -v n="$USERS" -v suffix="$SUFFIX" -v people="$PEOPLE" -v dom="$DOMAIN" \
        -v seq="$([ "$GENERATOR" = smtp-source ] && echo 1 || echo 0)" 'BEGIN {
        printf "dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n", suffix
        printf "dn: %s\nobjectClass: organizationalUnit\nou: people\n\n", people
        step = n >= 500000 ? 100000 : (n >= 50000 ? 10000 : n)
        for (i = 1; i <= n; i++) {
            printf "dn: uid=user%d,%s\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\ncn: User %d\nsn: User%d\nuid: user%d\nuidNumber: %d\ngidNumber: 5000\nhomeDirectory: %s/user%d/Maildir/\nmail: user%d@%s\n", i, people, i, i, i, 10000 + i, dom, i, i, dom
            if (seq) printf "mail: %duser@%s\n", i, dom
            printf "\n"
            if (i % step == 0) printf "[local] ldif: %d/%d users\n", i, n > "/dev/stderr"
        }
    }' >"$LD/users.ldif"
    log "slapd: $(du -h "$LD/users.ldif" | cut -f1) of LDIF in $((SECONDS - t0)) s; loading with slapadd -q"

    # slapadd reads the LDIF on stdin; the awk in front only counts entries
    # for a progress line (the pipe keeps it in step with slapadd).
    t0=$SECONDS
    local total=$((USERS + 2))
    if ! awk -v total="$total" '
            /^dn: / { if (++n % 50000 == 0) printf "[local] slapadd: %d/%d entries\n", n, total > "/dev/stderr" }
            { print }' "$LD/users.ldif" \
        | slapadd -q -f "$LD/slapd.conf" >"$LD/slapadd.log" 2>&1; then
        tail -20 "$LD/slapadd.log" >&2
        die "slapadd failed"
    fi
    log "slapd: loaded $total entries in $((SECONDS - t0)) s ($(du -sh "$LD/db" | cut -f1) on disk)"
    [ "$KEEP" = 1 ] || rm -f "$LD/users.ldif"
}

start_slapd() {
    listening "$LDAP_PORT" && die "port $LDAP_PORT is already in use"
    slapd -f "$LD/slapd.conf" -h "ldap://$HOST:$LDAP_PORT/" -d 0 >"$LD/slapd.log" 2>&1 &
    SLAPD_PID=$!
    wait_listen "$LDAP_PORT" 60 "$SLAPD_PID" || {
        tail -20 "$LD/slapd.log" >&2; die "slapd did not come up on $HOST:$LDAP_PORT"
    }
    # The first and the last user exist (with the right homeDirectory), the
    # one after the last does not.
    local h
    h=$(ldapsearch -LLL -x -H "ldap://$HOST:$LDAP_PORT" -b "$PEOPLE" \
        "(mail=user$USERS@$DOMAIN)" homeDirectory | awk '/^homeDirectory:/ { print $2 }')
    [ "$h" = "$DOMAIN/user$USERS/Maildir/" ] || die "ldapsearch for user$USERS@$DOMAIN returned '$h'"
    h=$(ldapsearch -LLL -x -H "ldap://$HOST:$LDAP_PORT" -b "$PEOPLE" \
        "(mail=user$((USERS + 1))@$DOMAIN)" homeDirectory | grep -c '^dn:' || true)
    [ "$h" = 0 ] || die "ldapsearch found user$((USERS + 1))@$DOMAIN"
    log "slapd: up on ldap://$HOST:$LDAP_PORT/ (pid $SLAPD_PID), lookups verified"
}

# users_pairs SEP: for every user "userN@example.com<SEP>example.com/userN/Maildir/",
# and with GENERATOR=smtp-source a second address of the same user,
# "<N>user@example.com" (the recipients of its -N; the LDIF's second mail).
users_pairs() {
    awk -v n="$USERS" -v dom="$DOMAIN" -v sep="$1" \
        -v seq="$([ "$GENERATOR" = smtp-source ] && echo 1 || echo 0)" 'BEGIN {
        for (i = 1; i <= n; i++) {
            printf "user%d@%s%s%s/user%d/Maildir/\n", i, dom, sep, dom, i
            if (seq) printf "%duser@%s%s%s/user%d/Maildir/\n", i, dom, sep, dom, i
        }
    }'
}
users_rows() { [ "$GENERATOR" = smtp-source ] && echo $((2 * USERS)) || echo "$USERS"; }

# ----------------------------------------------------------- postgresql ----
# An own cluster (initdb as the postgres OS user) in $PGW/data, postgres in
# the foreground as a child of this script on $HOST:$PG_PORT and a socket in
# $PGW/sock (mode 700: root and postgres only). The script's psql connects
# through the socket as postgres (trust); the mail role over TCP with a
# password, as Postfix and Sluice do.
PG_PASSWORD=mailbench
as_postgres() {  # as_postgres CMD...: CMD as the postgres OS user, in /
    (cd / && exec setpriv --reuid=postgres --regid=postgres --init-groups -- "$@")
}
pg_psql() {  # pg_psql DB [ARGS...]: psql as postgres through the socket
    local db=$1
    shift
    as_postgres "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$PGW/sock" -p "$PG_PORT" \
        -U postgres -d "$db" "$@"
}

setup_pgsql() {
    listening "$PG_PORT" && die "port $PG_PORT is already in use"
    mkdir -p "$PGW/data" "$PGW/sock"
    chown postgres:postgres "$PGW" "$PGW/data" "$PGW/sock"
    chmod 700 "$PGW/data" "$PGW/sock"
    # -N: no fsync of the new cluster (run_one syncs before each run).
    as_postgres "$PG_BIN/initdb" -D "$PGW/data" -U postgres -E UTF8 --locale=C \
        --auth-local=trust --auth-host=scram-sha-256 -N >"$PGW/initdb.log" 2>&1 || {
        tail -20 "$PGW/initdb.log" >&2; die "initdb failed"
    }
    # Postfix opens one connection per proxymap process (up to
    # default_process_limit), Sluice a pool: room for both.
    cat >>"$PGW/data/postgresql.conf" <<EOF

# bench/local.sh (DIRECTORY=pgsql); defaults otherwise
listen_addresses = '$HOST'
port = $PG_PORT
unix_socket_directories = '$PGW/sock'
max_connections = $((SESSIONS * 2 + 100))
logging_collector = off
EOF
    # The query file (pgsql_table(5)) both systems read.
    cat >"$PG_CF" <<EOF
# pgsql_table(5) for workload L (bench/local.sh): Postfix reads it as
# proxy:pgsql:$PG_CF, Sluice as [tables.users] kind = "pgsql".
hosts = inet:$HOST:$PG_PORT
user = mail
password = $PG_PASSWORD
dbname = mail
query = SELECT maildir FROM users WHERE email='%s'
EOF
    chmod 644 "$PG_CF"
}

start_pgsql() {
    (cd / && exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
        "$PG_BIN/postgres" -D "$PGW/data") >"$PGW/postgres.log" 2>&1 &
    PG_PID=$!
    local i
    for ((i = 0; i < 600; i++)); do
        "$PG_BIN/pg_isready" -q -h "$PGW/sock" -p "$PG_PORT" && break
        kill -0 "$PG_PID" 2>/dev/null || break
        sleep 0.1
    done
    "$PG_BIN/pg_isready" -q -h "$PGW/sock" -p "$PG_PORT" && listening "$PG_PORT" || {
        tail -20 "$PGW/postgres.log" >&2; die "PostgreSQL did not come up on $HOST:$PG_PORT"
    }
    log "postgresql: up on $HOST:$PG_PORT (pid $PG_PID)"
}

# load_pgsql: role and database mail, the users by COPY into a table without
# its index, then the primary key, VACUUM (FREEZE, ANALYZE) and a
# checkpoint (nothing left for autovacuum or hint-bit writes during the
# runs); then the first and the one past the last user asked as the mail
# role over TCP.
load_pgsql() {
    local t0=$SECONDS rows h
    rows=$(users_rows)
    users_pairs '\t' >"$PGW/users.tsv"
    chmod 644 "$PGW/users.tsv"
    log "postgresql: loading $rows rows ($(du -h "$PGW/users.tsv" | cut -f1)) with COPY"
    pg_psql postgres >"$PGW/load.log" 2>&1 <<EOF || { cat "$PGW/load.log" >&2; die "creating role and database mail failed"; }
CREATE ROLE mail LOGIN PASSWORD '$PG_PASSWORD';
CREATE DATABASE mail OWNER mail;
EOF
    pg_psql mail >>"$PGW/load.log" 2>&1 <<EOF || { cat "$PGW/load.log" >&2; die "loading the users failed"; }
CREATE TABLE users (email text NOT NULL, maildir text NOT NULL);
COPY users FROM '$PGW/users.tsv';
ALTER TABLE users ADD PRIMARY KEY (email);
ALTER TABLE users OWNER TO mail;
VACUUM (FREEZE, ANALYZE) users;
CHECKPOINT;
EOF
    [ "$KEEP" = 1 ] || rm -f "$PGW/users.tsv"
    h=$(pg_psql mail -c "SELECT count(*) FROM users")
    [ "$h" = "$rows" ] || die "postgresql: users holds '$h' rows, not $rows"
    log "postgresql: loaded $rows rows in $((SECONDS - t0)) s ($(du -sh "$PGW/data" | cut -f1) on disk)"
    h=$(pg_mail_query "user$USERS@$DOMAIN")
    [ "$h" = "$DOMAIN/user$USERS/Maildir/" ] || die "psql as mail: user$USERS@$DOMAIN gave '$h'"
    h=$(pg_mail_query "user$((USERS + 1))@$DOMAIN")
    [ -z "$h" ] || die "psql as mail: user$((USERS + 1))@$DOMAIN gave '$h'"
    log "postgresql: lookups as the mail role over TCP verified"
}
pg_mail_query() {  # the query file's query, as the mail role over TCP
    PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$HOST" \
        -p "$PG_PORT" -U mail -d mail -c "SELECT maildir FROM users WHERE email='$1'"
}

# CPU seconds of every PostgreSQL server process so far: the postmaster and
# its living children (backends, checkpointer, walwriter, autovacuum ...),
# each with its reaped children (cutime/cstime: the postmaster's hold the
# backends that have exited).
pg_cpu_s() {
    [ -n "$PG_PID" ] || { echo n/a; return 0; }
    local p
    for p in "$PG_PID" $(pgrep -P "$PG_PID" || true); do
        cat "/proc/$p/stat" 2>/dev/null || true
    done | awk -v hz="$(getconf CLK_TCK)" '
        { sub(/^.*\) /, ""); split($0, f, " "); t += f[12] + f[13] + f[14] + f[15]; n++ }
        END { if (n) printf "%.2f", t / hz; else print "n/a" }'
}

# Scans of table users so far (index + sequential: one per SELECT, whoever
# asks), as PostgreSQL counts them.
pg_table_scans() {
    pg_psql mail -c "SELECT coalesce(idx_scan, 0) + coalesce(seq_scan, 0) FROM pg_stat_user_tables WHERE relname = 'users'" 2>/dev/null || true
}
pg_connections() {  # connections to database mail but the asker's
    pg_psql postgres -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'mail' AND pid <> pg_backend_pid()" 2>/dev/null || echo "?"
}
# A backend reports its counters when idle (at most a second late) or at
# exit: after a system stopped, wait (at most 15 s) until its connections
# are gone, then a second more.
pg_wait_idle() {
    local i
    for ((i = 0; i < 150; i++)); do
        [ "$(pg_connections)" = 0 ] && break
        sleep 0.1
    done
    sleep 1
}

# ----------------------------------------------------------------- text ----
# DIRECTORY=text: one map file, "userN@example.com example.com/userN/Maildir/"
# (postmap's source format): Sluice reads it, Postfix its .db (postmap in
# setup_postfix_map).
setup_text() {
    local t0=$SECONDS
    mkdir -p "$(dirname "$TEXT_MAP")"
    users_pairs ' ' >"$TEXT_MAP"
    chmod 644 "$TEXT_MAP"
    log "text map: $(users_rows) lines ($(du -h "$TEXT_MAP" | cut -f1)) in $TEXT_MAP in $((SECONDS - t0)) s"
}

directory_cpu_s() {
    case $DIRECTORY in
    ldap) slapd_cpu_s ;;
    pgsql) pg_cpu_s ;;
    text) echo n/a ;;
    esac
}
directory_queries() {  # the directory's own count of queries, where it has one
    if [ "$DIRECTORY" = pgsql ]; then pg_table_scans; fi
}

# --------------------------------------------------------------- sluice ----
# fresh_dirs DIR...: empty directories, each on a new file system when
# FRESH_FS=1 (see fresh_fs in lib/common.sh).
fresh_dirs() {
    local d
    for d in "$@"; do
        if [ "$FRESH_FS" = 1 ]; then fresh_fs "$d"; else rm -rf "$d"; mkdir -p "$d"; fi
    done
}

start_sluice() {
    fresh_dirs "$SL_VAR" "$SL_MAIL"
    cat >"$W/sluice.toml" <<EOF
hostname = "sluice.bench"
data_dir = "$SL_VAR"
$(grep -qa run_as_root "$SLUICE" && echo "run_as_root = true  # (a build that knows it: started as root)")
log_file = "$SL_VAR/maillog"

[smtpd]
listen = ["$HOST:$SMTP_PORT"]
$(restrictions_sluice_smtpd)

[local]
domains = ["$DOMAIN"]
mailbox_table = "users"
maildir_base = "$SL_MAIL"
maildir_sync = "${MAILDIR_SYNC:-batch}"

$(sluice_table_toml)
$(restrictions_sluice_toml)

# Mail to domains with no route (bounces) looks up MX records: point
# the resolver at a port where nothing answers, so no query leaves the
# machine.
[dns]
nameservers = [$(restrictions_sluice_nameserver)]
timeout_ms = 300
attempts = 1
EOF
    # Experiments: more configuration appended as is (\n for new lines).
    [ -z "${SLUICE_CONF_EXTRA:-}" ] || printf '%b\n' "$SLUICE_CONF_EXTRA" >>"$W/sluice.toml"
    # A table other than the ldap one: Sluice must read it before serving.
    if [ "$DIRECTORY" != ldap ]; then
        local h
        h=$("$SLUICE" lookup --config "$W/sluice.toml" users "user$USERS@$DOMAIN" 2>"$W/sluice-lookup.err") || true
        if [ "$h" != "$DOMAIN/user$USERS/Maildir/" ]; then
            log "sluice lookup users user$USERS@$DOMAIN gave '$h': $(head -3 "$W/sluice-lookup.err")"
            return 1
        fi
        log "sluice: lookup in the $DIR_LABEL table verified"
    fi
    # In the CPU cgroup (cg_exec), so its CPU is measured as Postfix's is.
    (cg_exec "$SLUICE" serve --config "$W/sluice.toml" >"$W/sluice.out" 2>&1) &
    SLUICE_PID=$!
    wait_listen "$SMTP_PORT" 30 "$SLUICE_PID" || {
        tail -20 "$W/sluice.out" >&2 || true
        tail -20 "$SL_VAR/maillog" >&2 2>/dev/null || true
        return 1
    }
}

# Sluice's mailbox table, named users in every variant (its counters are
# logged as "table users: ..."). Cache settings: the defaults, the same for
# every kind.
sluice_table_toml() {
    case $DIRECTORY in
    ldap) cat <<EOF
[tables.users]
kind = "ldap"
uris = ["ldap://$HOST:$LDAP_PORT"]
base = "$PEOPLE"
filter = "(mail=%s)"
attributes = ["homeDirectory"]
EOF
    ;;
    pgsql) cat <<EOF
[tables.users]
kind = "pgsql"
path = "$PG_CF"
EOF
    ;;
    text) cat <<EOF
[tables.users]
kind = "text"
path = "$TEXT_MAP"
EOF
    ;;
    esac
}

stop_sluice() {
    kill_wait "$SLUICE_PID" TERM 60
    SLUICE_PID=""
}

sluice_spool_size() {  # size of Sluice's spool (segment files) in data_dir
    du -sh --exclude='maillog*' "$SL_VAR" 2>/dev/null | cut -f1
}

# -------------------------------------------------------------- postfix ----
# An isolated instance: config in $PF/etc, queue in $PF/spool, data in
# $PF/data, Maildirs in $PF_MAIL. Nothing in /etc/postfix is touched.
# virtual(8) delivers as the uid/gid of the `postfix` user (102 on Debian,
# above virtual_minimum_uid = 100), which owns $PF_MAIL.
setup_postfix() {
    prepare_postfix_instance
    VMAIL_UID=$(id -u postfix)
    VMAIL_GID=$(id -g postfix)
    local maps map_type failure
    case $DIRECTORY in
    ldap)
        cat >"$PF_ETC/ldap-users.cf" <<EOF
server_host = ldap://$HOST:$LDAP_PORT
search_base = $PEOPLE
query_filter = (mail=%s)
result_attribute = homeDirectory
version = 3
bind = no
EOF
        chmod 644 "$PF_ETC/ldap-users.cf"
        maps="ldap:$PF_ETC/ldap-users.cf" map_type=ldap failure="an LDAP failure" ;;
    pgsql) maps="proxy:pgsql:$PG_CF" map_type=pgsql failure="a PostgreSQL failure" ;;
    text) maps="hash:$TEXT_MAP" map_type=hash failure="an unreadable map" ;;
    esac
    {
        cat <<EOF
# Postfix instance for workload L (bench/local.sh): virtual mailboxes in
# Maildirs, recipients validated in $DIR_LABEL at RCPT time. Postfix defaults
# otherwise (fsync on, default process and concurrency limits).
EOF
        postfix_main_cf_instance postfix.bench bench
        cat <<EOF

# Only virtual mailbox delivery.
mydestination =
local_recipient_maps =
relay_domains =
relay_recipient_maps =
alias_maps =
alias_database =
virtual_alias_maps =
append_dot_mydomain = no
biff = no
virtual_mailbox_domains = $DOMAIN
virtual_mailbox_base = $PF_MAIL
virtual_mailbox_maps = $maps
virtual_uid_maps = static:$VMAIL_UID
virtual_gid_maps = static:$VMAIL_GID
virtual_transport = virtual
# Unknown users: 550 5.1.1 at RCPT ($failure gives 451 4.3.0).
smtpd_reject_unlisted_recipient = yes
unknown_virtual_mailbox_reject_code = 550

EOF
        postfix_main_cf_loopback_smtpd
        cat <<EOF
# anvil: loopback is exempt from the per-client limits.
smtpd_client_event_limit_exceptions = 127.0.0.0/8
# As an administrator would for this many concurrent clients: one smtpd
# per session (the default, 100, leaves the rest in the listen queue,
# where connects wait for SYN retries: 8,474 msg/min at 250 sessions).
default_process_limit = $(( SESSIONS + 20 > 100 ? SESSIONS + 20 : 100 ))
EOF
        restrictions_postfix_main_cf
    } >"$PF_ETC/main.cf"
    # master.cf: every service with chroot off; smtpd only on 127.0.0.1:55125.
    write_postfix_master_cf "$SMTP_PORT"
    postconf -c "$PF_ETC" -m | grep -qx "$map_type" \
        || die "postconf -m: no $map_type map type$([ "$map_type" = hash ] || echo " (install postfix-$map_type)")"
    setup_postfix_map
}

# setup_postfix_map: DIRECTORY=text: postmap the map (hash: FILE.db); then,
# pgsql and text, Postfix must find the last user and not the one after it
# (postmap -q, through the instance's configuration; pgsql: not through
# proxy:, which needs the running instance).
setup_postfix_map() {
    local spec h t0=$SECONDS
    case $DIRECTORY in
    ldap) return 0 ;;
    pgsql) spec="pgsql:$PG_CF" ;;
    text)
        spec="hash:$TEXT_MAP"
        postmap -c "$PF_ETC" "$spec" || die "postmap $spec failed"
        chmod 644 "$TEXT_MAP.db"
        log "postfix: postmap $spec in $((SECONDS - t0)) s ($(du -h "$TEXT_MAP.db" | cut -f1))" ;;
    esac
    h=$(postmap -c "$PF_ETC" -q "user$USERS@$DOMAIN" "$spec") || true
    [ "$h" = "$DOMAIN/user$USERS/Maildir/" ] || die "postmap -q user$USERS@$DOMAIN $spec gave '$h'"
    if h=$(postmap -c "$PF_ETC" -q "user$((USERS + 1))@$DOMAIN" "$spec"); then
        die "postmap -q user$((USERS + 1))@$DOMAIN $spec found '$h'"
    fi
    log "postfix: postmap -q $spec verified"
}

start_postfix() {
    rm -f "$PF/maillog"
    fresh_dirs "$PF/spool" "$PF_MAIL"
    chown "$VMAIL_UID:$VMAIL_GID" "$PF_MAIL"
    if restrictions_on; then
        cg_run postfix -c "$PF_ETC" check >"$W/postfix-check.log" 2>&1 || { cat "$W/postfix-check.log" >&2; return 1; }
        restrictions_postfix_start >"$W/postfix-start.log" 2>&1 || { cat "$W/postfix-start.log" >&2; return 1; }
    else
        postfix_check_start || return 1
    fi
    wait_listen "$SMTP_PORT" 30 || { tail -20 "$PF/maillog" >&2 2>/dev/null; return 1; }
}

postfix_queue_files() {
    find "$PF/spool/incoming" "$PF/spool/active" "$PF/spool/deferred" \
        "$PF/spool/maildrop" "$PF/spool/hold" -type f 2>/dev/null | wc -l
}

postfix_queue_summary() {
    local d out=""
    for d in incoming active deferred; do
        out+="$d=$(find "$PF/spool/$d" -type f 2>/dev/null | wc -l) "
    done
    echo "${out% }"
}

stop_postfix() {
    postfix_stop_wait
    if [ "$KEEP" = 1 ] && [ -f "$PF/maillog" ]; then
        cp "$PF/maillog" "$W/postfix-maillog"
    fi
}

# -------------------------------------------------------------- helpers ----
mail_base() { case $1 in sluice) echo "$SL_MAIL" ;; postfix) echo "$PF_MAIL" ;; esac; }

SMOKE_FILES=0
delivered_count() {  # files in <base>/<domain>/<user>/Maildir/new, past the smoke test's
    local n
    n=$(python3 "$REPO/bench/lib/maildirs.py" count "$(mail_base "$1")")
    echo $((n - SMOKE_FILES))
}

queue_empty() {
    case $1 in
    postfix) [ "$(postfix_queue_files)" = 0 ] ;;
    sluice) return 0 ;;   # judged by the Maildir count alone
    esac
}

# check_file FILE: the file sits in <base>/<domain>/<user>/Maildir/new and its
# Delivered-To: header (or, failing that, To:) names <user>@<domain>.
check_file() {
    local f=$1 rel user dom addr hdr
    rel=${f#"$2"/}
    dom=${rel%%/*}; rel=${rel#*/}; user=${rel%%/*}
    addr="$user@$dom"
    hdr=$(awk '/^\r?$/ { exit } { print }' "$f" | tr -d '\r')
    if grep -qiE "^Delivered-To:[[:space:]]*<?${addr//./\\.}>?[[:space:]]*$" <<<"$hdr"; then
        return 0
    fi
    # smtp-source's recipients: <N>user@ is user<N>'s second address.
    local alt="${user#user}user@$dom"
    if [ "$GENERATOR" = smtp-source ] && [[ $user == user* ]] \
        && grep -qiE "^Delivered-To:[[:space:]]*<?${alt//./\\.}>?[[:space:]]*$" <<<"$hdr"; then
        return 0
    fi
    if ! grep -qi '^Delivered-To:' <<<"$hdr" \
        && grep -qiE "^To:.*[<[:space:],:]${addr//./\\.}([>[:space:],]|$)" <<<"$hdr"; then
        return 0
    fi
    log "spot check: $f addressed to: $(grep -iE '^(Delivered-To|To):' <<<"$hdr" | tr '\n' ' ')"
    return 1
}

spot_check() {  # spot_check SYSTEM: sets SPOT_FAIL on a misplaced file
    local base f ok=0 bad=0
    base=$(mail_base "$1")
    SPOT_FAIL=""
    while IFS= read -r f; do
        [ -n "$f" ] || continue
        if check_file "$f" "$base"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    done < <(python3 "$REPO/bench/lib/maildirs.py" sample "$base" "$SPOT_CHECKS")
    log "spot check: $ok of $((ok + bad)) random files in the right Maildir"
    [ "$bad" = 0 ] || SPOT_FAIL="spot_check_${bad}_misplaced"
    [ $((ok + bad)) -gt 0 ] || SPOT_FAIL="spot_check_no_files"
}

# smoke SYSTEM: one message to a known user must be accepted and land in its
# Maildir; an unknown user must get 550 5.1.1 at RCPT. Empties the Maildir
# base afterwards so the run starts from zero.
smoke() {
    local sys=$1 base known unknown i n
    base=$(mail_base "$sys")
    known="user$(( (RANDOM * 32768 + RANDOM) % USERS + 1 ))@$DOMAIN"
    unknown="user$((USERS + 1 + RANDOM))@$DOMAIN"
    if ! python3 "$REPO/bench/lib/smtpcheck.py" "$HOST:$SMTP_PORT" "$known" "$unknown" \
        >"$W/smoke-$sys.log" 2>&1; then
        sed 's/^/  /' "$W/smoke-$sys.log" >&2
        SMOKE_FAIL="smoke_test_replies"
        return 1
    fi
    sed 's/^/  /' "$W/smoke-$sys.log" >&2
    local dir="$base/$DOMAIN/${known%@*}/Maildir/new"
    for ((i = 0; i < 300; i++)); do
        n=$(find "$dir" -type f 2>/dev/null | wc -l)
        [ "$n" -gt 0 ] && break
        sleep 0.1
    done
    if [ "$n" = 0 ]; then
        log "smoke test: nothing delivered to $dir within 30 s"
        SMOKE_FAIL="smoke_test_not_delivered"
        return 1
    fi
    if ! check_file "$(find "$dir" -type f | head -1)" "$base"; then
        SMOKE_FAIL="smoke_test_wrong_maildir"
        return 1
    fi
    log "smoke test: known user accepted and delivered to its Maildir, unknown user refused with 550 5.1.1"
    # The smoke message stays (removing a Maildir under a running MTA that
    # knows it exists would make the next delivery there fail and wait for
    # a retry); the counts below start from here.
}

cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }

# The whole disk under $W, whose flush requests are counted (field 16 of
# /sys/block/<disk>/stat, "flush I/Os"); empty when there is none (tmpfs).
flush_disk() {
    local dev name parent
    dev=$(df --output=source "$W" | tail -1)
    [ -b "$dev" ] || return 0
    name=$(basename "$dev")
    parent=$(lsblk -no pkname "$dev" 2>/dev/null | head -1)
    [ -n "$parent" ] && name=$parent
    [ -r "/sys/block/$name/stat" ] && echo "$name"
}
FLUSH_DISK=""
flushes() {  # flush requests completed so far (or n/a)
    if [ -n "$FLUSH_DISK" ]; then awk '{ print (NF >= 17 ? $16 : "n/a") }' "/sys/block/$FLUSH_DISK/stat"; else echo n/a; fi
}
slapd_cpu_s() {  # CPU seconds of slapd so far
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$SLAPD_PID/stat" 2>/dev/null || echo n/a
}
per_msg() {  # per_msg VALUE N [SCALE]: VALUE*SCALE/N with 3 decimals, or n/a
    if [[ $1 =~ ^[0-9.]+$ ]] && [ "${2:-0}" -gt 0 ] 2>/dev/null; then
        fmt %.3f "$(calc "$1 * ${3:-1} / $2")"
    else echo n/a; fi
}

ticker() {  # a line every 30 s while the generator runs
    set +e
    local sys=$1 t0=$SECONDS
    while sleep 30; do
        case $sys in
        postfix) log "[$sys +$((SECONDS - t0))s] queue: $(postfix_queue_summary)" ;;
        sluice) log "[$sys +$((SECONDS - t0))s] spool size: $(sluice_spool_size)" ;;
        esac
    done
}

# ------------------------------------------------------------ generator ----
# run_generator: runs in the foreground; the CSV rows go to stderr as
# they come; the rows and the BENCH line end up in $W/gen.out.
run_generator() {
    if [ "$GENERATOR" = smtp-source ]; then run_smtp_source; return 0; fi
    local args=(--target "$HOST:$SMTP_PORT" --sessions "$SESSIONS" --size "$SIZE"
        --recipients 1 --recipient-count "$USERS" --interval "$INTERVAL")
    case $RECIPIENTS in
    random) args+=(--messages-per-session 1 --messages-per-session-max 3
        --recipient-template "user{n}@$DOMAIN" --unknown-percent "$UNKNOWN_PERCENT") ;;
    distinct) args+=(--messages-per-session 1 --recipient-template "user{i}@$DOMAIN") ;;
    esac
    if [ "$COUNT" -gt 0 ]; then
        args+=(--count "$COUNT" --max-seconds "$((DURATION + 600))")
    else
        args+=(--duration "$DURATION")
    fi
    local cmd=("$SLUICE_BENCH" bench "${args[@]}")
    # The generator shares the 2 cores with the system under test: note its
    # CPU time (/usr/bin/time, when installed).
    rm -f "$W/gen.time"
    [ -x /usr/bin/time ] && cmd=(/usr/bin/time -f '%U %S %e' -o "$W/gen.time" "${cmd[@]}")
    GEN_RC=0
    # (created first: else the tail below may look before the background
    # job has opened it, and give up)
    : >"$W/gen.out"
    GEN_START=$(date +%s.%N)
    timeout -k 10 $((DURATION + 300)) "${cmd[@]}" >"$W/gen.out" 2>"$W/gen.err" &
    GEN_PID=$!
    tail -n +1 -f --pid="$GEN_PID" "$W/gen.out" >&2 &
    local tail_pid=$!
    wait "$GEN_PID" || GEN_RC=$?
    GEN_PID=""
    GEN_END=$(date +%s.%N)
    wait "$tail_pid" 2>/dev/null || true
    [ -s "$W/gen.err" ] && tail -5 "$W/gen.err" | sed 's/^/  gen: /' >&2
    if [ -s "$W/gen.time" ]; then
        awk 'NF == 3 && $3 > 0 { printf "[local] generator CPU: %.1f s user + %.1f s sys in %.0f s = %.0f %% of one core\n", $1, $2, $3, 100 * ($1 + $2) / $3 }' \
            "$W/gen.time" >&2 || true
    fi
    return 0
}

# run_smtp_source: Postfix's smtp-source, one process, $SESSIONS sessions,
# $COUNT messages, one per session, recipients 1user@ ... <COUNT>user@ (-N).
# It prints nothing per minute: the script writes a BENCH line like the
# sluice generator's from its exit status and run time into $W/gen.out.
run_smtp_source() {
    local cmd=(smtp-source -N -s "$SESSIONS" -m "$COUNT" -l "$((SIZE - 200))"
        -f "sender@gen.bench" -t "user@$DOMAIN" -M gen.bench "$HOST:$SMTP_PORT")
    rm -f "$W/gen.time"
    [ -x /usr/bin/time ] && cmd=(/usr/bin/time -f '%U %S %e' -o "$W/gen.time" "${cmd[@]}")
    GEN_RC=0
    local t0 t1
    t0=$(date +%s.%N)
    GEN_START=$t0
    timeout -k 10 $((DURATION + 300)) "${cmd[@]}" >"$W/gen.out" 2>"$W/gen.err" &
    GEN_PID=$!
    wait "$GEN_PID" || GEN_RC=$?
    GEN_PID=""
    t1=$(date +%s.%N)
    GEN_END=$t1
    [ -s "$W/gen.err" ] && tail -5 "$W/gen.err" | sed 's/^/  gen: /' >&2
    local secs acc=0
    secs=$(fmt %.2f "$(calc "$t1 - $t0")")
    [ "$GEN_RC" = 0 ] && acc=$COUNT
    printf 'BENCH messages=%s errors=%s seconds=%s msgs_per_s=%s rejected_5xx=n/a temp_4xx=n/a\n' \
        "$acc" "$([ "$GEN_RC" = 0 ] && echo 0 || echo n/a)" "$secs" \
        "$(fmt %.1f "$(calc "$acc / $secs")")" >>"$W/gen.out"
    if [ -s "$W/gen.time" ]; then
        awk 'NF == 3 && $3 > 0 { printf "[local] generator CPU: %.1f s user + %.1f s sys in %.0f s = %.0f %% of one core\n", $1, $2, $3, 100 * ($1 + $2) / $3 }' \
            "$W/gen.time" >&2 || true
    fi
}

bench_field() {  # bench_field NAME: the value of NAME= on the BENCH line
    local line
    line=$(grep '^BENCH ' "$W/gen.out" | tail -1 || true)
    if [[ $line =~ (^|[[:space:]])$1=([^[:space:]]+) ]]; then echo "${BASH_REMATCH[2]}"; else echo ""; fi
}

# ------------------------------------------------------------------ runs ----
GEN_END=0
GEN_START=0
# R_DIRCPU: the directory's CPU (slapd_cpu_s, directory_cpu_s); R_OWNQ:
# Sluice's own table counters per message (ldap_queries_per_msg,
# sluice_queries_per_msg); R_TQ: table_queries_per_msg.
declare -A R_PERSEC R_GENSECS R_LASTDEL R_FAIL R_ACC R_ERR R_5XX R_4XX R_DELIV R_DRAIN R_CPU R_CSV R_MTA_CPU R_FLUSH R_DIRCPU R_OWNQ R_TQ R_RATE R_GEN_S

run_one() {
    local sys=$1 fail="" csv
    csv="$RESULTS_DIR/$TAG-$STAMP-$sys.csv"
    R_CSV[$sys]=$csv
    rm -f "$csv"
    wait_free "$SMTP_PORT" 30 || die "port $SMTP_PORT still in use after the previous run"
    # Write back what the previous run (or the slapd load) left dirty, so
    # that it does not land in this run.
    sync
    log "=== $sys: starting"
    SMOKE_FAIL=""
    case $sys in
    sluice) start_sluice || fail="sluice_did_not_start" ;;
    postfix) start_postfix || fail="postfix_did_not_start" ;;
    esac
    if [ -z "$fail" ]; then
        SMOKE_FILES=0
        smoke "$sys" || fail=$SMOKE_FAIL
        SMOKE_FILES=$(delivered_count "$sys")
    fi
    if [ -n "$fail" ]; then
        R_FAIL[$sys]=$fail
        log "=== $sys: FAILED before the run ($fail)"
        case $sys in sluice) stop_sluice ;; postfix) stop_postfix ;; esac
        return 0
    fi

    # PostgreSQL: an idle backend reports its counters up to 10 s late
    # (PGSTAT_IDLE_INTERVAL, when it reported less than a second before):
    # the smoke test's lookups must land before the count starts.
    if [ "$DIRECTORY" = pgsql ]; then sleep 11; fi
    log "=== $sys: generator ($GENERATOR, $SESSIONS sessions, $([ "$COUNT" -gt 0 ] && echo "$COUNT messages" || echo "$DURATION s"), $USERS users, $RECIPIENTS recipients); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    ticker "$sys" &
    TICKER_PID=$!
    local c0 c1 f0 s0 q0
    cg_reset
    q0=$(directory_queries)
    f0=$(flushes); s0=$(directory_cpu_s)
    c0=$(cpu_ticks)
    run_generator
    c1=$(cpu_ticks)
    kill_wait "$TICKER_PID" TERM 2
    TICKER_PID=""
    R_CPU[$sys]=$(awk -v a="$c0" -v b="$c1" 'BEGIN {
        split(a, x, " "); split(b, y, " "); busy = y[1] - x[1]; idle = y[2] - x[2]
        printf "%.0f", ((busy + idle) > 0 ? 100 * busy / (busy + idle) : 0) }')

    local acc err
    acc=$(bench_field messages); err=$(bench_field errors)
    R_RATE[$sys]=$(bench_field msgs_per_s); R_GEN_S[$sys]=$(bench_field seconds)
    R_5XX[$sys]=$(bench_field rejected_5xx); R_4XX[$sys]=$(bench_field temp_4xx)
    : "${R_5XX[$sys]:=n/a}" "${R_4XX[$sys]:=n/a}"
    R_ACC[$sys]=${acc:-0}; R_ERR[$sys]=${err:-n/a}
    awk '/^BENCH /{ exit } { print }' "$W/gen.out" >"$csv"
    [ -s "$csv" ] || rm -f "$csv"     # (smtp-source: no rows)
    if [ "$GEN_RC" != 0 ]; then fail="generator_rc=$GEN_RC"; fi
    if [ -z "$acc" ]; then fail="${fail:+$fail,}no_BENCH_line"; fi
    log "generator: $(grep '^BENCH ' "$W/gen.out" | tail -1 || echo '<no BENCH line>') (rc=$GEN_RC, machine CPU busy ${R_CPU[$sys]} %, load average $(cut -d' ' -f1-3 /proc/loadavg))"

    # Drain, at most DRAIN_TIMEOUT s: Postfix until its queue is empty; then
    # (both) until the Maildir count reaches the accepted count or stops
    # growing for 30 s. drain_s = seconds from the generator's end until then.
    local t0=$SECONDS n prev=-1 still
    if [ "$sys" = postfix ]; then
        while ! queue_empty "$sys" && [ $((SECONDS - t0)) -lt "$DRAIN_TIMEOUT" ]; do
            [ $(( (SECONDS - t0) % 10 )) = 0 ] && log "drain: queue $(postfix_queue_summary)"
            sleep 1
        done
        queue_empty "$sys" || log "drain: queue not empty after $DRAIN_TIMEOUT s: $(postfix_queue_summary)"
    fi
    still=$SECONDS
    while :; do
        n=$(delivered_count "$sys")
        [ "$n" -ge "${acc:-0}" ] && break
        [ "$n" != "$prev" ] && { prev=$n; still=$SECONDS; }
        if [ $((SECONDS - t0)) -ge "$DRAIN_TIMEOUT" ]; then
            log "drain: timeout after $DRAIN_TIMEOUT s"; break
        fi
        if [ $((SECONDS - still)) -ge 30 ]; then
            log "drain: count stuck at $n for 30 s"; break
        fi
        log "drain: $n of ${acc:-?} delivered"
        sleep 2
    done
    R_DRAIN[$sys]=$((SECONDS - t0))
    # The last delivery, to the millisecond: the newest rename into a new/
    # after the generator's last acknowledgement (its exit).
    local newest
    newest=$(python3 "$REPO/bench/lib/maildirs.py" newest "$(mail_base "$sys")")
    R_LASTDEL[$sys]=$(fmt %.2f "$(calc "$newest - $GEN_END")")
    # Deliveries per second from the generator's start, for the chart.
    R_PERSEC[$sys]="$RESULTS_DIR/$TAG-$STAMP-s$SESSIONS-$sys-delivered.csv"
    R_GENSECS[$sys]=$(fmt %.1f "$(calc "$GEN_END - $GEN_START")")
    python3 "$REPO/bench/lib/maildirs.py" persecond "$(mail_base "$sys")" "$GEN_START" >"${R_PERSEC[$sys]}"
    # Let a last in-flight rename land, then count once more.
    sleep 2
    R_MTA_CPU[$sys]=$(cg_cpu_s)
    local f1 s1
    f1=$(flushes); s1=$(directory_cpu_s)
    R_FLUSH[$sys]=n/a; R_DIRCPU[$sys]=n/a
    [[ $f0 =~ ^[0-9]+$ && $f1 =~ ^[0-9]+$ ]] && R_FLUSH[$sys]=$((f1 - f0))
    [[ $s0 =~ ^[0-9.]+$ && $s1 =~ ^[0-9.]+$ ]] && R_DIRCPU[$sys]=$(fmt %.2f "$(calc "$s1 - $s0")")
    n=$(delivered_count "$sys")
    R_DELIV[$sys]=$n
    log "drain: $n files delivered, generator accepted ${acc:-?} (drained ${R_DRAIN[$sys]} s after the generator)"
    if [ -n "$acc" ] && [ "$n" != "$acc" ]; then
        log "MISMATCH: $sys delivered $n files but the generator had $acc messages accepted"
        if [ "$n" -gt "$acc" ] && [ $((n - acc)) -le $((SESSIONS * 3)) ]; then
            log "  (a surplus of at most one batch per session: messages still in flight when the generator stopped at --duration? It must wait for their replies)"
        fi
        fail="${fail:+$fail,}MISMATCH_delivered=${n}_accepted=$acc"
    fi
    spot_check "$sys"
    [ -z "$SPOT_FAIL" ] || fail="${fail:+$fail,}$SPOT_FAIL"
    # The Maildirs stay until the end (removing a few hundred thousand
    # directories takes minutes; the EXIT trap does it after the report).
    [ "$DIRECTORY" = pgsql ] && log "postgresql: $(pg_connections) connections to database mail at the end of the run"
    case $sys in
    sluice)
        stop_sluice
        # The table's counters, logged at stop (the same line for every
        # table kind that asks a server; none for text).
        local q
        q=$(grep -o 'table users: queries=[0-9]*' "$SL_VAR/maillog" 2>/dev/null | tail -1 | cut -d= -f2 || true)
        R_OWNQ[$sys]=$(per_msg "${q:-}" "$n")
        log "sluice: $DIR_LABEL queries ${q:-n/a} for $n delivered; $(grep 'maildir: delivered' "$SL_VAR/maillog" | tail -1 | sed 's/.*maildir: //')"
        ;;
    postfix)
        log "postfix queue at stop: $(postfix_queue_summary)"
        grep -c 'Temporary lookup failure' "$PF/maillog" 2>/dev/null \
            | sed 's/^/[local] postfix maillog: "Temporary lookup failure" lines: /' >&2 || true
        stop_postfix ;;
    esac
    # Queries per message as the directory counts them (pgsql), read once
    # the system's connections are gone; else Sluice's own counters (ldap).
    R_TQ[$sys]=n/a
    case $DIRECTORY in
    pgsql)
        local q1
        pg_wait_idle
        q1=$(pg_table_scans)
        if [[ $q0 =~ ^[0-9]+$ && $q1 =~ ^[0-9]+$ ]]; then
            R_TQ[$sys]=$(per_msg "$((q1 - q0))" "$n")
            log "postgresql: $((q1 - q0)) scans of table users for $n delivered"
        fi ;;
    ldap) R_TQ[$sys]=${R_OWNQ[$sys]:-n/a} ;;
    esac
    if [ -n "$fail" ]; then
        R_FAIL[$sys]=$fail
        log "=== $sys: FAILED ($fail)"
    else
        log "=== $sys: done"
    fi
    sleep 2
}

# ------------------------------------------------------------------ main ----
ensure_packages
cg_create
[ -n "$CG" ] || log "no cpuacct cgroup here: MTA CPU per message will be n/a"
FLUSH_DISK=$(flush_disk)
[ -n "$FLUSH_DISK" ] || log "no block device under $W: flushes per message will be n/a"
ensure_sluice
ensure_sluice_generator
listening "$SMTP_PORT" && die "port $SMTP_PORT is already in use on this machine"
mkdir -p "$RESULTS_DIR"
# Every delivered message is a file, every user reached 4 directories, and
# everything stays until the end: a 600 s run of a fast system can take
# millions of inodes.
ifree=$(df -P -i "$W" | awk 'NR == 2 { print $4 }')
if [ -n "$ifree" ] && [ "$ifree" -lt 6000000 ]; then
    log "WARNING: only $ifree free inodes on the file system of $W; a long run may fill it"
fi

log "workload L: systems=[$SYSTEMS] directory=$DIRECTORY users=$USERS sessions=$SESSIONS duration=${DURATION}s generator=$GENERATOR tmp=$W"
case $DIRECTORY in
ldap) setup_slapd; start_slapd ;;
pgsql) setup_pgsql; start_pgsql; load_pgsql ;;
text) setup_text ;;
esac
restrictions_setup
[[ " $SYSTEMS " == *" postfix "* ]] && setup_postfix

for sys in $SYSTEMS; do
    run_one "$sys"
done

# --------------------------------------------------------------- report ----
# Per-minute figures from the CSV: the first DURATION/INTERVAL rows are the
# full intervals (a last, partial row holds the messages in flight at the end).
FULL=$(( DURATION / INTERVAL )); [ "$FULL" -ge 1 ] || FULL=1
declare -A R_AVG R_FIRST R_LAST R_LVF
for sys in $SYSTEMS; do
    csv=${R_CSV[$sys]}
    if [ -s "$csv" ]; then
    read -r R_AVG[$sys] R_FIRST[$sys] R_LAST[$sys] R_LVF[$sys] < <(
        awk -F, -v full="$FULL" -v iv="$INTERVAL" '
            NR > 1 && $1 != "" && rows < full { rows++; v[rows] = $2; sum += $2 }
            END {
                if (rows == 0) { print "0 0 0 n/a"; exit }
                k = 60 / iv
                printf "%.0f %.0f %.0f %s\n", sum * k / rows, v[1] * k, v[rows] * k,
                    (v[1] > 0 ? sprintf("%.2f", v[rows] / v[1]) : "n/a")
            }' "$csv")
    fi
    # A counted run: the rate over the whole run, from the generator.
    if [ "$COUNT" -gt 0 ] && [[ ${R_RATE[$sys]:-} =~ ^[0-9.]+$ ]]; then
        R_AVG[$sys]=$(fmt %.0f "$(calc "${R_RATE[$sys]} * 60")")
    fi
done

# Delivered per minute: every delivered message over the generator's time
# plus the drain (the drain is polled every 2 s: +-2 s).
declare -A R_DPM R_DRATIO
for sys in $SYSTEMS; do
    if [[ ${R_GEN_S[$sys]:-} =~ ^[0-9.]+$ && ${R_DELIV[$sys]:-} =~ ^[0-9]+$ ]]; then
        R_DPM[$sys]=$(fmt %.0f "$(calc "${R_DELIV[$sys]} * 60 / (${R_GEN_S[$sys]} + ${R_DRAIN[$sys]:-0})")")
    fi
done
for sys in $SYSTEMS; do
    if [ -n "${R_DPM[$sys]:-}" ] && [ -n "${R_DPM[postfix]:-}" ] && [ -z "${R_FAIL[postfix]:-}" ]; then
        R_DRATIO[$sys]=$(fmt %.2f "$(calc "${R_DPM[$sys]} / ${R_DPM[postfix]}")")
    fi
done

gen_tag=""
[ "$GENERATOR" = sluice ] || gen_tag=" generator=$GENERATOR"
lines=()
any_failed=0
for sys in $SYSTEMS; do
    ratio="n/a"
    if [ -n "${R_AVG[$sys]:-}" ] && [ -n "${R_AVG[postfix]:-}" ] && [ "${R_AVG[postfix]}" != 0 ] \
        && [ -z "${R_FAIL[postfix]:-}" ]; then
        ratio=$(fmt %.2f "$(calc "${R_AVG[$sys]} / ${R_AVG[postfix]}")")
    fi
    l="RESULT system=$sys workload=L users=$USERS sessions=$SESSIONS duration=$DURATION"
    l+=" accepted=${R_ACC[$sys]:-0} msgs_per_min=${R_AVG[$sys]:-n/a} first_min=${R_FIRST[$sys]:-n/a}"
    l+=" last_min=${R_LAST[$sys]:-n/a} last_vs_first=${R_LVF[$sys]:-n/a} temp_4xx=${R_4XX[$sys]:-n/a}"
    l+=" ratio_vs_postfix=$ratio rejected_5xx=${R_5XX[$sys]:-n/a} errors=${R_ERR[$sys]:-n/a}"
    l+=" delivered=${R_DELIV[$sys]:-n/a} drain_s=${R_DRAIN[$sys]:-n/a} cpu_busy_pct=${R_CPU[$sys]:-n/a}$gen_tag"
    l+=" accepted_per_min=${R_AVG[$sys]:-n/a} last_delivery_after_ack_s=${R_LASTDEL[$sys]:-n/a}"
    l+=" recipients=$RECIPIENTS count=$COUNT cpu_s=${R_MTA_CPU[$sys]:-n/a}"
    l+=" delivered_per_min=${R_DPM[$sys]:-n/a} delivered_ratio_vs_postfix=${R_DRATIO[$sys]:-n/a}"
    l+=" cpu_ms_per_msg=$(per_msg "${R_MTA_CPU[$sys]:-n/a}" "${R_DELIV[$sys]:-0}" 1000)"
    l+=" flushes_per_msg=$(per_msg "${R_FLUSH[$sys]:-n/a}" "${R_DELIV[$sys]:-0}")"
    # (the LDAP names, where they always were: older lines stay comparable)
    [ "$DIRECTORY" = ldap ] && l+=" slapd_cpu_s=${R_DIRCPU[$sys]:-n/a} ldap_queries_per_msg=${R_OWNQ[$sys]:-n/a}"
    [ "$sys" = sluice ] && l+=" maildir_sync=${MAILDIR_SYNC:-batch}"
    l+=" directory=$DIRECTORY directory_cpu_s=${R_DIRCPU[$sys]:-n/a} table_queries_per_msg=${R_TQ[$sys]:-n/a}"
    [ "$DIRECTORY" = pgsql ] && [ "$sys" = sluice ] && l+=" sluice_queries_per_msg=${R_OWNQ[$sys]:-n/a}"
    if [ -n "${R_FAIL[$sys]:-}" ]; then
        any_failed=1
        l+=" failed=${R_FAIL[$sys]}"
    fi
    lines+=("$l")
done

svg="$RESULTS_DIR/$TAG-$STAMP.svg"
series=()
for sys in $SYSTEMS; do
    [ -s "${R_CSV[$sys]:-}" ] && series+=("$sys=${R_CSV[$sys]}")
done
if [ ${#series[@]} -gt 0 ]; then
    python3 "$REPO/bench/chart.py" --out "$svg" --interval "$INTERVAL" --rows "$FULL" \
        --title "Workload L ($RECIPIENTS recipients): local delivery, $USERS $DIR_LABEL users, $SESSIONS sessions ($STAMP)" \
        "${series[@]}" && log "chart: $svg" || log "chart.py failed"
fi

# Deliveries per second, both systems, from the generator's start (the
# generator's run time in the legend): does delivery keep pace?
series=()
gens=""
for sys in $SYSTEMS; do
    [ -s "${R_PERSEC[$sys]:-}" ] || continue
    series+=("$sys=${R_PERSEC[$sys]}")
    gens+=" $sys ${R_GENSECS[$sys]} s"
done
if [ ${#series[@]} -gt 0 ]; then
    svg="$RESULTS_DIR/$TAG-$STAMP-s$SESSIONS-delivered.svg"
    python3 "$REPO/bench/chart.py" --out "$svg" --interval 1 --raw --column 1 \
        --ylabel "delivered per second" --unit " msg/s" \
        --title "Workload L ($GENERATOR, $SESSIONS sessions$([ "$DIRECTORY" = ldap ] || echo ", $DIR_LABEL users")): deliveries per second from the generator's start (generator ran:$gens)" \
        "${series[@]}" && log "chart: $svg" || log "chart.py failed"
fi

append_results "$RESULTS_DIR/$TAG-$STAMP.txt" "${lines[@]}"

for sys in $SYSTEMS; do
    [ -s "${R_CSV[$sys]:-}" ] || continue
    echo "# $sys: ${R_CSV[$sys]}"
    cat "${R_CSV[$sys]}"
done
printf '%s\n' "${lines[@]}"
exit "$any_failed"

# bench/lib/rewrite.sh — REWRITE=typical for bench/relay.sh (issue 39's
# benchmark): both systems rewrite and check every message with the same
# tables, a typical site's:
#
#   canonical_maps = texthash:CANONICAL       1,001 entries; the generator's
#       sender (sender@generator.bench.example) is one of them, so every
#       message's sender is rewritten
#   virtual_alias_maps = texthash:VIRTUAL     1,005 entries; each generator
#       process's recipient (recip1@domainN.example) is one of them, so
#       every recipient is rewritten (to recip1@aliasN.example)
#   header_checks = regexp:HEADER_CHECKS      20 patterns a site uses
#       (executables, scripts, spam words, a submission's Received: …), none
#       of which matches smtp-source's messages: every header line is
#       tried against all 20
#
# Sluice reads the same files as Postfix ([rewrite], [content_checks]).
# After a Sluice run, its log must show the rewritten recipients
# (rewrite_check), or the run is failed.

REWRITE=${REWRITE:-none}

rewrite_on() { [ "$REWRITE" = typical ]; }

rewrite_setup() {
    rewrite_on || return 0
    local d="$W/rw" i
    mkdir -p "$d"
    {
        for ((i = 0; i < 1000; i++)); do echo "user$i@generator.bench.example user$i@rewritten.bench.example"; done
        echo "sender@generator.bench.example sender@rewritten.bench.example"
    } >"$d/canonical"
    {
        for ((i = 0; i < 1000; i++)); do echo "list$i@domain1.example member$i@alias1.example"; done
        for i in 1 2 3 4 5; do echo "recip1@domain$i.example recip1@alias$i.example"; done
    } >"$d/virtual"
    cat >"$d/header_checks" <<'HC'
/^Content-(Disposition|Type).*name\s*=\s*"?.*\.(exe|scr|pif|bat|cmd|com|vbs|js|jar)"?\s*$/ REJECT executable attachment
/^Subject:.*\b(viagra|cialis|casino|lottery)\b/ REJECT spam words
/^Subject:.*=\?utf-8\?b\?.{200,}/ REJECT long encoded subject
/^Received:.*\[127\.0\.0\.66\]/ IGNORE
/^X-Mailer:.*(Mass Mailer|Bulk Sender)/ REJECT bulk mailer
/^From:.*@(spam|junk)\.example/ REJECT blocked sender
/^To:.*undisclosed-recipients:;.*bulk/ REJECT
/^Reply-To:.*@(spam|junk)\.example/ REJECT blocked reply address
/^X-Originating-IP:.*\[10\.66\./ REJECT blocked network
/^Message-ID:.*@localhost\.localdomain>/ WARN local message id
/^X-PHP-Originating-Script:.*(eval|shell)/ REJECT php script
/^Content-Type:.*charset="?(ks_c_5601|big5)"?/ WARN charset
/^User-Agent:.*BadBot/ REJECT bad agent
/^X-Spam-Flag:\s*YES/ REJECT spam flag
/^Precedence:\s*junk.*mass/ REJECT
/^List-Unsubscribe:.*spam\.example/ REJECT
/^Subject:\s*$/ WARN empty subject
/^Date:.*19[0-6][0-9]/ REJECT date too old
/^X-Library:.*Indy 9/ REJECT spam library
/^Sender:.*@(spam|junk)\.example/ REJECT blocked sender header
HC
    chmod 644 "$d"/*
    log "rewrite: canonical_maps (1,001 entries), virtual_alias_maps (1,005), header_checks (20 patterns) on both systems"
}

# Sluice's sections.
rewrite_sluice_toml() {
    rewrite_on || return 0
    cat <<TOML

[rewrite]
canonical_maps = ["texthash:$W/rw/canonical"]
virtual_alias_maps = ["texthash:$W/rw/virtual"]

[content_checks]
header_checks = ["regexp:$W/rw/header_checks"]
TOML
}

# Lines appended to Postfix's main.cf.
rewrite_postfix_main_cf() {
    rewrite_on || return 0
    cat <<CF

# REWRITE=typical (bench/lib/rewrite.sh)
canonical_maps = texthash:$W/rw/canonical
virtual_alias_maps = texthash:$W/rw/virtual
header_checks = regexp:$W/rw/header_checks
CF
}

# rewrite_check LOG: the Sluice run delivered to the rewritten recipients
# (its JSON log names recip1@alias1.example, with its orig_to).
rewrite_check() {
    rewrite_on || return 0
    grep -qE 'to=<recip1@alias1\.example>|"to":"recip1@alias1\.example"' "$1"
}

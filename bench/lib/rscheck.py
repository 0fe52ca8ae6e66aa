#!/usr/bin/env python3
"""bench/lib/rscheck.py - RESTRICTIONS=typical is in force (bench/relay.sh).

  rscheck.py HOST:PORT ALLOWED_RCPT

One session from the generator's address (a stranger: not in mynetworks,
not authenticated), no message sent (the sink's count stays exact):

  1. MAIL <spammer@bad.example>, RCPT <ALLOWED_RCPT>: refused with 5XX
     5.7.1 by check_sender_access, though the recipient's domain may be
     relayed to: the checks run before reject_unauth_destination lets
     the generator through;
  2. MAIL <check@nohost.gen.bench>, RCPT <ALLOWED_RCPT>: refused (4XX or
     5XX) by reject_unknown_sender_domain (NXDOMAIN from the benchmark's
     nsd);
  3. MAIL <check@sender.example>, RCPT <x@gen.bench> (a domain that
     exists but is not a relay domain): refused with 5XX 5.7.1, relay
     access denied: the generator is not in mynetworks;
  4. MAIL <check@sender.example>, RCPT <ALLOWED_RCPT>: 250.

Prints what it saw; exit status 0 if all four held, 1 otherwise.
"""

import smtplib
import sys


def main():
    target, allowed = sys.argv[1:3]
    host, port = target.rsplit(":", 1)
    # (sender, recipient, what must come back, what it shows)
    cases = [
        ("spammer@bad.example", allowed, "5.7.1", "the access table"),
        ("check@nohost.gen.bench", allowed, "refused", "unknown sender domain"),
        ("check@sender.example", "x@gen.bench", "5.7.1", "relay denied"),
        ("check@sender.example", allowed, "250", "allowed"),
    ]
    ok = True
    s = smtplib.SMTP(host, int(port), local_hostname="rscheck.bench", timeout=30)
    try:
        s.ehlo()
        for sender, rcpt, want, what in cases:
            code, text = s.mail(sender)
            if code == 250:
                code, text = s.rcpt(rcpt)
            text = text.decode("latin-1", "replace")
            print("MAIL <%s> RCPT <%s> (%s): %d %s" % (sender, rcpt, what, code, text))
            if want == "250":
                held = code == 250
            elif want == "refused":
                held = code >= 400
            else:
                held = code >= 500 and text.startswith(want)
            if not held:
                print("  expected %s" % want)
                ok = False
            s.rset()
        s.quit()
    except smtplib.SMTPException as e:
        print("SMTP error: %s" % e)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/lib/smtpcheck.py - smoke test of recipient validation before a run.

  smtpcheck.py HOST:PORT KNOWN_RCPT UNKNOWN_RCPT

Sends one small message to KNOWN_RCPT (must be accepted: 250 at RCPT and
after the dot) and tries UNKNOWN_RCPT (must be refused at RCPT with
550 5.1.1). Prints what it saw; exit status 0 if both held, 1 otherwise.
"""

import smtplib
import sys
import time


def main():
    target, known, unknown = sys.argv[1:4]
    host, port = target.rsplit(":", 1)
    ok = True
    s = smtplib.SMTP(host, int(port), local_hostname="smtpcheck.bench", timeout=30)
    try:
        s.ehlo()
        code, text = s.mail("check@sender.example")
        code, text = s.rcpt(unknown)
        text = text.decode("latin-1", "replace")
        print("RCPT <%s> (unknown): %d %s" % (unknown, code, text))
        if code != 550 or not text.startswith("5.1.1"):
            print("  expected 550 5.1.1")
            ok = False
        s.rset()
        msg = ("From: <check@sender.example>\r\nTo: <%s>\r\nSubject: smtpcheck\r\n"
               "Message-ID: <%d.smtpcheck@bench>\r\n\r\nsmoke test\r\n" % (known, time.time_ns()))
        s.mail("check@sender.example")
        code, text = s.rcpt(known)
        print("RCPT <%s> (known): %d %s" % (known, code, text.decode("latin-1", "replace")))
        if code != 250:
            ok = False
        else:
            code, text = s.data(msg.encode())
            print("DATA: %d %s" % (code, text.decode("latin-1", "replace")))
            if code != 250:
                ok = False
        s.quit()
    except smtplib.SMTPException as e:
        print("SMTP error: %s" % e)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

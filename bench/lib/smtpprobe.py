#!/usr/bin/env python3
"""bench/lib/smtpprobe.py - try to send one small message, print the reply.

  smtpprobe.py HOST:PORT RCPT MESSAGE-ID

Sends one ~400-byte message to RCPT with `Message-ID: <MESSAGE-ID>` and
prints one line: the reply that decided its fate (the first non-2xx reply
to MAIL or RCPT, else the reply to the final dot), as `CODE TEXT`.
Exit status: 0 accepted (2xx to the final dot), 1 refused (4xx/5xx),
2 no SMTP conversation (connection refused, reset, timeout).
"""

import smtplib
import sys
import time


def main():
    target, rcpt, msgid = sys.argv[1:4]
    host, port = target.rsplit(":", 1)
    body = ("From: <probe@sender.example>\r\nTo: <%s>\r\nSubject: probe\r\n"
            "Message-ID: <%s>\r\nDate: %s\r\n\r\n" % (rcpt, msgid, time.strftime(
                "%a, %d %b %Y %H:%M:%S +0000", time.gmtime())))
    body += "probe filler line, the quick brown fox jumps over the lazy dog\r\n" * 3
    try:
        s = smtplib.SMTP(host, int(port), local_hostname="probe.bench", timeout=30)
    except OSError as e:
        print("000 %s" % e)
        sys.exit(2)
    try:
        s.ehlo()
        for step in (lambda: s.mail("probe@sender.example"), lambda: s.rcpt(rcpt)):
            code, text = step()
            if code // 100 != 2:
                print("%d %s" % (code, text.decode("latin-1", "replace")))
                sys.exit(1)
        code, text = s.data(body.encode())
        print("%d %s" % (code, text.decode("latin-1", "replace")))
        try:
            s.quit()
        except (smtplib.SMTPException, OSError):
            pass
        sys.exit(0 if code // 100 == 2 else 1)
    except smtplib.SMTPDataError as e:
        print("%d %s" % (e.smtp_code, e.smtp_error.decode("latin-1", "replace")))
        sys.exit(1)
    except (smtplib.SMTPException, OSError) as e:
        print("000 %s" % e)
        sys.exit(2)


if __name__ == "__main__":
    main()

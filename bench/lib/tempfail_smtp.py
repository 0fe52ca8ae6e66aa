#!/usr/bin/env python3
"""bench/lib/tempfail_smtp.py - an SMTP server that never takes mail.

  tempfail_smtp.py HOST:PORT [--at rcpt|mail] [--stats FILE]

Greets with 220 and answers EHLO/HELO, then 451 4.3.0 to every RCPT TO
(default) or to every MAIL FROM (--at mail); DATA without an accepted
recipient gets 554 5.5.1, RSET/NOOP 250, QUIT 221, anything else 502.
Pipelined commands are answered one by one, in order. Python 3 stdlib
only; one thread per connection.

Every second (and at exit, on SIGTERM or SIGINT) FILE, if given, is
rewritten with one line: `connections=N tempfails=N`.
"""

import argparse
import os
import signal
import socketserver
import sys
import threading
import time

TEMPFAIL = b"451 4.3.0 Temporary failure (bench: always defers), try again later\r\n"

lock = threading.Lock()
stats = {"connections": 0, "tempfails": 0}


def bump(key):
    with lock:
        stats[key] += 1


class Handler(socketserver.StreamRequestHandler):
    timeout = 300

    def handle(self):
        bump("connections")
        at = self.server.at
        w = self.wfile
        w.write(b"220 tempfail.bench ESMTP always 4xx\r\n")
        while True:
            try:
                line = self.rfile.readline(4096)
            except OSError:
                return
            if not line:
                return
            verb = line[:4].upper()
            if verb == b"EHLO":
                w.write(b"250-tempfail.bench\r\n250-PIPELINING\r\n250 ENHANCEDSTATUSCODES\r\n")
            elif verb == b"HELO":
                w.write(b"250 tempfail.bench\r\n")
            elif verb == b"MAIL":
                if at == "mail":
                    bump("tempfails")
                    w.write(TEMPFAIL)
                else:
                    w.write(b"250 2.1.0 Ok\r\n")
            elif verb == b"RCPT":
                if at == "mail":
                    w.write(b"503 5.5.1 Error: need MAIL command\r\n")
                else:
                    bump("tempfails")
                    w.write(TEMPFAIL)
            elif verb == b"DATA":
                w.write(b"554 5.5.1 Error: no valid recipients\r\n")
            elif verb in (b"RSET", b"NOOP"):
                w.write(b"250 2.0.0 Ok\r\n")
            elif verb == b"QUIT":
                w.write(b"221 2.0.0 Bye\r\n")
                return
            else:
                w.write(b"502 5.5.2 Error: command not recognized\r\n")
            try:
                w.flush()
            except OSError:
                return


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 512


def write_stats(path):
    if not path:
        return
    with lock:
        text = "connections=%d tempfails=%d\n" % (stats["connections"], stats["tempfails"])
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("listen", help="HOST:PORT")
    ap.add_argument("--at", choices=("rcpt", "mail"), default="rcpt")
    ap.add_argument("--stats")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    srv = Server((host, int(port)), Handler)
    srv.at = a.at

    def stop(*_):
        write_stats(a.stats)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("tempfail_smtp: listening on %s, 451 at %s" % (a.listen, a.at), file=sys.stderr, flush=True)
    while True:
        time.sleep(1)
        write_stats(a.stats)


if __name__ == "__main__":
    main()

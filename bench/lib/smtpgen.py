#!/usr/bin/env python3
"""bench/lib/smtpgen.py - a small SMTP load generator for bench/local.sh.

A stand-in for `sluice bench` with the same flags and the same output, used
with GENERATOR=python (or to cross-check the Rust generator). Standard
library only (asyncio), one process, `--sessions` concurrent sessions.

Each session: connect, EHLO, then 1..M messages (M drawn uniformly from
--messages-per-session .. --messages-per-session-max), each to --recipients
recipients drawn at random from --recipient-template with {n} in
1..--recipient-count; --unknown-percent of the recipients are drawn from
count+1..2*count instead (users that do not exist). MAIL/RCPT/DATA are
pipelined when the server offers PIPELINING. New messages are started
until --duration seconds have passed; messages in flight then finish.

Output on stdout (postal's CSV, one line per --interval, time = HH:MM:SS):
    time,messages,data(K),errors,connections,SSL connections
    ...
    BENCH messages=<accepted> errors=<E> seconds=<T> msgs_per_s=<X>
          rejected_5xx=<n> temp_4xx=<n>
messages = accepted with 2xx after the final dot; errors = messages not
accepted (refused recipients, refused data, broken connections);
rejected_5xx / temp_4xx = messages that got a 5xx / 4xx reply at any step.
"""

import argparse
import asyncio
import random
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="HOST:PORT")
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--messages-per-session", type=int, default=1)
    p.add_argument("--messages-per-session-max", type=int, default=None)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--recipients", type=int, default=1)
    p.add_argument("--recipient-template", default="user{n}@example.com")
    p.add_argument("--recipient-count", type=int, default=1000)
    p.add_argument("--unknown-percent", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=60.0)
    p.add_argument("--from", dest="sender", default="bench@sender.example")
    return p.parse_args()


class Counters:
    def __init__(self):
        self.messages = 0
        self.bytes = 0
        self.errors = 0
        self.connections = 0
        self.rejected_5xx = 0
        self.temp_4xx = 0
        self.reported = 0

    def snapshot(self):
        return (self.messages, self.bytes, self.errors, self.connections)


class Conn:
    def __init__(self, reader, writer):
        self.r = reader
        self.w = writer

    async def reply(self):
        """One SMTP reply: (code, text)."""
        lines = []
        while True:
            line = await self.r.readline()
            if not line:
                raise ConnectionError("connection closed")
            lines.append(line)
            if len(line) < 4:
                raise ConnectionError("short reply %r" % line)
            if line[3:4] != b"-":
                return int(line[:3]), b"".join(lines).decode("latin-1")


def filler(size):
    header_estimate = 200
    line = b"Sluice benchmark filler text. The quick brown fox jumps over the lazy dog 0123\r\n"
    body = bytearray()
    while len(body) + len(line) + header_estimate <= size:
        body += line
    rest = max(0, size - header_estimate - len(body) - 2)
    body += b"x" * rest + b"\r\n"
    return bytes(body)


def classify(c, codes):
    """Count a not-accepted message under 5xx / 4xx (worst reply wins)."""
    if any(400 <= x < 500 for x in codes):
        c.temp_4xx += 1
    elif any(x >= 500 for x in codes):
        c.rejected_5xx += 1


async def session(a, c, body, deadline, run_id, seq):
    host, port = a.target.rsplit(":", 1)
    mmin = max(1, a.messages_per_session)
    mmax = max(mmin, a.messages_per_session_max or mmin)
    rng = random.Random()
    while time.monotonic() < deadline:
        todo = rng.randint(mmin, mmax)
        done = 0
        w = None
        try:
            reader, w = await asyncio.open_connection(host, int(port))
            c.connections += 1
            conn = Conn(reader, w)
            code, _ = await conn.reply()
            if code // 100 != 2:
                raise ConnectionError("greeting %d" % code)
            w.write(b"EHLO smtpgen.bench\r\n")
            code, text = await conn.reply()
            if code // 100 != 2:
                raise ConnectionError("EHLO %d" % code)
            pipelining = "PIPELINING" in text
            while done < todo and time.monotonic() < deadline:
                rcpts = []
                for _ in range(max(1, a.recipients)):
                    if rng.random() * 100.0 < a.unknown_percent:
                        n = a.recipient_count + rng.randint(1, a.recipient_count)
                    else:
                        n = rng.randint(1, a.recipient_count)
                    rcpts.append(a.recipient_template.replace("{n}", str(n)))
                cmds = ["MAIL FROM:<%s>\r\n" % a.sender]
                cmds += ["RCPT TO:<%s>\r\n" % r for r in rcpts]
                cmds.append("DATA\r\n")
                codes = []
                if pipelining:
                    w.write("".join(cmds).encode())
                    for _ in cmds:
                        codes.append((await conn.reply())[0])
                else:
                    for cmd in cmds:
                        w.write(cmd.encode())
                        codes.append((await conn.reply())[0])
                        if codes[-1] // 100 not in (2, 3):
                            break
                ok = (codes[0] // 100 == 2 and any(x // 100 == 2 for x in codes[1:-1])
                      and codes[-1] == 354 and len(codes) == len(cmds))
                if ok:
                    seq[0] += 1
                    head = ("From: <%s>\r\nTo: <%s>\r\nSubject: smtpgen %d\r\n"
                            "Message-ID: <%d.%d@smtpgen.bench>\r\nDate: %s\r\n\r\n" % (
                                a.sender, ">, <".join(rcpts), seq[0], seq[0], run_id,
                                time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())))
                    msg = head.encode() + body + b".\r\n"
                    w.write(msg)
                    code, _ = await conn.reply()
                    if code // 100 == 2:
                        c.messages += 1
                        c.bytes += len(msg)
                    else:
                        c.errors += 1
                        classify(c, [code])
                else:
                    c.errors += 1
                    classify(c, codes)
                    if codes and codes[-1] == 354:
                        # DATA was accepted although no recipient was: end it.
                        w.write(b".\r\n")
                        await conn.reply()
                    w.write(b"RSET\r\n")
                    await conn.reply()
                done += 1
            w.write(b"QUIT\r\n")
            try:
                await asyncio.wait_for(conn.reply(), 5)
            except Exception:
                pass
        except Exception as e:  # broken connection: the rest of the session is lost
            c.errors += max(1, todo - done)
            if c.reported < 5:
                c.reported += 1
                print("smtpgen: connection error after %d of %d messages: %s"
                      % (done, todo, e), file=sys.stderr)
            await asyncio.sleep(0.1)
        finally:
            if w is not None:
                w.close()


async def main():
    a = parse_args()
    c = Counters()
    body = filler(a.size)
    started = time.monotonic()
    deadline = started + a.duration
    run_id = int(time.time() * 1000)
    seq = [0]
    tasks = [asyncio.ensure_future(session(a, c, body, deadline, run_id, seq))
             for _ in range(max(1, a.sessions))]
    all_done = asyncio.gather(*tasks)
    print("time,messages,data(K),errors,connections,SSL connections", flush=True)
    last = c.snapshot()
    next_tick = started + a.interval
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(all_done), max(0.0, next_tick - time.monotonic()))
            finished = True
        except asyncio.TimeoutError:
            finished = False
        now = c.snapshot()
        if not finished or now != last:
            print("%s,%d,%d,%d,%d,0" % (time.strftime("%H:%M:%S"), now[0] - last[0],
                                        (now[1] - last[1]) // 1024, now[2] - last[2],
                                        now[3] - last[3]), flush=True)
        last = now
        next_tick += a.interval
        if finished:
            break
    secs = time.monotonic() - started
    print("BENCH messages=%d errors=%d seconds=%.3f msgs_per_s=%.1f rejected_5xx=%d temp_4xx=%d"
          % (c.messages, c.errors, secs, c.messages / secs, c.rejected_5xx, c.temp_4xx),
          flush=True)


if __name__ == "__main__":
    asyncio.run(main())

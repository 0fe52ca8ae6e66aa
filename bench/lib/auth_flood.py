#!/usr/bin/env python3
"""bench/lib/auth_flood.py - the AUTH flood of bench/auth_flood.sh (stdlib only).

  auth_flood.py check HOST:PORT USER PASSWORD
      From 127.0.0.1: EHLO must offer AUTH PLAIN, the right password must get
      235 and a wrong one 535. Prints `CHECK ehlo_auth=… right=… wrong=…`;
      exit 1 if any answer differs.

  auth_flood.py flood --target HOST:PORT --sessions N --duration S
                      --known U1,U2,… [--password-bytes 300] [--progress 5]
      N concurrent sessions, session i bound to its own source address
      127.0.1.1, 127.0.1.2, … (254 per /24, then 127.0.2.1, …). Each: connect,
      greeting, EHLO, then AUTH PLAIN with a wrong password of ~password-bytes
      bytes (user names alternate between the known ones and unknown ones)
      again and again until the server closes; then it reconnects. For S
      seconds; every read has a timeout (--read-timeout), the whole run is
      bounded by S + 20 s and by --max-attempts. Progress on stderr; last, on
      stdout, one `FLOOD key=value …` line: connections, AUTH replies by code
      (235/535/454/421/other; 421 also split by its text), greetings that
      were not 220, resets, timeouts, connect errors.

  auth_flood.py watch --pid PID --probe HOST:PORT --rss-csv F --probe-csv F
                      [--rss-every 0.1] [--probe-every 0.5]
      Until SIGTERM: every rss-every s VmRSS (and Threads) of PID from
      /proc/PID/status into F (`secs,rss_kb,threads`); every probe-every s a
      connection from 127.0.0.1 to the probe address, the time until the
      whole 220 greeting is in (`secs,greeting_ms,ok`), then QUIT. At the end
      one `WATCH key=value …` line: peak RSS (VmHWM), sampled RSS idle/max,
      greeting max/p50/p99, probes and failures, the daemon's CPU seconds
      (utime + stime of all its threads, /proc/PID/stat) over the watch, the
      whole machine's busy share (/proc/stat), compilers seen running.
      With --auth-probe HOST:PORT --auth-user U --auth-password P, also every
      second a session from 127.0.0.1 (mynetworks: no per-client limit)
      that AUTHs with the right password: how many got 235 and how many
      454 while the flood held the hashing pool.

  auth_flood.py chart --rss-csv F --probe-csv F --out SVG [--title T]
                      [--rss-limit-mb 150] [--greeting-limit-ms 1000]
                      [--flood-start S --flood-end S]
      A two-panel SVG: daemon RSS (MB) and greeting time (ms) over seconds,
      the limits as dashed lines, the flood's span shaded.
"""

import argparse
import asyncio
import base64
import csv
import html
import math
import os
import random
import resource
import signal
import socket
import sys
import time

IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: the port is chosen at connect()


def log(msg):
    print("[auth_flood %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def hostport(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


async def connect(target, source, timeout):
    """A connection from `source` (any port) to `target`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.setblocking(False)
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, target), timeout)
        return await asyncio.open_connection(sock=sock, limit=1 << 16)
    except BaseException:
        sock.close()
        raise


async def reply(reader, timeout):
    """One SMTP reply: (code, text of the last line), or (None, b"") at EOF."""
    lines = []
    while True:
        line = await asyncio.wait_for(reader.readline(), timeout)
        if not line:
            return None, b""
        lines.append(line)
        if len(line) < 4 or line[3:4] != b"-":
            break
    try:
        code = int(lines[-1][:3])
    except ValueError:
        code = 0
    return code, b"".join(lines)


# ------------------------------------------------------------------ check ---

async def check(target, user, password):
    def plain(pw):
        return b"AUTH PLAIN " + base64.b64encode(b"\0" + user.encode() + b"\0" + pw.encode()) + b"\r\n"

    async def one(pw):
        r, w = await connect(target, "127.0.0.1", 10)
        try:
            await reply(r, 10)
            w.write(b"EHLO check.bench\r\n")
            _, ehlo = await reply(r, 10)
            w.write(plain(pw))
            code, _ = await reply(r, 10)
            w.write(b"QUIT\r\n")
            await reply(r, 10)
            auth = [l for l in ehlo.upper().split(b"\r\n") if l[4:9] == b"AUTH "]
            return any(b"PLAIN" in l.split() for l in auth), code
        finally:
            w.close()

    offered, right = await one(password)
    _, wrong = await one(password + "-wrong")
    print("CHECK ehlo_auth=%s right=%s wrong=%s" % ("yes" if offered else "no", right, wrong), flush=True)
    return 0 if offered and right == 235 and wrong == 535 else 1


# ------------------------------------------------------------------ flood ---

def source_address(i):
    """127.0.1.1 .. 127.0.1.254, then 127.0.2.1, …: the i-th session's own address."""
    block = i // 254
    return "127.%d.%d.%d" % (block // 255, 1 + block % 255, 1 + i % 254)


class Counts:
    def __init__(self):
        self.c = {}

    def add(self, k, n=1):
        self.c[k] = self.c.get(k, 0) + n

    def get(self, k):
        return self.c.get(k, 0)


async def flood(a):
    target = hostport(a.target)
    known = [u for u in a.known.split(",") if u]
    rng = random.Random(a.seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#%&*+-=?_"
    # A pool of ready AUTH lines (the client's CPU goes to the flood, not to
    # making passwords): user names alternate known / unknown.
    lines = []
    for k in range(2048):
        user = known[k % len(known)] if (k % 2 == 0 and known) else "nobody%d@bench.test" % rng.randrange(100000)
        pw = "".join(rng.choice(alphabet) for _ in range(a.password_bytes))
        lines.append(b"AUTH PLAIN " + base64.b64encode(b"\0" + user.encode() + b"\0" + pw.encode()) + b"\r\n")
    log("flood: %d sessions from %s .. %s to %s:%d for %d s, AUTH lines of %d-%d bytes"
        % (a.sessions, source_address(0), source_address(a.sessions - 1), target[0], target[1],
           a.duration, min(map(len, lines)), max(map(len, lines))))

    n = Counts()
    stop = asyncio.Event()
    t0 = time.monotonic()
    start_epoch = time.time()
    deadline = t0 + a.duration

    def attempts():
        return sum(n.get(k) for k in ("r235", "r535", "r454", "r421", "r_other"))

    async def session(i):
        src = source_address(i)
        k = rng.randrange(len(lines))
        while not stop.is_set():
            w = None
            try:
                try:
                    r, w = await connect(target, src, a.read_timeout)
                except (OSError, asyncio.TimeoutError) as e:
                    n.add("conn_errors")
                    if n.get("conn_errors") <= 5:
                        log("session %d (%s): connect: %r" % (i, src, e))
                    await asyncio.sleep(0.05)
                    continue
                n.add("connections")
                code, text = await reply(r, a.read_timeout)
                if code != 220:
                    n.add("greeting_%s" % code)
                    continue
                w.write(b"EHLO flood%d.bench\r\n" % i)
                code, text = await reply(r, a.read_timeout)
                if code != 250:
                    n.add("ehlo_%s" % code)
                    continue
                if b"PLAIN" not in text.upper():
                    n.add("ehlo_no_auth")
                    continue
                while not stop.is_set():
                    if attempts() >= a.max_attempts:
                        stop.set()
                        break
                    w.write(lines[k])
                    k = (k + 1) % len(lines)
                    code, text = await reply(r, a.read_timeout)
                    if code is None:
                        n.add("closed_without_reply")
                        break
                    if code in (235, 535, 454):
                        n.add("r%d" % code)
                    elif code == 421:
                        n.add("r421")
                        t = text.lower()
                        n.add("r421_" + ("authfail" if b"failed authentications" in t
                                         else "errors" if b"too many errors" in t else "other"))
                        break
                    else:
                        n.add("r_other")
                        if n.get("r_other") <= 5:
                            log("session %d: unexpected reply %r" % (i, text[:200]))
                    if code == 235:
                        log("session %d: 235 to a wrong password! %r" % (i, text[:200]))
            except asyncio.TimeoutError:
                n.add("timeouts")
            except (ConnectionResetError, BrokenPipeError):
                n.add("resets")
            except OSError as e:
                n.add("io_errors")
                if n.get("io_errors") <= 5:
                    log("session %d: %r" % (i, e))
            finally:
                if w is not None:
                    w.close()

    tasks = [asyncio.create_task(session(i)) for i in range(a.sessions)]
    last_t, last_att = t0, 0
    while True:
        now = time.monotonic()
        if now >= deadline or stop.is_set():
            break
        await asyncio.sleep(min(a.progress, deadline - now))
        now, att = time.monotonic(), attempts()
        log("+%4.1fs conns %d, AUTH replies %d (%.0f/s), 535 %d, 454 %d, 421 %d, other %d, resets %d, timeouts %d, conn errors %d"
            % (now - t0, n.get("connections"), att, (att - last_att) / max(now - last_t, 1e-9),
               n.get("r535"), n.get("r454"), n.get("r421"), n.get("r_other"), n.get("resets"),
               n.get("timeouts"), n.get("conn_errors")))
        last_t, last_att = now, att
    stop.set()
    elapsed = time.monotonic() - t0
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    att = attempts()
    keys = ["connections", "r235", "r535", "r454", "r421", "r421_authfail", "r421_errors", "r421_other",
            "r_other", "closed_without_reply", "resets", "timeouts", "conn_errors", "io_errors", "ehlo_no_auth"]
    extra = sorted(k for k in n.c if k not in keys)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("FLOOD start_epoch=%.3f seconds=%.1f client_cpu_s=%.2f attempts=%d attempts_per_s=%.1f %s" % (
        start_epoch, elapsed, ru.ru_utime + ru.ru_stime, att, att / elapsed, " ".join("%s=%d" % (k, n.get(k)) for k in keys + extra)), flush=True)
    return 0


# ------------------------------------------------------------------ watch ---

def proc_status(pid):
    rss = threads = hwm = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, hwm, threads


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu():
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8])


COMPILERS = ("cargo", "rustc", "cc", "cc1", "ld", "clang", "gcc", "c++", "cc1plus", "lld", "mold")


def compilers_running():
    """Names of compiler processes that used CPU recently (state R)."""
    names = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.find("(") + 1:st.rfind(")")]
        state = st[st.rfind(")") + 2:st.rfind(")") + 3]
        if comm in COMPILERS and state == "R":
            names.add(comm)
    return names


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


async def watch(a):
    pid = a.pid
    probe = hostport(a.probe)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    t0 = time.monotonic()
    t0_epoch = time.time()
    cpu0 = proc_cpu_s(pid)
    m0 = machine_cpu()
    compilers = set()
    rss_rows, probe_rows = [], []

    async def sampler():
        while not stop.is_set():
            try:
                rss, _, threads = proc_status(pid)
            except OSError:
                log("watch: the daemon (pid %d) is gone" % pid)
                stop.set()
                return
            rss_rows.append((time.monotonic() - t0, rss, threads))
            try:
                await asyncio.wait_for(stop.wait(), a.rss_every)
            except asyncio.TimeoutError:
                pass

    async def prober():
        while not stop.is_set():
            start = time.monotonic()
            ok, ms, w = 0, None, None
            try:
                r, w = await connect(probe, "127.0.0.1", a.probe_timeout)
                code, _ = await reply(r, a.probe_timeout)
                ms = (time.monotonic() - start) * 1000
                ok = int(code == 220)
                if ok:
                    w.write(b"QUIT\r\n")
                    await reply(r, a.probe_timeout)
            except (OSError, asyncio.TimeoutError) as e:
                if ms is None:
                    ms = (time.monotonic() - start) * 1000
                    log("watch: probe failed after %.0f ms: %r" % (ms, e))
            finally:
                if w is not None:
                    w.close()
            probe_rows.append((start - t0, ms, ok))
            rest = a.probe_every - (time.monotonic() - start)
            if rest > 0:
                try:
                    await asyncio.wait_for(stop.wait(), rest)
                except asyncio.TimeoutError:
                    pass

    auth_codes = {}

    async def auth_prober():
        """The right password from 127.0.0.1 (in mynetworks: never limited)."""
        target = hostport(a.auth_probe)
        line = b"AUTH PLAIN " + base64.b64encode(
            b"\0" + a.auth_user.encode() + b"\0" + a.auth_password.encode()) + b"\r\n"
        while not stop.is_set():
            start = time.monotonic()
            w = None
            try:
                r, w = await connect(target, "127.0.0.1", a.probe_timeout)
                await reply(r, a.probe_timeout)
                w.write(b"EHLO legit.bench\r\n")
                await reply(r, a.probe_timeout)
                w.write(line)
                code, _ = await reply(r, a.probe_timeout)
                w.write(b"QUIT\r\n")
                await reply(r, a.probe_timeout)
            except (OSError, asyncio.TimeoutError):
                code = "fail"
            finally:
                if w is not None:
                    w.close()
            auth_codes[code] = auth_codes.get(code, 0) + 1
            rest = a.auth_probe_every - (time.monotonic() - start)
            if rest > 0:
                try:
                    await asyncio.wait_for(stop.wait(), rest)
                except asyncio.TimeoutError:
                    pass

    async def ticker():
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), a.progress)
            except asyncio.TimeoutError:
                pass
            seen = compilers_running()
            if seen - compilers:
                log("watch: WARNING: compiler processes running: %s" % ",".join(sorted(seen)))
            compilers.update(seen)
            if rss_rows and probe_rows and not stop.is_set():
                recent = [ms for t, ms, _ in probe_rows if t >= time.monotonic() - t0 - a.progress]
                log("watch +%4.1fs daemon RSS %.1f MB (max %.1f), threads %d, greeting last %.1f ms, max of last %gs %.1f ms"
                    % (time.monotonic() - t0, rss_rows[-1][1] / 1024, max(x[1] for x in rss_rows) / 1024,
                       rss_rows[-1][2], probe_rows[-1][1], a.progress, max(recent or [0])))

    print("READY", flush=True)
    await asyncio.gather(sampler(), prober(), ticker(), *([auth_prober()] if a.auth_probe else []))
    m1 = machine_cpu()
    machine_pct = 100.0 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    try:
        cpu = proc_cpu_s(pid) - cpu0
        _, hwm, _ = proc_status(pid)
    except OSError:
        cpu, hwm = float("nan"), 0
    wall = time.monotonic() - t0
    with open(a.rss_csv, "w") as f:
        f.write("secs,rss_kb,threads\n")
        f.writelines("%.2f,%d,%d\n" % r for r in rss_rows)
    with open(a.probe_csv, "w") as f:
        f.write("secs,greeting_ms,ok\n")
        f.writelines("%.2f,%.2f,%d\n" % r for r in probe_rows)
    ms = sorted(x[1] for x in probe_rows)
    fails = sum(1 for x in probe_rows if not x[2])
    print("WATCH t0_epoch=%.3f wall_s=%.1f hwm_kb=%d rss_first_kb=%d rss_max_kb=%d threads_max=%d probes=%d probe_failures=%d "
          "greeting_ms_max=%.1f greeting_ms_p50=%.1f greeting_ms_p99=%.1f cpu_s=%.2f machine_busy_pct=%.0f "
          "compilers_seen=%s legit_auth_tries=%d legit_auth_235=%d legit_auth_454=%d" % (
              t0_epoch, wall, hwm or 0, rss_rows[0][1] if rss_rows else 0, max((x[1] for x in rss_rows), default=0),
              max((x[2] for x in rss_rows), default=0), len(probe_rows), fails,
              ms[-1] if ms else float("nan"), pct(ms, 50), pct(ms, 99), cpu, machine_pct,
              ",".join(sorted(compilers)) or "none", sum(auth_codes.values()), auth_codes.get(235, 0),
              auth_codes.get(454, 0)), flush=True)
    return 0


# ------------------------------------------------------------------ chart ---

def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return [[float(x) for x in r] for r in rows[1:] if r]


def nice_step(span, target=6):
    if span <= 0:
        return 1
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def chart(a):
    rss = [(r[0], r[1] / 1024) for r in read_csv(a.rss_csv)]
    probes = read_csv(a.probe_csv)
    greet = [(r[0], r[1]) for r in probes]
    W, H = 900, 640
    ml, mr = 80, 30
    pw = W - ml - mr
    panels = [  # (top, height, series, limit, ylabel, colour, unit)
        (70, 210, rss, a.rss_limit_mb, "daemon RSS (MB)", "#d62728", "MB"),
        (360, 210, greet, a.greeting_limit_ms, "greeting time (ms)", "#1f77b4", "ms"),
    ]
    xmax = max([p[0] for p in rss + greet] + [1])
    xstep = nice_step(xmax, 10)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="13">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="28" text-anchor="middle" font-size="16" font-weight="bold">%s</text>'
           % (W // 2, html.escape(a.title))]

    def X(s):
        return ml + pw * s / xmax

    for top, ph, pts, limit, ylabel, colour, unit in panels:
        peak = max([v for _, v in pts] + [0])
        # The limit sets the scale only when it is near the data (a 5 ms
        # line under a 1000 ms scale would be flat); otherwise it is named.
        on_scale = a.show_limits and limit <= 3 * peak
        ymax = max([peak, limit * 1.05 if on_scale else 0, 1e-3])
        ystep = nice_step(ymax)
        ytop = math.ceil(ymax * 1.05 / ystep) * ystep

        def Y(v):
            return top + ph * (1 - v / ytop)
        if a.flood_end > a.flood_start:
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#fff3e0"/>'
                       % (X(a.flood_start), top, X(a.flood_end) - X(a.flood_start), ph))
        v = 0.0
        while v <= ytop + 1e-9:
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>' % (ml, Y(v), ml + pw, Y(v)))
            out.append('<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%g</text>'
                       % (ml - 8, Y(v), v))
            v += ystep
        s = 0.0
        while s <= xmax + 1e-9:
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>' % (X(s), top, X(s), top + ph))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (X(s), top + ph + 18, s))
            s += xstep
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, top + ph, ml + pw, top + ph))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, top, ml, top + ph))
        out.append('<text x="20" y="%d" text-anchor="middle" transform="rotate(-90 20 %d)">%s</text>'
                   % (top + ph // 2, top + ph // 2, html.escape(ylabel)))
        if on_scale:
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="6,4"/>'
                       % (ml, Y(limit), ml + pw, Y(limit)))
            out.append('<text x="%d" y="%.1f" text-anchor="end">limit %g %s</text>'
                       % (ml + pw - 4, Y(limit) - 5, limit, unit))
        elif a.show_limits:
            out.append('<text x="%d" y="%d" text-anchor="end">limit %g %s (far above this scale)</text>'
                       % (ml + pw, top - 8, limit, unit))
        if pts:
            out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                       % (colour, " ".join("%.1f,%.1f" % (X(t), Y(v)) for t, v in pts)))
            out.append('<text x="%d" y="%d" fill="%s">%s: peak %.1f %s</text>'
                       % (ml, top - 8, colour, html.escape(ylabel.split(" (")[0]), peak, unit))
    out.append('<text x="%d" y="%d" text-anchor="middle">seconds since the watch began '
               '(shaded: the flood)</text>' % (ml + pw // 2, H - 30))
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("target")
    c.add_argument("user")
    c.add_argument("password")
    f = sub.add_parser("flood")
    f.add_argument("--target", required=True)
    f.add_argument("--sessions", type=int, default=200)
    f.add_argument("--duration", type=float, default=30)
    f.add_argument("--known", default="")
    f.add_argument("--password-bytes", type=int, default=300)
    f.add_argument("--progress", type=float, default=5)
    f.add_argument("--read-timeout", type=float, default=15)
    f.add_argument("--max-attempts", type=int, default=10_000_000)
    f.add_argument("--seed", type=int, default=1)
    w = sub.add_parser("watch")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--probe", required=True)
    w.add_argument("--rss-csv", required=True)
    w.add_argument("--probe-csv", required=True)
    w.add_argument("--rss-every", type=float, default=0.1)
    w.add_argument("--probe-every", type=float, default=0.5)
    w.add_argument("--probe-timeout", type=float, default=10)
    w.add_argument("--progress", type=float, default=5)
    w.add_argument("--auth-probe", default="", help="HOST:PORT: AUTH with the right password there")
    w.add_argument("--auth-user", default="")
    w.add_argument("--auth-password", default="")
    w.add_argument("--auth-probe-every", type=float, default=1.0)
    ch = sub.add_parser("chart")
    ch.add_argument("--rss-csv", required=True)
    ch.add_argument("--probe-csv", required=True)
    ch.add_argument("--out", required=True)
    ch.add_argument("--title", default="AUTH flood: daemon RSS and greeting time")
    ch.add_argument("--rss-limit-mb", type=float, default=150)
    ch.add_argument("--greeting-limit-ms", type=float, default=1000)
    ch.add_argument("--show-limits", type=int, default=1)
    ch.add_argument("--flood-start", type=float, default=0)
    ch.add_argument("--flood-end", type=float, default=0)
    a = ap.parse_args()
    if a.cmd == "check":
        return asyncio.run(check(hostport(a.target), a.user, a.password))
    if a.cmd == "flood":
        return asyncio.run(asyncio.wait_for(flood(a), a.duration + 20))
    if a.cmd == "watch":
        return asyncio.run(watch(a))
    return chart(a)


if __name__ == "__main__":
    sys.exit(main())

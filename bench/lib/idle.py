#!/usr/bin/env python3
"""Opens N SMTP sessions that say EHLO and then sit idle (workload C).

Prints progress to stderr; when all are open it prints `OPEN n=<n>` and waits
for a line on stdin, then measures how long a fresh session takes to get its
greeting (`PROBE greeting_ms=<ms>`), closes everything and exits.
"""
import asyncio
import random
import sys
import time


# One loopback source address per this many sessions: a source address has
# only ~28,000 ephemeral ports for bind(), and earlier runs may leave some
# in TIME_WAIT, so each run picks its own block of addresses.
PER_SOURCE = 5000
BLOCK = random.randrange(1, 250)


async def one(host, port, conns, source):
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    greeting = await reader.readline()
    if not greeting.startswith(b"220"):
        raise RuntimeError(f"greeting {greeting!r}")
    writer.write(b"EHLO idle.test\r\n")
    await writer.drain()
    while True:
        line = await reader.readline()
        if not line or line[3:4] == b" ":
            break
    conns.append(writer)


async def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    conns = []
    batch = 500
    for start in range(0, n, batch):
        source = f"127.{BLOCK}.{start // PER_SOURCE}.1"
        await asyncio.gather(
            *(one(host, port, conns, source) for _ in range(min(batch, n - start)))
        )
        print(f"idle: {len(conns)}/{n} sessions open", file=sys.stderr, flush=True)
    print(f"OPEN n={len(conns)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    greeting = await reader.readline()
    ms = (time.monotonic() - t0) * 1000
    print(f"PROBE greeting_ms={ms:.1f} ok={int(greeting.startswith(b'220'))}", flush=True)
    writer.close()
    for w in conns:
        w.close()


asyncio.run(main())

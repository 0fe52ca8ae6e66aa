# N concurrent SMTP sessions from 127.0.0.2 to 127.0.0.1:26025, each one
# message of SIZE bytes; prints the count of each final reply code
# (bench/trust_memory.sh, M7). Usage: big_senders.py N SIZE
import socket, threading, sys
n, size = int(sys.argv[1]), int(sys.argv[2])
codes = []
body = (b"x" * 998 + b"\r\n") * (size // 1000)
def one(i):
    s = socket.create_connection(("127.0.0.1", 26025), source_address=("127.0.0.2", 0)); f = s.makefile("rb")
    def reply():
        while True:
            l = f.readline()
            if l[3:4] != b"-": return l
    reply(); 
    for c in [b"EHLO t\r\n", b"MAIL FROM:<a@b.test>\r\n", b"RCPT TO:<x@dest.test>\r\n", b"DATA\r\n"]:
        s.sendall(c); r = reply()
        if not r.startswith((b"2", b"3")): codes.append(r[:3]); return
    s.sendall(b"Subject: big\r\n\r\n" + body + b".\r\n")
    codes.append(reply()[:3])
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]; [t.join() for t in ts]
from collections import Counter; print(Counter(codes))

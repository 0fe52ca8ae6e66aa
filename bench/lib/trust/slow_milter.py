# A milter that continues at every step and sleeps 20 s at the end of
# each message (bench/trust_memory.sh, M7). Usage: slow_milter.py SOCKET
import socket, struct, threading, time, os, sys
path = sys.argv[1]
try: os.unlink(path)
except FileNotFoundError: pass
srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(100)
def send(c, code, data=b""):
    c.sendall(struct.pack(">I", len(data) + 1) + bytes([code]) + data)
def serve(c):
    try:
        while True:
            h = c.recv(4, socket.MSG_WAITALL)
            if len(h) < 4: return
            n = struct.unpack(">I", h)[0]
            f = b""
            while len(f) < n:
                b = c.recv(n - len(f))
                if not b: return
                f += b
            cmd = f[0:1]
            if cmd == b"O": send(c, ord("O"), struct.pack(">III", 6, 1, 0))
            elif cmd in (b"D", b"A"): pass
            elif cmd == b"Q": return
            elif cmd == b"E": time.sleep(20); send(c, ord("a"))
            else: send(c, ord("c"))
    except Exception: pass
while True:
    c, _ = srv.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()

# Holds N connections to the public submission socket, each sending MIB
# MiB of a request without a line end (bench/trust_memory.sh, M6).
# Usage: submit_hog.py SOCKET N MIB HOLD_SECONDS
import socket, sys, time, threading
path, n, mib, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = []
def one():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.settimeout(hold + 5)
    try:
        s.sendall(b'{"cmd":"submit","sender":"x","recipients":["a@b.example"],"message_b64":"')
        chunk = b"A" * (1 << 20)
        for _ in range(mib):
            s.sendall(chunk)
    except Exception as e:
        pass
    socks.append(s)
ts = [threading.Thread(target=one) for _ in range(n)]
[t.start() for t in ts]
time.sleep(hold)
print("opened", len(socks))

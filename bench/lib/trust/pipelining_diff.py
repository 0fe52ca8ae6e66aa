# The same pipelined conversations to a real Postfix (127.0.0.1:27025,
# smtpd_forbid_unauth_pipelining = yes, client outside mynetworks) and to
# Sluice (127.0.0.1:27026, the same mynetworks): the replies side by side.
# Usage: pipelining_diff.py (both listening; see bench/results/differential-2026-11-27.txt)
import socket, sys, time
def run(port, steps):
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(3)
    out = []
    def read():
        buf = b""
        try:
            while True:
                d = s.recv(65536)
                if not d: out.append("<closed>"); return False
                buf += d
                lines = buf.split(b"\r\n")
                if len(lines) > 1 and lines[-2][3:4] == b" " and buf.endswith(b"\r\n"):
                    # got at least one complete final line; drain briefly
                    s.settimeout(0.5)
                    try:
                        more = s.recv(65536)
                        if not more: out.extend(l.decode() for l in buf.split(b"\r\n") if l); out.append("<closed>"); return False
                        buf += more; continue
                    except socket.timeout: pass
                    s.settimeout(3)
                    out.extend(l.decode()[:60] for l in buf.split(b"\r\n") if l and l[3:4] == b" ")
                    return True
        except socket.timeout:
            out.append("<timeout>"); return True
    read()
    for data in steps:
        try: s.sendall(data)
        except Exception as e: out.append("<send failed>"); break
        if not read(): break
    return out
cases = {
 "A EHLO+MAIL in one write": [b"EHLO c.test\r\nMAIL FROM:<a@x.test>\r\n"],
 "B end of DATA + MAIL behind": [b"EHLO c.test\r\n", b"MAIL FROM:<a@x.test>\r\n", b"RCPT TO:<b@ours.test>\r\n", b"DATA\r\n", b"Subject: t\r\n\r\nbody\r\n.\r\nMAIL FROM:<evil@x.test>\r\n"],
 "C DATA + content before 354": [b"EHLO c.test\r\n", b"MAIL FROM:<a@x.test>\r\n", b"RCPT TO:<b@ours.test>\r\n", b"DATA\r\nSubject: t\r\n\r\nbody\r\n.\r\n"],
 "D MAIL+RCPT+DATA pipelined (allowed)": [b"EHLO c.test\r\n", b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@ours.test>\r\nDATA\r\n", b"Subject: t\r\n\r\nbody\r\n.\r\n"],
}
for name, steps in cases.items():
    for label, port in (("postfix", 27025), ("sluice", 27026)):
        print(f"{name:40} {label:8}", " | ".join(x for x in run(port, steps)))

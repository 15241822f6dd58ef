#!/usr/bin/env python3
"""Time frames across a link: the server echoes one byte per frame; the client sends a frame of N
bytes, waits for the byte, and records the round trip. A frame's time across the link is its round
trip minus that of a one-byte frame (the return and the stacks). Used by scripts/link_tbf.sh across
a veth pair shaped with tbf, and across the same pair unshaped, side by side.

Usage: tbf_probe.py serve PORT | tbf_probe.py probe HOST PORT SIZES REPS
Prints one JSON object: {"size": [round trips in seconds, ...], ...}."""
import json
import socket
import struct
import sys
import time


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("peer closed")
        b.extend(chunk)
    return bytes(b)


def serve(port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    ls.settimeout(60)
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.settimeout(60)
    try:
        while True:
            (n,) = struct.unpack("<I", recv_exact(c, 4))
            if n == 0:
                return
            recv_exact(c, n)
            c.sendall(b"k")
    except EOFError:
        return


def probe(host, port, sizes, reps):
    s = socket.create_connection((host, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = {}
    for n in [1] + sizes:
        payload = b"x" * n
        times = []
        for _ in range(reps + 2):  # two warm-ups, not kept
            t0 = time.perf_counter()
            s.sendall(struct.pack("<I", n) + payload)
            recv_exact(s, 1)
            times.append(time.perf_counter() - t0)
            time.sleep(0.002)  # let the shaper's bucket refill between frames
        out[str(n)] = times[2:]
    s.sendall(struct.pack("<I", 0))
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        probe(sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")], int(sys.argv[5]))

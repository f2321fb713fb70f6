#!/usr/bin/env python3
"""An independent Alibaba HTTPDNS client, written from the Android SDK 2.6.7's behaviour.

It shares no code with the server: the signature, the AES-CBC/GCM modes and the answer
parsing are Python (`hmac`, `cryptography`), following what the SDK does
(summarised in docs/api.md "Compatible clients"):

* bootstrap: `GET /{account}/ss?platform=android&sdk_version=2.6.7&region=global&sid=...` on
  each boot server in turn; `service_ip` replaces the list, `service_ip_port` must be as long
  as `service_ip` (the SDK indexes it by position), `0` means port 80;
* resolve: `GET /v2/d` with the SDK's parameter order and no URL encoding; `q` omitted for
  IPv4 only; `exp` always sent; `s` = hex(HMAC-SHA256(hex_decode(secret), sorted k=v&...));
  mode 1 / 2 put `{"dn":..,"q":..}` in `enc` = hex(IV ‖ ciphertext[‖ tag]);
* retry once on the next service IP, except for the codes the SDK never retries;
* parse: `code == "success"`, decrypt `data` per the answer's `mode` (base64), read
  `answers[].dn`, `v4`/`v6` `ips`, `ttl` (<= 0 read as 60), `no_ip_code`.
  `--ios` adds the iOS SDK's stricter checks (mode 2 rejected, `data` an object in mode 0,
  `answers` non-empty).

Prints one JSON object. Connects only to loopback addresses (it refuses others: test data
may carry real-looking IPs).
"""

import argparse
import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import sys
import time

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NO_RETRY = {
    "UnsignedInterfaceDisabled", "SignatureExpired", "InvalidSignature", "InvalidAccount",
    "AccountNotExists", "InvalidDuration", "InvalidHost",
}
UA = "Google/Pixel 7;Android/14;com.example.app/1.0;HTTPDNS/2.6.7"
SID = "Ab3dEfGh1234"


class Failure(Exception):
    """A request failed the way the SDK sees it: a code, or a network/parse error."""


def loopback(host):
    if not ipaddress.ip_address(host).is_loopback:
        print(json.dumps({"error": "refusing non-loopback address " + host}))
        sys.exit(3)


def get(host, port, path, timeout):
    loopback(host)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": UA})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, body
    except OSError as e:
        raise Failure("network: %s" % e)
    finally:
        conn.close()


def split_hostport(s, default_port):
    if s.startswith("["):
        host, _, rest = s[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if s.count(":") == 1:
        host, port = s.split(":")
        return host, int(port)
    return s, default_port


def service_ips(boot, account, timeout):
    path = "/%s/ss?platform=android&sdk_version=2.6.7&region=global&sid=%s" % (account, SID)
    last = None
    for b in boot:
        host, port = split_hostport(b, 80)
        try:
            status, body = get(host, port, path, timeout)
        except Failure as e:
            last = str(e)
            continue
        if status != 200:
            last = "ss status %d" % status
            continue
        doc = json.loads(body)
        if doc.get("service_status") == "disable":
            raise Failure("service disabled")
        if "service_ip" not in doc:
            # The SDK applies nothing without service_ip.
            last = "no service_ip"
            continue
        ips = doc["service_ip"]
        ports = doc.get("service_ip_port")
        if not isinstance(ips, list) or (ports is not None and not isinstance(ports, list)):
            raise Failure("JSONException: wrong types in /ss")
        if ports is not None and len(ports) < len(ips):
            raise Failure("ArrayIndexOutOfBounds: service_ip_port shorter than service_ip")
        out = []
        for i, ip in enumerate(ips):
            p = ports[i] if ports is not None else 0
            p = p if isinstance(p, int) and p > 0 else 80
            out.append((ip, p))
        return out
    raise Failure("no boot server answered /ss: %s" % last)


def unhex(s):
    s = "".join(s.split())
    if len(s) % 2:
        s = "0" + s
    return bytes.fromhex(s)


def sign(secret, params):
    canonical = "&".join("%s=%s" % (k, params[k]) for k in sorted(params) if params[k] != "")
    return hmac.new(unhex(secret), canonical.encode(), hashlib.sha256).hexdigest()


def encrypt(mode, key, plain):
    if mode == 1:
        iv = os.urandom(16)
        p = padding.PKCS7(128).padder()
        data = p.update(plain) + p.finalize()
        enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        return (iv + enc.update(data) + enc.finalize()).hex()
    nonce = os.urandom(12)
    return (nonce + AESGCM(key).encrypt(nonce, plain, None)).hex()


def decrypt(mode, key, b64):
    raw = base64.b64decode(b64, validate=True)
    if mode == 1:
        iv, ct = raw[:16], raw[16:]
        dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        data = dec.update(ct) + dec.finalize()
        u = padding.PKCS7(128).unpadder()
        return u.update(data) + u.finalize()
    return AESGCM(key).decrypt(raw[:12], raw[12:], None)


def build_path(args, mode, exp):
    """The /v2/d path in the Android SDK's order (ResolveHostHelper), values not encoded."""
    q = {"4": "", "6": "6", "4,6": "4,6"}[args.q]
    if mode == 0:
        parts = [("id", args.account), ("m", "0"), ("dn", args.hosts)]
        if q:
            parts.append(("q", q))
        parts += [("v", "1.0"), ("exp", str(exp))]
        signed = {k: v for k, v in parts}
    else:
        hidden = {"dn": args.hosts}
        if q:
            hidden["q"] = q
        enc = encrypt(mode, unhex(args.aes_key), json.dumps(hidden, separators=(",", ":")).encode())
        parts = [("id", args.account), ("m", str(mode)), ("enc", enc), ("v", "1.0"), ("exp", str(exp))]
        signed = {k: v for k, v in parts}
    if args.cip:
        parts.append(("cip", args.cip))
        signed["cip"] = args.cip
    if args.secret:
        s = sign(args.secret, signed)
        if args.tamper:
            s = s[:-1] + ("0" if s[-1] != "0" else "1")
        parts.append(("s", s))
    parts += [("sdk", "android_2.6.7"), ("sid", SID)]
    return "/v2/d?" + "&".join("%s=%s" % kv for kv in parts)


def build_v1_path(args, exp):
    """The v1 API of the Go and C SDKs: `/{account}/d|resolve` and their signed twins, with
    s = md5_hex(host + "-" + secret + "-" + t) (t the expiry; `ip` not signed)."""
    parts = [("host", args.hosts)]
    if args.q != "4":
        parts.append(("query", args.q))
    if args.cip:
        parts.append(("ip", args.cip))
    if args.api.startswith("sign_"):
        s = hashlib.md5(("%s-%s-%d" % (args.hosts, args.secret, exp)).encode()).hexdigest()
        if args.tamper:
            s = s[:-1] + ("0" if s[-1] != "0" else "1")
        parts += [("t", str(exp)), ("s", s)]
    return "/%s/%s?%s" % (args.account, args.api, "&".join("%s=%s" % kv for kv in parts))


def parse_v1(body):
    """`d`: one object; `resolve`: {"dns": [...]}, one element per (host, type) with "type"
    1 or 28 for several hosts with both families, else `ips` and `ipsv6` in one element."""
    doc = json.loads(body)
    elements = doc["dns"] if "dns" in doc else [doc]
    out = {}
    for e in elements:
        item = out.setdefault(e["host"], {})
        ttl = int(e.get("ttl", 0))
        fams = {1: ["v4"], 28: ["v6"]}.get(e.get("type"), ["v4", "v6"])
        for fam in fams:
            key = "ipsv6" if fam == "v6" and "type" not in e else "ips"
            if key in e:
                item[fam] = {"ips": list(e[key]), "ttl": ttl if ttl > 0 else 60, "raw_ttl": ttl, "no_ip_code": None}
        item["client_ip"] = e.get("client_ip")
    return out


def parse(body, args):
    doc = json.loads(body)
    if doc.get("code") != "success":
        raise Failure("code %s" % doc.get("code"))
    mode = str(doc.get("mode", "0"))
    data = doc.get("data", "")
    if args.ios and mode not in ("0", "1"):
        raise Failure("iOS: mode %s unsupported" % mode)
    if mode in ("1", "2"):
        data = json.loads(decrypt(int(mode), unhex(args.aes_key), data))
    elif isinstance(data, str):
        if args.ios:
            raise Failure("iOS: data must be an object in mode 0")
        data = json.loads(data)
    answers = data.get("answers", [])
    if args.ios and not answers:
        raise Failure("iOS: answers empty")
    out = {}
    for a in answers:
        dn = a["dn"]
        if args.ios and not dn:
            raise Failure("iOS: empty dn")
        item = {}
        for fam in ("v4", "v6"):
            if fam not in a:
                continue
            f = a[fam]
            if not isinstance(f, dict):
                raise Failure("JSONException: %s is not an object" % fam)
            ttl = int(f.get("ttl", 0))
            item[fam] = {"ips": list(f.get("ips", [])), "ttl": ttl if ttl > 0 else 60,
                         "raw_ttl": ttl, "no_ip_code": f.get("no_ip_code")}
        out[dn] = item
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--boot", required=True, help="boot servers, host:port comma-separated")
    ap.add_argument("--account", required=True)
    ap.add_argument("--secret", default="")
    ap.add_argument("--aes-key", default="")
    ap.add_argument("--mode", type=int, default=0, choices=[0, 1, 2])
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--q", default="4", choices=["4", "6", "4,6"])
    ap.add_argument("--cip", default="")
    ap.add_argument("--exp-offset", type=int, default=600)
    ap.add_argument("--tamper", action="store_true", help="send a wrong signature")
    ap.add_argument("--ios", action="store_true", help="add the iOS SDK's checks")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--api", default="v2", choices=["v2", "d", "resolve", "sign_d", "sign_resolve"],
                    help="v2: the Android SDK's /v2/d; the others: the v1 API of the Go and C SDKs")
    args = ap.parse_args()

    result = {}
    try:
        servers = service_ips(args.boot.split(","), args.account, args.timeout)
        result["service_ips"] = ["%s:%d" % s for s in servers]
        exp = int(time.time()) + args.exp_offset
        path = build_path(args, args.mode, exp) if args.api == "v2" else build_v1_path(args, exp)
        errors = []
        # RetryHttpRequest(…, 1): the first service IP, then the next one.
        for host, port in servers[:2]:
            try:
                status, body = get(host, port, path, args.timeout)
            except Failure as e:
                errors.append(str(e))
                continue
            if status != 200:
                code = json.loads(body).get("code", "") if body.startswith(b"{") else ""
                result["status"] = status
                if code in NO_RETRY:
                    raise Failure("code %s" % code)
                errors.append("status %d code %s" % (status, code))
                continue
            result["used"] = "%s:%d" % (host, port)
            result["answers"] = parse(body, args) if args.api == "v2" else parse_v1(body)
            break
        else:
            raise Failure("; ".join(errors) or "no service ip")
    except Failure as e:
        result["error"] = str(e)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

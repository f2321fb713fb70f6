#!/usr/bin/env python3
"""Writes the shared client test vectors (read by crates/client/tests/vectors.rs and the Android
SDK's tests). Every expected value is computed here, independently of both clients, from the
algorithms as documented (docs/config-center.md, docs/api.md, docs/client.md).

    python3 vectors/generate.py      # needs the `cryptography` package
"""
import base64, hashlib, hmac, json, os
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives import padding, serialization

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, obj):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def bucket(key, dev):
    return int.from_bytes(hashlib.sha256(f"{key}.{dev}".encode()).digest()[:8], "big") % 10000


def threshold(rate):
    import math
    r = min(1.0, max(0.0, rate))
    return int(math.floor(r * 10000 + 0.5))


def enabled(key, dev, rate):
    return bucket(key, dev) < threshold(rate)


# 1. Buckets: hosts (rate), the convergence switch and the resolution policy's httpdnsRate.
pairs = [
    ("cdn.xxx.com", "device-0001"), ("cdn.xxx.com", "device-0002"), ("cdn-ss.xxx.com", "device-0001"),
    ("cdn-bak.xxx.com", "device-0001"), ("image.xxx.com", "a1b2c3d4e5f6"), ("product.xxx.com", "a1b2c3d4e5f6"),
    ("community.xxx.com", "a1b2c3d4e5f6"), ("product.xxx.com", "00000000-0000-0000-0000-000000000000"),
    ("127.0.0.1:9000", "device-0001"), ("image.xxx.com", ""), ("image.xxx.com", "设备-42"),
    ("community.xxx.com", "ffffffff"), ("[2400:3200::3]:8443", "a1b2c3d4e5f6"), ("2400:3200::2", "dev"),
]
for dev in ["device-0001", "device-0002", "a1b2c3d4e5f6", "设备-42", "android-7f3a9c"]:
    pairs.append(("convergenceRate", dev))
    pairs.append(("httpdnsRate", dev))
write("buckets.json", {
    "about": "bucket = u64_be(sha256(key + '.' + deviceId)[0..8]) % 10000; enabled = bucket < round(rate * 10000). "
             "key: a canonical host, 'convergenceRate' (the global switch) or 'httpdnsRate' (resolutionPolicy).",
    "buckets": [{"key": k, "deviceId": d, "bucket": bucket(k, d)} for k, d in pairs],
    "thresholds": [{"rate": r, "threshold": threshold(r)} for r in [0, 0.0001, 0.01, 0.12345, 0.25, 0.5, 0.99995, 1]],
    "enabled": [{"key": k, "deviceId": d, "rate": r, "enabled": enabled(k, d, r)}
                for (k, d) in pairs[:8] for r in [0.1, 0.5, 0.9]],
})

# 2. sign_resolve: md5_hex(host + "-" + secret + "-" + t).
sr = [("www.aliyun.com", "IAmASecret", 1534316400), ("a.example.com", "s3cr3t", 1700000600),
      ("a.example.com,b.example.com", "s3cr3t", 1700000600), ("中文.example.com", "秘密", 1)]
write("sign_resolve.json", {
    "about": "/{account}/sign_resolve: s = md5_hex(host + '-' + secret + '-' + t), host exactly as sent.",
    "vectors": [{"host": h, "secret": s, "t": t, "s": hashlib.md5(f"{h}-{s}-{t}".encode()).hexdigest()} for h, s, t in sr],
})

# 3. /v2/d: the canonical text, the HMAC, and AES-CBC / AES-GCM.
SIGNED = {"id", "m", "dn", "cip", "q", "enc", "exp", "tags", "v"}


def canonical(pairs):
    first = {}
    order = []
    for k, v in pairs:
        if (k in SIGNED or k.startswith("sdns-")) and k not in first:
            first[k] = v
            order.append(k)
    items = sorted((k, first[k]) for k in order if first[k] != "")
    return "&".join(f"{k}={v}" for k, v in items)


def v2key(secret):
    digits = "".join(c for c in secret if not c.isspace())
    if len(digits) % 2:
        digits = "0" + digits
    try:
        k = bytes.fromhex(digits)
        if k:
            return k
    except ValueError:
        pass
    return secret.encode()


hm = [
    ("0123456789ABCDEF0123456789ABCDEF", [("id", "100000"), ("m", "0"), ("dn", "www.aliyun.com"), ("q", "4,6"), ("v", "1.0"),
                                          ("exp", "1700000600"), ("sdk", "android_2.6.7"), ("sid", "Ab3dE")]),
    ("abc", [("id", "7"), ("m", ""), ("m", "1"), ("dn", "a.com,b.com"), ("sdns-x", "1"), ("tags", "beta"), ("exp", "1")]),
    ("not hex secret", [("id", "100000"), ("dn", "www.example.com"), ("cip", "1.0.2.7"), ("exp", "1700000600")]),
]
key = bytes.fromhex("0123456789ABCDEF0123456789ABCDEF")
plain = b'{"dn":"www.aliyun.com","q":"4,6"}'
iv16 = bytes(range(16))
nonce12 = bytes(range(12))
pad = padding.PKCS7(128).padder()
enc = Cipher(algorithms.AES(key), modes.CBC(iv16)).encryptor()
cbc = iv16 + enc.update(pad.update(plain) + pad.finalize()) + enc.finalize()
gcm = nonce12 + AESGCM(key).encrypt(nonce12, plain, None)
key32 = bytes(range(32))
answer = json.dumps({"cip": "1.0.2.7", "answers": [{"dn": "www.example.com", "v4": {"ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60},
                                                    "v6": {"ips": ["2402:4e00::1"], "ttl": 60}}]}, separators=(",", ":")).encode()
gcm32 = nonce12 + AESGCM(key32).encrypt(nonce12, answer, None)
write("v2.json", {
    "about": "/v2/d (docs/api.md): canonical = signed non-empty params (first occurrence) sorted, k=v&k=v; "
             "s = hex(HMAC-SHA256(hex_decode(secret) or secret bytes, canonical)); AES: hex/base64 of IV||ciphertext[||tag].",
    "hmac": [{"secret": s, "params": [list(p) for p in ps], "canonical": canonical(ps),
              "s": hmac.new(v2key(s), canonical(ps).encode(), hashlib.sha256).hexdigest()} for s, ps in hm],
    "aes": [
        {"mode": 1, "key": key.hex(), "iv": iv16.hex(), "plaintext": plain.decode(), "sealed_hex": cbc.hex()},
        {"mode": 2, "key": key.hex(), "iv": nonce12.hex(), "plaintext": plain.decode(), "sealed_hex": gcm.hex()},
        {"mode": 2, "key": key32.hex(), "iv": nonce12.hex(), "plaintext": answer.decode(), "sealed_hex": gcm32.hex(),
         "sealed_base64": base64.b64encode(gcm32).decode()},
    ],
})

# 4. Config signatures: RFC 8032 §7.1 tests 1-3, and documents signed by the config center's scheme.
rfc = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", ""),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "72"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7", "af82"),
]
sigs = []
for seed_hex, msg_hex in rfc:
    sk = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))
    pk = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    msg = bytes.fromhex(msg_hex)
    sigs.append({"source": "RFC 8032 7.1", "public_key": base64.b64encode(pk).decode(), "message_hex": msg_hex,
                 "signature": base64.b64encode(sk.sign(msg)).decode(), "valid": True})
doc = ('{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":1}],'
       '"hostListConfig":[{"host":"cdn.xxx.com","rate":1}],"reviveProbeInterval":600000,'
       '"configRequestInterval":600000,"configVersion":5,"publicIpList":["223.5.5.5"]}')
sk7 = Ed25519PrivateKey.from_private_bytes(bytes([7] * 32))
sk8 = Ed25519PrivateKey.from_private_bytes(bytes([8] * 32))
pk7 = base64.b64encode(sk7.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode()
sig7 = base64.b64encode(sk7.sign(doc.encode())).decode()
sigs += [
    {"source": "config document, seed [7;32]", "public_key": pk7, "message": doc, "signature": sig7, "valid": True},
    {"source": "tampered body", "public_key": pk7, "message": doc.replace("cdn.xxx.com", "evil.xxx.com"), "signature": sig7, "valid": False},
    {"source": "another key's signature", "public_key": pk7, "message": doc,
     "signature": base64.b64encode(sk8.sign(doc.encode())).decode(), "valid": False},
    {"source": "not base64", "public_key": pk7, "message": doc, "signature": "not base64!", "valid": False},
]
write("config_signatures.json", {
    "about": "X-Config-Signature: base64 Ed25519 signature of the exact body; public key base64 of 32 bytes. "
             "message is UTF-8 text, or message_hex bytes.",
    "vectors": sigs,
})

# 5. Answers to parse: /resolve JSON (single and batch) and /d text.
write("answers.json", {
    "about": "Service answers and what a client takes from them: addresses IPv4 first then IPv6, unparseable ones "
             "dropped; ttl; client_isp; ip_isp labels.",
    "resolve": [
        {"body": '{"dns":[{"host":"a.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","nonsense"],"ipsv6":["2402:4e00::1"],'
                 '"ttl":60,"origin_ttl":60,"client_isp":"unicom","ip_isp":{"2.2.2.1":"unicom","2402:4e00::1":"telecom"}}]}',
         "host": "a.example.com", "ips": ["2.2.2.1", "2402:4e00::1"], "ttl": 60, "client_isp": "unicom",
         "ip_isp": {"2.2.2.1": "unicom", "2402:4e00::1": "telecom"}},
        {"body": '{"dns":[{"host":"www.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","2.2.2.2"],"ipsv6":["2402:4e00:0::1"],'
                 '"ttl":60,"origin_ttl":60}]}',
         "host": "www.example.com", "ips": ["2.2.2.1", "2.2.2.2", "2402:4e00::1"], "ttl": 60, "client_isp": None, "ip_isp": {}},
        {"body": '{"dns":[{"host":"nothing.example.com","client_ip":"1.0.2.7","ips":[],"ipsv6":[],"ttl":30,"origin_ttl":30}]}',
         "host": "nothing.example.com", "ips": [], "ttl": 30, "client_isp": None, "ip_isp": {}},
    ],
    "resolve_batch": [
        {"body": '{"dns": [{"host": "www.example.com", "client_ip": "1.0.1.7", "type": 1, "ips": ["1.1.1.1", "1.1.1.2"], "ttl": 60, "origin_ttl": 60},'
                 '{"host": "www.example.com", "client_ip": "1.0.1.7", "type": 28, "ips": ["2402:4e00::1"], "ttl": 60, "origin_ttl": 60},'
                 '{"host": "nothing.example.com", "client_ip": "1.0.1.7", "type": 1, "ips": [], "ttl": 30, "origin_ttl": 30},'
                 '{"host": "nothing.example.com", "client_ip": "1.0.1.7", "type": 28, "ips": [], "ttl": 30, "origin_ttl": 30}]}',
         "answers": {"www.example.com": {"ips": ["1.1.1.1", "1.1.1.2", "2402:4e00::1"], "ttl": 60},
                     "nothing.example.com": {"ips": [], "ttl": 30}}},
    ],
    "malformed_resolve": ["{}", '{"dns":[]}', "not json"],
    "d": [
        {"asked": ["www.example.com"], "body": "1.1.1.1;1.1.1.2,60|1.0.1.7",
         "answers": {"www.example.com": {"ips": ["1.1.1.1", "1.1.1.2"], "ttl": 60}}},
        {"asked": ["www.example.com"], "body": "1.1.1.1;1.1.1.2,60-2402:4e00::1,60|1.0.1.7",
         "answers": {"www.example.com": {"ips": ["1.1.1.1", "1.1.1.2", "2402:4e00::1"], "ttl": 60}}},
        {"asked": ["www.example.com", "v4only.example.com", "nothing.example.com"],
         "body": "www.example.com.:1.1.1.1;1.1.1.2,60|1.0.1.7\nv4only.example.com.:3.3.3.4,120|1.0.1.7\nnothing.example.com.:0,30|1.0.1.7",
         "answers": {"www.example.com": {"ips": ["1.1.1.1", "1.1.1.2"], "ttl": 60},
                     "v4only.example.com": {"ips": ["3.3.3.4"], "ttl": 120},
                     "nothing.example.com": {"ips": [], "ttl": 30}}},
        {"asked": ["v4only.example.com"], "body": "3.3.3.4,120-0,120|1.0.1.7",
         "answers": {"v4only.example.com": {"ips": ["3.3.3.4"], "ttl": 120}}},
    ],
    "v2": [
        {"data": {"cip": "1.0.2.7", "answers": [{"dn": "www.example.com", "v4": {"ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60}}]},
         "answers": {"www.example.com": {"ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60}}},
        {"data": {"answers": [{"dn": "nothing.example.com", "v4": {"ips": [], "ttl": 30, "no_ip_code": "RRNotExist"},
                               "v6": {"ips": [], "ttl": 30, "no_ip_code": "RRNotExist"}}]},
         "answers": {"nothing.example.com": {"ips": [], "ttl": 30}}},
    ],
    "filter": [
        {"ips": ["0.0.0.0", "127.0.0.1", "10.1.2.3", "192.168.1.1", "169.254.169.254", "224.0.0.1", "255.255.255.255",
                 "::", "::1", "fe80::1", "::ffff:127.0.0.1", "1.1.1.1", "2.2.2.2", "2402:4e00::1"],
         "allow_private": False, "client_isp": "unicom", "labels": {"1.1.1.1": "telecom", "2.2.2.2": "unicom"},
         "kept": ["2.2.2.2", "2402:4e00::1"], "dropped": 12},
        {"ips": ["0.0.0.0", "127.0.0.1", "10.1.2.3", "::", "1.1.1.1", "100.64.0.1", "198.18.0.1", "203.0.113.9", "2001:db8::1"],
         "allow_private": True, "client_isp": None, "labels": {},
         "kept": ["127.0.0.1", "10.1.2.3", "1.1.1.1", "100.64.0.1"], "dropped": 5},
        {"ips": ["1.1.1.1", "1.1.1.1", "2.2.2.2"], "allow_private": False, "client_isp": "Telecom",
         "labels": {"1.1.1.1": "telecom", "2.2.2.2": "mobile"}, "kept": ["1.1.1.1"], "dropped": 1},
    ],
})

# 6. Convergence rewrites. Device a1b2c3d4e5f6: image 9171 (in at 1), product 6936 (out at 0.5),
# community 1618 (out at 0.1).
conv_doc = {
    "mergeHostConfigs": [
        {"host": "image.xxx.com", "pathPrefix": "/image", "rate": 1},
        {"host": "product.xxx.com", "pathPrefix": "/product", "rate": 0.5},
        {"host": "community.xxx.com", "pathPrefix": "/community", "rate": 0.1},
        {"host": "img.xxx.com:8443", "pathPrefix": "/img8443", "rate": 1},
        {"host": "img443.xxx.com:443", "pathPrefix": "/img443", "rate": 1},
        {"host": "2400:3200::1", "pathPrefix": "/v6", "rate": 1},
    ],
    "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}, {"host": "cdn-ss.xxx.com", "rate": 1},
                       {"host": "cdn-bak.xxx.com", "rate": 0}, {"host": "127.0.0.1:9000", "rate": 1},
                       {"host": "2400:3200::2", "rate": 1}, {"host": "[2400:3200::3]:8443", "rate": 1}],
    "reviveProbeInterval": 600000, "configRequestInterval": 600000, "configVersion": 3, "publicIpList": ["223.5.5.5"],
}
dev = "a1b2c3d4e5f6"
hosts = [h["host"] for h in conv_doc["hostListConfig"] if enabled(h["host"], dev, h["rate"])]
assert "cdn-bak.xxx.com" not in hosts


def on_hosts(scheme, pq):
    out = {}
    for h in hosts:
        hh = f"[{h}]" if h.count(":") > 1 and not h.startswith("[") else h
        # URLs print without the scheme's default port.
        if hh.endswith(":443") and scheme == "https":
            hh = hh[:-4]
        out[h] = f"{scheme}://{hh}{pq}"
    return out


cases = []
for url, pq in [
    ("https://image.xxx.com/a/b.jpg?x=1", "/image/a/b.jpg?x=1"),
    ("https://IMAGE.xxx.com/image.xxx.com/x.jpg", "/image/image.xxx.com/x.jpg"),
    ("https://image.xxx.com/a.jpg?next=https://image.xxx.com/b.jpg", "/image/a.jpg?next=https://image.xxx.com/b.jpg"),
    ("https://image.xxx.com:443/a.jpg", "/image/a.jpg"),
    ("https://img.xxx.com:8443/x.jpg", "/img8443/x.jpg"),
    ("https://img443.xxx.com/x.jpg", "/img443/x.jpg"),
    ("https://[2400:3200::1]/a.jpg", "/v6/a.jpg"),
    ("https://[2400:3200:0:0::1]/a.jpg", "/v6/a.jpg"),
    ("https://cdn-ss.xxx.com/image/a.jpg", "/image/a.jpg"),
    ("http://127.0.0.1:9000/image/a.jpg", "/image/a.jpg"),
]:
    scheme = url.split(":")[0]
    cases.append({"url": url, "converged": True, "path_and_query": pq, "on_hosts": on_hosts(scheme, pq)})
for url in ["https://product.xxx.com/p.json", "https://community.xxx.com/c.png", "https://img.xxx.com/x.jpg",
            "http://img443.xxx.com/x.jpg", "https://other.com/image.xxx.com/a.jpg", "https://image.xxx.com.evil.com/a.jpg"]:
    cases.append({"url": url, "converged": False})
switch_doc = dict(conv_doc, convergenceRate=0.2)
write("convergence.json", {
    "about": "converge(doc, deviceId, url): the parsed URL's host[:port] against mergeHostConfigs (inside rate), or already "
             "on a hostListConfig host; path_and_query on the unified host; on_hosts: the URL on each host of host_list.",
    "document": conv_doc,
    "deviceId": dev,
    "host_list": hosts,
    "cases": cases,
    "switch": {"document": switch_doc, "devices": [
        {"deviceId": d, "bucket": bucket("convergenceRate", d), "enabled": enabled("convergenceRate", d, 0.2),
         "host_list": [h["host"] for h in conv_doc["hostListConfig"] if enabled(h["host"], d, h["rate"])]
         if enabled("convergenceRate", d, 0.2) else []}
        for d in ["device-0001", "device-0002", "a1b2c3d4e5f6"]]},
})
# 7. The resolution policy (resolutionPolicy): the per-device decision (docs/policy.md).
policy = {
    "default": {"httpdnsRate": 0.8, "localDnsFallback": True, "timeoutMs": 2000},
    "places": [{"isp": "unicom", "region": "shanghai", "httpdnsRate": 0.25, "localDnsFallback": False}],
    "segments": [{"segment": "premium", "httpdnsRate": 1, "timeoutMs": 3000},
                 {"segment": "lite", "localDnsFallback": False}],
    "preResolveHosts": ["image.xxx.com", "cdn.xxx.com"],
}
FIELDS = ("httpdnsRate", "localDnsFallback", "timeoutMs")


def decide(dev, isp, region, segment, share):
    place = next((p for p in policy["places"] if p["isp"] == isp and p["region"] == region), None)
    seg = next((x for x in policy["segments"] if x["segment"] == segment), None) if segment else None
    layers = [("place", place), ("segment", seg), ("default", policy["default"])]

    def pick(k, d):
        for _, layer in layers:
            if layer is not None and k in layer:
                return layer[k]
        return d
    decided = next(n for n, layer in layers if layer is not None and any(f in layer for f in FIELDS))
    rate = float(pick("httpdnsRate", 1))
    state = "healthy"
    if place is None and share is not None:
        rate = rate * share
        state = "degraded" if share == 0.01 else "recovering"
    return {"httpdns": enabled("httpdnsRate", dev, rate), "localDnsFallback": pick("localDnsFallback", True),
            "timeoutMs": pick("timeoutMs", 2000), "httpdnsRate": rate, "decidedBy": decided, "state": state,
            "bucket": bucket("httpdnsRate", dev)}


res_cases = []
for dev in ["device-0001", "device-0002", "a1b2c3d4e5f6", "设备-42", "android-7f3a9c", "ffffffff"]:
    for isp, region in [("unicom", "shanghai"), ("telecom", "beijing"), ("unknown", "unknown")]:
        for segment in [None, "premium", "lite", "nobody"]:
            for share in [None, 0.01, 0.25]:
                if share is not None and segment not in (None, "premium"):
                    continue
                c = {"deviceId": dev, "place": {"isp": isp, "region": region}, "segment": segment,
                     "controllerShare": share}
                c.update(decide(dev, isp, region, segment, share))
                # A client deciding alone (no server answer) knows no place and no controller.
                c["clientDecides"] = share is None and not any(
                    p["isp"] == isp and p["region"] == region for p in policy["places"])
                res_cases.append(c)
write("resolution.json", {
    "about": "resolution = decide(policy, device): each field from the device's place entry (pinned: the controller "
             "never scales it), else its segment entry, else default; in an unpinned place the controller's share "
             "scales httpdnsRate; httpdns = bucket('httpdnsRate', deviceId) < round(httpdnsRate * 10000). "
             "clientDecides: a client without the server's answer computes the same from default and segments.",
    "policy": policy,
    "cases": res_cases,
})

# 8. Targeting (docs/config-center.md): the first target whose match holds applies. Written
# here from the documented rules (semver ranges included), independently of crates/config.
def parse_version(s):
    s = s.strip().lstrip("vV").split("+")[0]
    core, _, pre = s.partition("-")
    if "-" in s and not pre:
        return None
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    # (numbers, release?, pre): a release sorts after its pre-releases; "lowest" is (n, 0, "").
    return (tuple(nums), 0 if pre else 1, pre)


def lowest(nums):
    return (tuple(nums), 0, "")


def partial(s):
    for suffix in (".*", ".x"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
    if "-" in s or "*" in s:
        return None
    v = parse_version(s)
    return (min(len(s.split(".")), 3), list(v[0])) if v else None


def bump(n, nums):
    out = nums[: n - 1] + [nums[n - 1] + 1] + [0] * (3 - n)
    return out


def comparators(c):
    for prefix, op in ((">=", "ge"), ("<=", "le"), (">", "gt"), ("<", "lt"), ("==", "eq"), ("=", "eq")):
        if c.startswith(prefix):
            v = parse_version(c[len(prefix):])
            if op == "lt" and v[1] == 1:
                v = lowest(v[0])
            return [(op, v)]
    if c[0] in "^~":
        n, nums = partial(c[1:])
        if c[0] == "^":
            nz = [i for i in range(n) if nums[i] != 0]
            fixed = nz[0] + 1 if nz else n
        else:
            fixed = 2 if n >= 2 else 1
        return [("ge", (tuple(nums), 1, "")), ("lt", lowest(bump(fixed, nums)))]
    n, nums = partial(c)
    if n == 3:
        return [("eq", parse_version(c))]
    return [("ge", (tuple(nums), 1, "")), ("lt", lowest(bump(n, nums)))]


def in_range(rng, version):
    v = parse_version(version)
    if v is None:
        return False
    ops = {"ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b,
           "lt": lambda a, b: a < b, "eq": lambda a, b: a == b}
    for alt in rng.split("||"):
        cs = [c for part in alt.split(",") for c in part.split()]
        if all(ops[op](v, w) for c in cs for op, w in comparators(c)):
            return True
    return False


def target_holds(m, d):
    def same(key):
        return key not in m or (d.get(key) is not None and d[key].lower() == m[key].lower())
    return (same("platform") and same("isp") and same("region")
            and ("appVersion" not in m or (d.get("appVersion") is not None and in_range(m["appVersion"], d["appVersion"])))
            and all(d.get("labels", {}).get(k) == v for k, v in m.get("labels", {}).items()))


targets = [
    {"match": {"platform": "ios", "appVersion": ">=5.2 <6"}, "override": {"configRequestInterval": 60000}},
    {"match": {"isp": "unicom", "region": "shanghai"}, "override": {"hostListConfig": [{"host": "cdn-sh.xxx.com", "rate": 1}]}},
    {"match": {"labels": {"channel": "beta", "tier": "gold"}}, "override": {"convergenceRate": 0}},
    {"match": {"appVersion": "^4.1 || ~3.9"}, "override": {"reviveProbeInterval": 30000}},
    {"match": {"platform": "android", "appVersion": "5.2.*"}, "override": {"publicIpList": ["180.76.76.76"]}},
]
devices = [
    {"platform": "ios", "appVersion": "5.2.0"}, {"platform": "iOS", "appVersion": "5.10.3"},
    {"platform": "ios", "appVersion": "6.0.0-rc1"}, {"platform": "ios", "appVersion": "5.1.9"},
    {"platform": "ios", "appVersion": "5.3", "isp": "unicom", "region": "shanghai"},
    {"platform": "android", "isp": "unicom", "region": "shanghai"}, {"platform": "android", "isp": "unicom", "region": "beijing"},
    {"labels": {"channel": "beta", "tier": "gold", "x": "y"}}, {"labels": {"channel": "beta"}},
    {"appVersion": "4.9.0"}, {"appVersion": "5.0.0"}, {"appVersion": "3.9.7"}, {"appVersion": "3.10.0"},
    {"platform": "android", "appVersion": "5.2.7"}, {"platform": "android", "appVersion": "v5.2.1+build.9"},
    {"platform": "android", "appVersion": "5.3.0"}, {"platform": "android", "appVersion": "not-a-version"}, {},
]
write("targeting.json", {
    "about": "first_match(targets, device): the index of the first target whose every match field holds "
             "(platform, isp, region without case; appVersion a semver range; every label equal), else null.",
    "targets": targets,
    "cases": [{"device": d, "target": next((i for i, t in enumerate(targets) if target_holds(t["match"], d)), None)}
              for d in devices],
})

print("vectors written to", HERE)

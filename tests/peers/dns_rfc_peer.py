"""dnspython checks of the RFC behaviour of the httpdns DNS front-ends (driven by
tests/integration/dns_rfcs.rs): DO echo, BADVERS, ECS scope, ANY, AXFR and the legacy DoH
content type, over UDP, TCP and DoH alike.

Usage: dns_rfc_peer.py DNS_PORT API_BASE_URL
Prints one JSON object with one summary per case. Only 127.0.0.1 is ever contacted.
"""
import json
import sys
import urllib.request

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

port = int(sys.argv[1])
api = sys.argv[2]
TIMEOUT = 5


def summary(resp):
    scope = None
    for opt in resp.options:
        if isinstance(opt, dns.edns.ECSOption):
            scope = opt.scopelen
    return {
        "rcode": dns.rcode.to_text(resp.rcode()),
        "edns": resp.edns,
        "do": bool(resp.ednsflags & dns.flags.DO),
        "cd": bool(resp.flags & dns.flags.CD),
        "scope": scope,
        "answer": [f"{rrset.name} {dns.rdatatype.to_text(rrset.rdtype)} {rr.to_text()}" for rrset in resp.answer for rr in rrset],
    }


def udp(q):
    return summary(dns.query.udp(q, "127.0.0.1", port=port, timeout=TIMEOUT))


def tcp(q):
    return summary(dns.query.tcp(q, "127.0.0.1", port=port, timeout=TIMEOUT))


def doh(q):
    return summary(dns.query.https(q, api + "/dns-query", post=True, timeout=TIMEOUT, http_version=dns.query.HTTPVersion.H1))


def ecs(addr, prefix):
    return dns.message.make_query("www.example.com", "A", use_edns=0, options=[dns.edns.ECSOption(addr, prefix)])


out = {}
for name, send in [("udp", udp), ("tcp", tcp), ("doh", doh)]:
    out[name] = {
        "do": send(dns.message.make_query("www.example.com", "A", want_dnssec=True)),
        "badvers": send(dns.message.make_query("www.example.com", "A", use_edns=1)),
        "scope_32": send(ecs("1.0.2.7", 32)),
        "scope_16": send(ecs("1.0.0.0", 16)),
        "scope_mapped": send(ecs("::ffff:1.0.2.7", 128)),
        # Family 1, source /20, scope 0, address 1.2.255: bits set past the prefix.
        "bits_past_prefix": send(dns.message.make_query("www.example.com", "A", use_edns=0, options=[
            dns.edns.GenericOption(dns.edns.OptionType.ECS, bytes([0, 1, 20, 0, 1, 2, 255]))])),
        "scope_soa": send(dns.message.make_query("www.example.com", "SOA", use_edns=0, options=[dns.edns.ECSOption("1.0.2.7", 32)])),
        "any": send(dns.message.make_query("www.example.com", "ANY")),
        "cd": send(dns.message.make_query("www.example.com", "A", flags=dns.flags.RD | dns.flags.CD)),
    }

# AXFR over TCP: refused, as dnspython's zone-transfer client sees it.
try:
    list(dns.query.xfr("127.0.0.1", "www.example.com", port=port, timeout=TIMEOUT, lifetime=TIMEOUT))
    out["axfr"] = "transferred"
except dns.query.TransferError as e:
    out["axfr"] = dns.rcode.to_text(e.rcode)

# The drafts' content type before RFC 8484, still sent by old clients.
wire = dns.message.make_query("www.example.com", "A").to_wire()
req = urllib.request.Request(api + "/dns-query", data=wire, method="POST", headers={"content-type": "application/dns-udpwireformat"})
with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
    out["udpwireformat"] = {"status": r.status, "type": r.headers["content-type"], **summary(dns.message.from_wire(r.read()))}

print(json.dumps(out))

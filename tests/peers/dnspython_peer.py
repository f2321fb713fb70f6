"""dnspython as a real DNS peer of the httpdns listeners (driven by tests/integration/dns.rs).

Usage: dnspython_peer.py DNS_PORT API_BASE_URL
Prints one JSON object: for each case, the sorted addresses of the answer, the response
code, and the client-subnet scope the server echoed.
"""
import json
import sys

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode

port = int(sys.argv[1])
api = sys.argv[2]


def query(name, rdtype, subnet=None):
    options = [dns.edns.ECSOption(subnet[0], subnet[1])] if subnet else []
    return dns.message.make_query(name, rdtype, use_edns=0, options=options)


def summary(resp):
    addrs = sorted(rr.address for rrset in resp.answer for rr in rrset)
    scope = None
    for opt in resp.options:
        if isinstance(opt, dns.edns.ECSOption):
            scope = opt.scopelen
    return {
        "addrs": addrs,
        "rcode": dns.rcode.to_text(resp.rcode()),
        "aa": bool(resp.flags & dns.flags.AA),
        "scope": scope,
    }


out = {
    "udp_unicom": summary(dns.query.udp(query("www.example.com", "A", ("1.0.2.0", 24)), "127.0.0.1", port=port, timeout=5)),
    "tcp_telecom": summary(dns.query.tcp(query("www.example.com", "A", ("1.0.1.0", 24)), "127.0.0.1", port=port, timeout=5)),
    "udp_aaaa": summary(dns.query.udp(query("www.example.com", "AAAA"), "127.0.0.1", port=port, timeout=5)),
    "udp_below_apex": summary(dns.query.udp(query("nope.www.example.com", "A"), "127.0.0.1", port=port, timeout=5)),
    "udp_unmanaged": summary(dns.query.udp(query("nope.example.org", "A"), "127.0.0.1", port=port, timeout=5)),
    "https_post": summary(dns.query.https(query("www.example.com", "A", ("1.0.2.0", 24)), api + "/dns-query", post=True, timeout=5, http_version=dns.query.HTTPVersion.H1)),
    "https_get": summary(dns.query.https(query("www.example.com", "A", ("1.0.1.0", 24)), api + "/dns-query", post=False, timeout=5, http_version=dns.query.HTTPVersion.H1)),
}
print(json.dumps(out))

#!/usr/bin/env bash
# Plain DNS over UDP for a managed name: httpdns against Knot DNS serving an equivalent zone,
# in one run, with the ratio.
#
#   scripts/bench-dns.sh [duration_seconds] [clients]
#
# Then `/d` for a name resolved upstream (Knot is the upstream, and the answer is cached)
# against `/d` for the managed name, with wrk (-t1, 64 connections), and the ratio.
#
# Needs dnsperf and knot (apt-get install dnsperf knot). Both servers answer `www.example.com A`
# with two addresses and run with two UDP workers (httpdns: its tokio runtime, two threads on
# this machine; Knot: udp-workers 2). dnsperf sends the same query file to both; ROUNDS rounds
# (default 3), interleaved, best of each compared.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CLIENTS="${2:-8}"
ROUNDS="${ROUNDS:-3}"
API=127.0.0.1:18590
DNS_PORT=18553
KNOT_PORT=18554
TOKEN=bench-admin-token-0123456789

command -v dnsperf >/dev/null || { echo "dnsperf is required: apt-get install dnsperf" >&2; exit 1; }
command -v knotd >/dev/null || { echo "knotd is required: apt-get install knot" >&2; exit 1; }
cargo build --release --quiet --bin httpdns

W="$(mktemp -d)"
cleanup() { kill "${HPID:-}" "${KPID:-}" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=127.0.0.1:$DNS_PORT HTTPDNS_UPSTREAMS=127.0.0.1:$KNOT_PORT \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn ./target/release/httpdns serve &
HPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
for i in $(seq 1 20); do
    put "nodes/n$i" "{\"ip\":\"1.1.1.$i\",\"pool\":\"edge\",\"isp\":\"telecom\",\"region\":\"beijing\",\"latency_ms\":$((i * 3)),\"load_pct\":$((i * 4)),\"bandwidth_mbps\":1000}"
done
put "domains/www.example.com" '{"pool":"edge","ttl":60,"max_answers":2}'

mkdir -p "$W/knot/run" "$W/knot/db" "$W/knot/zones"
cat >"$W/knot/zones/www.example.com.zone" <<'EOF'
$ORIGIN www.example.com.
$TTL 60
@ SOA ns.www.example.com. hostmaster.www.example.com. 1 3600 600 86400 60
@ NS ns.www.example.com.
@ A 1.1.1.1
@ A 1.1.1.2
EOF
cat >"$W/knot/zones/partner.example.zone" <<'EOF'
$ORIGIN partner.example.
$TTL 300
@ SOA ns.partner.example. hostmaster.partner.example. 1 3600 600 86400 60
@ NS ns.partner.example.
www A 9.9.9.1
www A 9.9.9.2
EOF
cat >"$W/knot/knot.conf" <<EOF
server:
    rundir: "$W/knot/run"
    listen: 127.0.0.1@$KNOT_PORT
    udp-workers: 2
    tcp-workers: 1
    background-workers: 1
database:
    storage: "$W/knot/db"
log:
  - target: stderr
    any: error
template:
  - id: default
    storage: "$W/knot/zones"
zone:
  - domain: www.example.com
    file: www.example.com.zone
  - domain: partner.example
    file: partner.example.zone
EOF
knotd -c "$W/knot/knot.conf" &
KPID=$!
for _ in $(seq 1 100); do dig +short @127.0.0.1 -p $KNOT_PORT www.example.com >/dev/null 2>&1 && break; sleep 0.1; done
echo "httpdns: $(dig +short @127.0.0.1 -p $DNS_PORT www.example.com | tr '\n' ' ')"
echo "knot:    $(dig +short @127.0.0.1 -p $KNOT_PORT www.example.com | tr '\n' ' ')"

echo "www.example.com A" >"$W/queries"
run() { # port -> qps
    dnsperf -s 127.0.0.1 -p "$1" -d "$W/queries" -l "$DURATION" -c "$CLIENTS" -T 1 -q 200 2>/dev/null |
        awk '/Queries per second/ {print $4}'
}
best_h=0; best_k=0
for r in $(seq 1 "$ROUNDS"); do
    h=$(run $DNS_PORT)
    k=$(run $KNOT_PORT)
    echo "round $r: httpdns $h qps, knot $k qps"
    awk "BEGIN{exit !($h > $best_h)}" && best_h=$h
    awk "BEGIN{exit !($k > $best_k)}" && best_k=$k
done
awk -v h="$best_h" -v k="$best_k" 'BEGIN { printf "UDP www.example.com A: httpdns %.0f qps vs Knot %.0f qps: ratio %.3f\n", h, k, h / k }'

command -v wrk >/dev/null || { echo "wrk is required for the /d part: apt-get install wrk" >&2; exit 1; }
echo
echo "sample managed: $(curl -s "http://$API/d?dn=www.example.com&ip=1.0.1.7")"
echo "sample upstream: $(curl -s -D - "http://$API/d?dn=www.partner.example&ip=1.0.1.7" | tr -d '\r' | grep -iE '^x-httpdns-status|^[0-9]')"
rps() { wrk -t1 -c64 -d"${DURATION}s" "$1" | awk '/^Requests\/sec/ {print $2}'; }
best_m=0; best_u=0
for r in $(seq 1 "$ROUNDS"); do
    m=$(rps "http://$API/d?dn=www.example.com&ip=1.0.1.7")
    u=$(rps "http://$API/d?dn=www.partner.example&ip=1.0.1.7")
    echo "round $r: /d managed $m req/s, /d upstream (cached) $u req/s"
    awk "BEGIN{exit !($m > $best_m)}" && best_m=$m
    awk "BEGIN{exit !($u > $best_u)}" && best_u=$u
done
awk -v m="$best_m" -v u="$best_u" 'BEGIN { printf "/d: upstream (cached) %.0f req/s vs managed %.0f req/s: ratio %.3f\n", u, m, u / m }'

#!/usr/bin/env bash
# Client events: batches accepted per second, and events per CPU-second of the server, with
# the aggregation on (POST /app/events: parse, validate, classify, count, flush every 10 s).
#
#   scripts/bench-events.sh [duration_seconds] [rounds]
#
# httpdns and nginx are pinned to core 0 (httpdns: one runtime worker; nginx: one worker);
# wrk runs on core 1 (-t1 -c16, keep-alive). The body is one batch of
# BATCH events (default 50: 44 sampled requests, 4 fallbacks, a host switch, a LocalDNS
# comparison), the same bytes to both. nginx answers `return 202` without reading anything
# into an application: the floor of an HTTP POST on this machine. Rounds alternate the two
# servers; the report is the median of per-round ratios with their spread, and httpdns's
# events per server CPU-second (utime+stime from /proc over the run).
#
# Needs wrk and nginx (apt-get install wrk nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-8}"
ROUNDS="${2:-5}"
BATCH="${BATCH:-50}"
API=127.0.0.1:18700
NGINX=127.0.0.1:18702
TOKEN=bench-admin-token-0123456789

# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk nginx-light util-linux curl" wrk nginx taskset curl
cargo build --release --quiet --bin httpdns

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" 2>/dev/null || true
    [ -f "$W/nginx.pid" ] && kill "$(cat "$W/nginx.pid")" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/data" "$W/nginx-tmp"
chmod 755 "$W"

cat >"$W/nginx.conf" <<EOC
worker_processes 1;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $W/nginx-tmp;
    client_max_body_size 2m;
    proxy_temp_path $W/nginx-tmp;
    fastcgi_temp_path $W/nginx-tmp;
    uwsgi_temp_path $W/nginx-tmp;
    scgi_temp_path $W/nginx-tmp;
    server {
        listen $NGINX;
        location /app/events { default_type application/json; return 202 '{"accepted":$BATCH,"stale":0}'; }
    }
}
EOC
taskset -c 0 nginx -c "$W/nginx.conf"

# The per-address limit is for floods from one client; the load generator is one address.
cat >"$W/httpdns.toml" <<EOC
[events]
rate_per_client = 1000000
burst = 1000000
EOC
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn \
    taskset -c 0 ./target/release/httpdns --config "$W/httpdns.toml" serve &
HPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
put "networks/127.0.0.0%2F8" '{"isp":"unicom","region":"shanghai"}'
put "nodes/u1" '{"ip":"2.2.2.1","pool":"edge","isp":"unicom","region":"shanghai"}'
put "domains/www.example.com" '{"pool":"edge","ttl":60}'
put "config/cdn" '{"mergeHostConfigs":[],"hostListConfig":[{"host":"cdn1.example.com","rate":1},{"host":"cdn2.example.com","rate":1}],"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[]}'

# One batch, as the client library sends it.
python3 - "$BATCH" "$W/body.json" <<'EOP'
import json, sys, time
n, path = int(sys.argv[1]), sys.argv[2]
now = int(time.time())
ev = []
for i in range(n):
    k = i % 25
    if k < 22:
        ev.append({"event": "request", "timestamp": now, "host": "cdn1.example.com", "outcome": "ok",
                   "latency_ms": 40 + i, "sample_rate": 0.01, "convergence": True})
    elif k < 24:
        ev.append({"event": "dns_fallback", "timestamp": now, "host": "www.example.com",
                   "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120, "convergence": True})
    elif i % 50 == 24:
        ev.append({"event": "host_switch", "timestamp": now, "from": "cdn1.example.com",
                   "to": "cdn2.example.com", "reason": "5xx", "duration_ms": 35, "convergence": True})
    else:
        ev.append({"event": "localdns_compare", "timestamp": now, "host": "www.example.com",
                   "localdns": ["2.2.2.1"], "httpdns": ["2.2.2.1"], "convergence": True})
json.dump({"events": ev}, open(path, "w"), separators=(",", ":"))
EOP
cat >"$W/post.lua" <<EOL
local f = io.open("$W/body.json", "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
EOL
echo "batch: $BATCH events, $(wc -c <"$W/body.json") bytes"
echo "httpdns: $(curl -s -X POST --data-binary @"$W/body.json" "http://$API/app/events")   nginx: $(curl -s -X POST --data-binary @"$W/body.json" "http://$NGINX/app/events")"

run() { # url -> "req_per_s non_2xx"
    taskset -c 1 wrk -t1 -c16 -d"${DURATION}s" -s "$W/post.lua" "$1" >"$W/wrk.out"
    awk '/^Requests\/sec/ {r=$2} /Non-2xx/ {e=$NF} END {printf "%s %d\n", r, e}' "$W/wrk.out"
}

echo
echo "== POST /app/events, $BATCH events a batch, wrk -t1 -c16 on core 1; $ROUNDS rounds of ${DURATION}s"
: >"$W/ratio"; : >"$W/eff"
for r in $(seq 1 "$ROUNDS"); do
    c0=$(cpu "$HPID")
    read -r h herr <<<"$(run "http://$API/app/events")"
    c1=$(cpu "$HPID")
    read -r n nerr <<<"$(run "http://$NGINX/app/events")"
    [ "$herr" = 0 ] || { echo "httpdns answered $herr non-2xx" >&2; exit 1; }
    awk -v h="$h" -v n="$n" -v b="$BATCH" -v c=$((c1 - c0)) -v hz="$HZ" -v d="$DURATION" -v r="$r" 'BEGIN {
        printf "  round %d: httpdns %.0f batches/s = %.0f events/s (%.0f events per server CPU-second), nginx %.0f req/s\n",
            r, h, h * b, h * b * d / (c / hz), n }'
    awk -v h="$h" -v n="$n" 'BEGIN {print h / n}' >>"$W/ratio"
    awk -v h="$h" -v b="$BATCH" -v c=$((c1 - c0)) -v hz="$HZ" -v d="$DURATION" 'BEGIN {print h * b * d / (c / hz)}' >>"$W/eff"
done
ratios "batches/s, httpdns / nginx return 202" <"$W/ratio"
medians "events per server CPU-second (httpdns)" <"$W/eff"
V=$(curl -s -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/events/summary?window=10m")
echo "fleet view after the run: $(echo "$V" | python3 -c '
import json, sys
r = json.load(sys.stdin)["rates"][0]
print("%s/%s: requests %.0f (weighted), fallbacks %.0f" % (r["isp"], r["region"], r["requests"], r["fallbacks"]))
')"
echo "command: scripts/bench-events.sh $DURATION $ROUNDS (BATCH=$BATCH)"

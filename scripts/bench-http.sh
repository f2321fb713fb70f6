#!/usr/bin/env bash
# An httpdns endpoint against a bare axum handler, in one run, with the ratio.
#
#   scripts/bench-http.sh d      [duration_seconds] [connections]   # /d for a managed domain
#   scripts/bench-http.sh config [duration_seconds] [connections]   # config GET answered 304
#
# Needs wrk (apt-get install wrk). Both servers are release builds on the same runtime shape
# and send the same bytes (see examples/bare_axum.rs); wrk runs one thread and sends the same
# request to both, so on a 2-core machine client and server share the cores the same way for
# both targets. Each target is measured ROUNDS times (default 3), interleaved, and the best
# run of each is compared.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${1:-d}"
DURATION="${2:-10}"
CONNS="${3:-64}"
API=127.0.0.1:18480
BARE=127.0.0.1:18481
TOKEN=bench-admin-token-0123456789

command -v wrk >/dev/null || { echo "wrk is required: apt-get install wrk" >&2; exit 1; }
cargo build --release --quiet --bin httpdns --example bare_axum

DATA="$(mktemp -d)"
cleanup() { kill "${HPID:-}" "${BPID:-}" 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR="$DATA" \
HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn ./target/release/httpdns serve &
HPID=$!
./target/release/examples/bare_axum $BARE 2>/dev/null &
BPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && curl -s "http://$BARE/" >/dev/null && break; sleep 0.1; done

put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
HEADER=()
case "$TARGET" in
d)
  for i in $(seq 1 20); do
    isp=$([ $((i % 2)) = 0 ] && echo telecom || echo unicom)
    put "nodes/n$i" "{\"ip\":\"1.1.1.$i\",\"pool\":\"edge\",\"isp\":\"$isp\",\"region\":\"beijing\",\"latency_ms\":$((i * 3)),\"load_pct\":$((i * 4)),\"bandwidth_mbps\":1000}"
  done
  put "networks/1.0.1.0%2F24" '{"isp":"telecom","region":"beijing"}'
  put "domains/www.example.com" '{"pool":"edge","ttl":60,"max_answers":2}'
  REQUEST="d?dn=www.example.com&ip=1.0.1.7&ttl=1"
  echo "sample answer: $(curl -s "http://$API/$REQUEST")"
  ;;
config)
  put "config/cdn" '{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":1}],
    "hostListConfig":[{"host":"cdn.xxx.com","rate":1},{"host":"cdn-bak.xxx.com","rate":1}],
    "reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":["223.5.5.5"]}'
  REQUEST="app/config-center/module-config?module=cdn"
  HEADER=(-H 'If-None-Match: "1"')
  echo "sample answer: $(curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: "1"' "http://$API/$REQUEST")"
  ;;
*) echo "unknown target $TARGET (d or config)" >&2; exit 2 ;;
esac

run() { # url -> "rps p99_ms"
  local out rps p99
  out="$(wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "${HEADER[@]}" "$1")"
  rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
  p99="$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v=v*1000}; print v}' <<<"$out")"
  echo "$rps $p99"
}
best() { awk '{ if ($1 > r) { r = $1; p = $2 } } END { print r, p }'; }

H_URL="http://$API/$REQUEST"
B_URL="http://$BARE/$REQUEST"
wrk -t1 -c"$CONNS" -d2s "${HEADER[@]}" "$H_URL" >/dev/null; wrk -t1 -c"$CONNS" -d2s "${HEADER[@]}" "$B_URL" >/dev/null  # warm-up
: > "$DATA/bare"; : > "$DATA/httpdns"
for _ in $(seq 1 "${ROUNDS:-3}"); do
  run "$B_URL" >> "$DATA/bare"
  run "$H_URL" >> "$DATA/httpdns"
done
echo "runs (requests/s p99_ms): bare: $(tr '\n' ' ' < "$DATA/bare")| httpdns: $(tr '\n' ' ' < "$DATA/httpdns")"
read -r BR BP <<<"$(best < "$DATA/bare")"
read -r HR HP <<<"$(best < "$DATA/httpdns")"
printf '%-32s %12s %10s\n' target "requests/s" "p99 ms"
printf '%-32s %12.0f %10.3f\n' "bare axum (ceiling)" "$BR" "$BP"
printf '%-32s %12.0f %10.3f\n' "httpdns $TARGET" "$HR" "$HP"
awk -v h="$HR" -v b="$BR" -v t="$TARGET" 'BEGIN { printf "ratio httpdns %s : bare = %.3f\n", t, h / b }'

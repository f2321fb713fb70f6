#!/usr/bin/env bash
# /d throughput with live scoring running (1,000 health-checked nodes, 100 feedback reports/s)
# against the same server without it, interleaved in one run, with the ratio.
#
#   scripts/bench-live.sh [duration_seconds] [connections]
#
# Needs wrk and python3 (set-up only). The 1,000 nodes are 127.0.x.y addresses; one listener on 0.0.0.0
# accepts the TCP health checks for all of them (examples/probe_sink.rs: accept and close on
# one thread, about what a remote node's kernel would spend); examples/feedback_load.rs posts
# the feedback (one thread, one kept-alive connection), standing in for the apps.
# Checks use the default interval of 2 s: 500 probes/s. ROUNDS (default 12) rounds, each one
# run with and one without, next to each other, in alternating order; the headline is the
# median of the rounds' ratios (single runs on this shared VM move by 5-10%, so a best-of
# comparison says more about luck than about the server); best runs are printed too.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNS="${2:-64}"
API=127.0.0.1:18480
TARGET_PORT=18483
TOKEN=bench-admin-token-0123456789

command -v wrk >/dev/null || { echo "wrk is required: apt-get install wrk" >&2; exit 1; }
cargo build --release --quiet --bin httpdns --example probe_sink --example feedback_load

DATA="$(mktemp -d)"
cleanup() { kill "${HPID:-}" "${BPID:-}" "${FPID:-}" 2>/dev/null || true; rm -rf "$DATA"; }
trap cleanup EXIT

cat > "$DATA/httpdns.toml" <<TOML
[live]
refresh_interval_ms = 1000
feedback_rate_per_client = 1000
feedback_burst = 1000
probe_workers = 64
TOML
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR="$DATA" \
HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_ALLOW_PRIVATE_NODE_IPS=true RUST_LOG=warn \
  ./target/release/httpdns serve --config "$DATA/httpdns.toml" &
HPID=$!
./target/release/examples/probe_sink 0.0.0.0:$TARGET_PORT 2>/dev/null &
BPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done

python3 - "$API" "$TOKEN" <<'PY'
import json, sys, http.client
api, token = sys.argv[1], sys.argv[2]
c = http.client.HTTPConnection(api)
def put(path, body):
    c.request("PUT", path, json.dumps(body), {"Authorization": "Bearer " + token})
    r = c.getresponse(); r.read()
    assert r.status in (200, 201), (path, r.status)
isps, regions = ["telecom", "unicom", "mobile"], ["beijing", "shanghai", "guangdong", "sichuan"]
for i in range(1000):
    put(f"/admin/v1/nodes/n{i}", {"ip": f"127.0.{i // 250 + 1}.{i % 250 + 1}", "pool": "edge",
        "isp": isps[i % 3], "region": regions[i % 4], "latency_ms": i % 97, "load_pct": i % 100,
        "bandwidth_mbps": 100 + i % 900})
put("/admin/v1/networks/1.0.1.0%2F24", {"isp": "telecom", "region": "beijing"})
put("/admin/v1/networks/127.0.0.0%2F8", {"isp": "unicom", "region": "shanghai"})
put("/admin/v1/domains/www.example.com", {"pool": "edge", "ttl": 60, "max_answers": 4})
PY

checks() { # on|off
  local body='{}'
  [ "$1" = on ] && body="{\"health_check\":{\"kind\":\"tcp\",\"port\":$TARGET_PORT,\"interval_ms\":2000,\"timeout_ms\":1000,\"healthy_threshold\":2,\"unhealthy_threshold\":3}}"
  curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/pools/edge" -d "$body" >/dev/null
}
feedback_on() { # 10 requests/s of 10 reports: 100 reports/s
  ./target/release/examples/feedback_load "$API" 100 10 &
  FPID=$!
}
feedback_off() { [ -n "${FPID:-}" ] && { kill "$FPID" 2>/dev/null || true; wait "$FPID" 2>/dev/null || true; }; FPID=; }

URL="http://$API/d?dn=www.example.com&ip=1.0.1.7&ttl=1"
run() {
  local out
  out="$(${PIN:-} wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$URL")"
  echo "$(awk '/Requests\/sec/ {print $2}' <<<"$out") $(awk '$1=="99%" {print $2}' <<<"$out")"
}
wrk -t1 -c"$CONNS" -d2s "$URL" >/dev/null
: > "$DATA/off"; : > "$DATA/on"
off_run() { checks off; sleep 1; run >> "$DATA/off"; }
on_run() {
  # LIVE_PARTS=checks or feedback measures one part alone.
  [ "${LIVE_PARTS:-both}" != feedback ] && checks on
  [ "${LIVE_PARTS:-both}" != checks ] && feedback_on
  sleep 3
  run >> "$DATA/on"
  feedback_off
}
# Rounds alternate the order (off, on, then on, off: ABBA), so a drift of the machine's speed
# during the run weighs on both sides alike.
for r in $(seq 1 "${ROUNDS:-12}"); do
  if [ $((r % 2)) = 1 ]; then off_run; on_run; else on_run; off_run; fi
done
PROBES=$(curl -s "http://$API/metrics" | awk '/^httpdns_health_probes_total/ {s += $2} END {print s + 0}')
FEEDBACK=$(curl -s "http://$API/metrics" | awk '/^httpdns_feedback_reports_total/ {s += $2} END {print s + 0}')
best() { awk '{ if ($1 > r) { r = $1; p = $2 } } END { print r, p }'; }
echo "runs (requests/s p99): without: $(tr '\n' ' ' < "$DATA/off")| with: $(tr '\n' ' ' < "$DATA/on")"
echo "health probes run: $PROBES, feedback reports received: $FEEDBACK"
read -r OR OP <<<"$(best < "$DATA/off")"
read -r NR NP <<<"$(best < "$DATA/on")"
printf '%-40s %12s %10s\n' target "requests/s" "p99"
printf '%-40s %12.0f %10s\n' "/d, live scoring off" "$OR" "$OP"
printf '%-40s %12.0f %10s\n' "/d, 1000 nodes probed + 100 reports/s" "$NR" "$NP"
awk -v n="$NR" -v o="$OR" 'BEGIN { printf "ratio with : without = %.3f (best run of each)\n", n / o }'
# The median of each side too: one lucky run cannot make or break it.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
MO=$(cut -d' ' -f1 "$DATA/off" | median)
MN=$(cut -d' ' -f1 "$DATA/on" | median)
awk -v n="$MN" -v o="$MO" 'BEGIN { printf "median of each side: without %.0f, with %.0f; ratio %.3f\n", o, n, n / o }'
# Each round's two runs are next to each other in time; the median of the rounds' ratios is
# the figure least moved by the machine's drift and by single runs.
RATIOS=$(paste -d' ' <(cut -d' ' -f1 "$DATA/on") <(cut -d' ' -f1 "$DATA/off") | awk '{ printf "%.3f\n", $1 / $2 }')
echo "per-round ratios: $(tr '\n' ' ' <<<"$RATIOS")"
echo "median of per-round ratios: $(median <<<"$RATIOS") (the headline figure)"

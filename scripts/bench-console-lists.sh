#!/usr/bin/env bash
# The console's lists with 100,000 nodes (written straight into a fresh SQLite store): the
# first page, a page deep in the list, a filter that matches (pool-499: 200 nodes), a filter
# that matches nothing (scans every row), and the overview. Best of 3 each, with curl. The
# server is pinned to core 0 and curl to core 1, as in the other scripts.
#
#   scripts/bench-console-lists.sh      # needs python3 and curl; builds nothing: run
#                                       # `cargo build --release --bin httpdns` first
set -euo pipefail
cd /work/main
W=$(mktemp -d); API=127.0.0.1:18495; TOKEN=bench-admin-token-0123456789
mkdir -p $W/data
# Create the schema with a first start, stop, insert rows, start again.
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR=$W/data HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn ./target/release/httpdns migrate
python3 - "$W/data/httpdns.db" <<'EOP'
import sqlite3, sys, json, time
db = sqlite3.connect(sys.argv[1])
now = int(time.time() * 1000)
rows = []
for i in range(100_000):
    isp = ["telecom", "unicom", "mobile"][i % 3]
    body = json.dumps({"ip": f"1.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}", "pool": f"pool-{i % 500}", "isp": isp, "region": f"region-{i % 34}",
                       "bandwidth_mbps": 1000.0, "load_pct": 20.0, "latency_ms": 10.0, "enabled": True}, separators=(",", ":"))
    rows.append(("node", f"node-{i:06d}", body, i + 1, now))
db.executemany("INSERT INTO resources (kind, name, body, revision, updated_at) VALUES (?, ?, ?, ?, ?)", rows)
db.execute("UPDATE store_meta SET revision = 100000")
db.commit()
EOP
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR=$W/data HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn taskset -c 0 ./target/release/httpdns serve &
P=$!
trap 'kill $P; rm -rf $W' EXIT
for _ in $(seq 1 300); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
t() { taskset -c 1 curl -s -o /dev/null -w "%{time_total}" -H "Authorization: Bearer $TOKEN" "http://$API$1"; }
for path in "/admin/v1/nodes?limit=50" "/admin/v1/nodes?limit=50&after=node-050000" "/admin/v1/nodes?limit=50&q=pool-499" "/admin/v1/nodes?limit=50&q=no-such-text" "/admin/v1/overview"; do
  best=9; for _ in 1 2 3; do x=$(t "$path"); best=$(python3 -c "print(min($best,$x))"); done
  echo "$path: best of 3 ${best}s"
done
curl -s -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/overview" | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"])'
echo "command: scripts/bench-console-lists.sh"

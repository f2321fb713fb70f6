#!/usr/bin/env bash
# Growth: `/d` with 100,000 nodes and 1,000 / 100,000 / 1,000,000 managed names.
#
#   scripts/bench-growth.sh [duration_seconds] [sizes...]     # default: 10 1000 100000 1000000
#
# For each size, a fresh SQLite store is written directly (100,000 nodes in 500 pools, the
# names spread over the pools, one operator network), then `httpdns serve` starts pinned to
# core 0 and the script reports:
# * start to ready (load every row, build the first snapshot) and the snapshot build time the
#   server exports (`httpdns_snapshot_build_seconds`);
# * resident memory (VmRSS) when ready and after the load;
# * `/d` throughput and p99 with wrk on core 1 (`-t1 -c64`), each request a random name of the
#   set (a Lua script), so the answer path touches the whole table;
# * a change to one node reaching answers: the time from sending `PUT /admin/v1/nodes/...`
#   (disabling the node that `/d` answers first for a probe name) until `/d` no longer answers
#   it, and back (enabling it until `/d` answers it again), CHANGES times (default 5), from one
#   client on kept connections. The PUT returns once the new snapshot is swapped in, so this
#   includes the store's write and the rebuild; answering never pauses meanwhile (the old
#   snapshot serves until the swap).
#
# PROFILE=P builds httpdns with cargo profile P (default release; `pgo`: the shipped build);
# HTTPDNS_BIN=PATH measures that binary instead (an A/B of two builds).
#
# Needs wrk, curl, python3 and taskset; builds httpdns first.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
shift || true
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1000 100000 1000000)
API=127.0.0.1:18780
TOKEN=bench-admin-token-0123456789
NODES=100000
POOLS=500

# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk curl python3 util-linux" wrk curl python3 taskset
build_httpdns "${PROFILE:-release}"

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
now_ms() { date +%s%3N; }

for N in "${SIZES[@]}"; do
    rm -rf "$W/data"
    mkdir -p "$W/data"
    env_common=(HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off
        HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn)
    env "${env_common[@]}" "$HTTPDNS_BIN" migrate >/dev/null
    python3 - "$W/data/httpdns.db" "$N" "$NODES" "$POOLS" <<'EOP'
import json, sqlite3, sys, time
db, n, nodes, pools = sqlite3.connect(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
now = int(time.time() * 1000)
rev = 0
def rows():
    global rev
    for i in range(nodes):
        rev += 1
        isp = ("telecom", "unicom", "mobile")[i % 3]
        body = {"ip": f"1.{(i >> 14) & 255}.{(i >> 6) & 255}.{((i & 63) << 2) + 1}", "pool": f"pool-{i % pools}",
                "isp": isp, "region": f"region-{i % 34}", "bandwidth_mbps": 1000.0,
                "load_pct": float(i % 90), "latency_ms": float(5 + i % 50), "enabled": True}
        yield ("node", f"node-{i:06d}", json.dumps(body, separators=(",", ":")), rev, now)
    for i in range(n):
        rev += 1
        yield ("domain", f"d{i}.example.com", json.dumps({"pool": f"pool-{i % pools}", "ttl": 60, "max_answers": 4}), rev, now)
    rev += 1
    yield ("network", "1.0.1.0/24", json.dumps({"isp": "telecom", "region": "region-1"}), rev, now)
db.executemany("INSERT INTO resources (kind, name, body, revision, updated_at) VALUES (?, ?, ?, ?, ?)", rows())
db.execute("UPDATE store_meta SET revision = ?", (rev,))
db.commit()
EOP
    t0=$(now_ms)
    env "${env_common[@]}" taskset -c 0 "$HTTPDNS_BIN" serve &
    HPID=$!
    ready=
    for _ in $(seq 1 1200); do
        if curl -sf "http://$API/readyz" >/dev/null 2>&1; then ready=1; break; fi
        sleep 0.1
    done
    [ -n "$ready" ] || { echo "not ready within 120 s" >&2; exit 1; }
    t1=$(now_ms)
    build=$(curl -s "http://$API/metrics" | awk '/^httpdns_snapshot_build_seconds / {print $2}')
    rss_ready=$(rss_mib "$HPID")

    cat >"$W/names.lua" <<EOL
math.randomseed(42)
request = function()
  return wrk.format(nil, "/d?dn=d" .. math.random(0, $N - 1) .. ".example.com&ip=1.0.1.7")
end
EOL
    taskset -c 1 wrk -t1 -c64 -d2s -s "$W/names.lua" "http://$API" >/dev/null # warm-up
    out=$(taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" --latency -s "$W/names.lua" "http://$API")
    rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    rss_load=$(rss_mib "$HPID")

    # Node changes reaching answers: disable the first node /d answers for a probe name and time
    # until /d stops answering it, then enable it again and time until /d answers it again;
    # CHANGES times each. The client keeps one connection for the PUTs and one for the probes,
    # so the times hold no process starts or handshakes. The first change after the load is
    # reported apart: it also pays for faulting in memory the allocator returned meanwhile.
    changes=$(python3 - "$API" "$TOKEN" "$NODES" "${CHANGES:-5}" <<'EOP'
import http.client, json, sys, time
api, token, nodes, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
host, port = api.split(":")
admin, probe = http.client.HTTPConnection(host, int(port)), http.client.HTTPConnection(host, int(port))
def get(conn, path, headers={}):
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    return r.status, r.read().decode()
def put(path, body):
    admin.request("PUT", path, body=body, headers={"Authorization": f"Bearer {token}"})
    r = admin.getresponse()
    r.read()
    assert r.status == 200, r.status
q = "/d?dn=d7.example.com&ip=1.0.1.7"
first = get(probe, q)[1].split(";")[0].split(",")[0]
a, b, c, d = (int(x) for x in first.split("."))
node = next(f"node-{i:06d}" for i in range(nodes) if ((i >> 14) & 255, (i >> 6) & 255, ((i & 63) << 2) + 1) == (b, c, d))
spec = json.loads(get(admin, f"/admin/v1/nodes/{node}", {"Authorization": f"Bearer {token}"})[1])
def change(enabled, answered):
    t0 = time.monotonic()
    put(f"/admin/v1/nodes/{node}", json.dumps({**spec, "enabled": enabled}))
    put_ms = (time.monotonic() - t0) * 1000
    for _ in range(100000):
        if (first in get(probe, q)[1]) == answered:
            return put_ms, (time.monotonic() - t0) * 1000
    sys.exit("the change never reached the answers")
out = []
for _ in range(rounds):
    off, on = change(False, False), change(True, True)
    out += [f"{off[1]:.1f}/{on[1]:.1f}"]
print(" ".join(out))
EOP
)
    rebuild=$(curl -s "http://$API/metrics" | awk '/^httpdns_snapshot_build_seconds / {print $2}')
    derived=$(curl -s "http://$API/metrics" | awk '/^httpdns_snapshot_builds_total\{kind="nodes"\}/ {print $2}')
    echo "names $N, nodes $NODES: ready in $((t1 - t0)) ms (first snapshot build ${build}s), RSS ${rss_ready} MiB ready, ${rss_load} MiB after load;" \
        "/d random names ${rps} req/s, p99 ${p99}; node changes to answers, disable/enable in ms: ${changes} (last rebuild ${rebuild}s; ${derived} of them rebuilt the node and its pool only)"
    kill "$HPID"
    wait "$HPID" 2>/dev/null || true
    HPID=
done
echo "command: ${GIVEN_BIN:+HTTPDNS_BIN=$GIVEN_BIN }${PROFILE:+PROFILE=$PROFILE }scripts/bench-growth.sh $DURATION ${SIZES[*]}"

#!/usr/bin/env bash
# /d throughput with live scoring running (1,000 health-checked nodes, 100 feedback reports/s)
# against the same server without it, interleaved in one run:
#
#   scripts/bench-live.sh [duration_seconds] [connections]
#   ROUNDS=N (default 5)   LIVE_PARTS=checks|feedback (one part alone; default both)
#
# What: requests per second of `GET /d?dn=www.example.com&ip=1.0.1.7&ttl=1` with live scoring
# on and off, and requests per server CPU-second. "On" is a TCP health check of every node at
# the default 2 s interval (500 probes/s) plus 100 feedback reports/s, folded into the
# snapshot every second (refresh_interval_ms 1000); "off" is the same server with the pool's
# health check removed and no feedback.
#
# How: `httpdns serve` is pinned to core 0 (`taskset -c 0`): its runtime sizes itself from the
# CPUs it may use, so it has one worker, and its health-check thread shares that core, as it
# would share a production server's. wrk runs on core 1 (`taskset -c 1 wrk -t1 -cCONNS`). The
# 1,000 nodes are 127.0.x.y addresses; one listener on 0.0.0.0 accepts the TCP checks for all
# of them (examples/probe_sink.rs: accept and close on one thread, about what a remote node's
# kernel would spend; it must bind 0.0.0.0 to answer every 127.x.y.z, on a private port), and
# examples/feedback_load.rs posts the feedback (one thread, one kept-alive connection) to
# 127.0.0.1, standing in for the apps. Both stand in for other machines, so they run on core 1
# with the load generator (about 5 and 1 ms of CPU a second), not on the server's core.
# Each round has one run with and one without, next to each other, in alternating order
# (off, on, then on, off: a drift of the machine's speed weighs on both sides alike); the
# report is each round's raw numbers and the median of the per-round ratios with / without,
# with their min and max. Server CPU is utime+stime of the process (all threads, the checker
# included) from /proc/PID/stat over the run; "busy" is that over the run time.
#
# Needs wrk, curl, taskset and python3 (set-up only) (apt-get install wrk curl util-linux
# python3), and cargo to build.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNS="${2:-64}"
ROUNDS="${ROUNDS:-5}"
LIVE_PARTS="${LIVE_PARTS:-both}"
API=127.0.0.1:18480
TARGET_PORT=18483
TOKEN=bench-admin-token-0123456789

case "$LIVE_PARTS" in both | checks | feedback) ;; *) echo "LIVE_PARTS is both, checks or feedback" >&2; exit 2 ;; esac
# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk curl util-linux python3" wrk curl taskset python3
cargo build --release --quiet --bin httpdns --example probe_sink --example feedback_load

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" "${BPID:-}" "${FPID:-}" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

cat >"$W/httpdns.toml" <<TOML
[live]
refresh_interval_ms = 1000
feedback_rate_per_client = 1000
feedback_burst = 1000
probe_workers = 64
TOML
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR="$W/data" \
HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_ALLOW_PRIVATE_NODE_IPS=true RUST_LOG=warn \
    taskset -c 0 ./target/release/httpdns serve --config "$W/httpdns.toml" &
HPID=$!
taskset -c 1 ./target/release/examples/probe_sink 0.0.0.0:$TARGET_PORT 2>/dev/null &
BPID=$!
ready=
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && { ready=1; break; }; sleep 0.1; done
[ -n "$ready" ] || { echo "httpdns did not come up within 10 s" >&2; exit 1; }

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
    taskset -c 1 ./target/release/examples/feedback_load "$API" 100 10 &
    FPID=$!
}
feedback_off() {
    if [ -n "${FPID:-}" ]; then kill "$FPID" 2>/dev/null || true; wait "$FPID" 2>/dev/null || true; fi
    FPID=
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
metric() { curl -s "http://$API/metrics" | awk -v m="$1" 'index($1, m) == 1 {s += $2} END {print s + 0}'; }

URL="http://$API/d?dn=www.example.com&ip=1.0.1.7&ttl=1"
echo "sample answer: $(curl -s "$URL")"
# One wrk run; appends "req_per_s p99_ms requests server_cpu_s" to the file named.
run() { # off|on
    local c0 c1 line
    c0=$(cpu "$HPID")
    taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$URL" >"$W/wrk.out"
    c1=$(cpu "$HPID")
    line=$(awk -v c=$((c1 - c0)) -v hz="$HZ" '
        /requests in/ {n = $1}
        /^Requests\/sec/ {r = $2}
        $1 == "99%" {v = $2; if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000} else if (v ~ /ms$/) {sub(/ms$/, "", v)} else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000}; p = v}
        END {if (r != "" && n > 0) printf "%s %s %d %.3f\n", r, (p == "" ? 0 : p), n, (c > 0 ? c : 1) / hz}' "$W/wrk.out")
    [ -n "$line" ] || { echo "wrk failed:" >&2; cat "$W/wrk.out" >&2; exit 1; }
    echo "$line" >>"$W/$1"
}
off_run() { checks off; sleep 1; run off; }
on_run() {
    [ "$LIVE_PARTS" != feedback ] && checks on
    [ "$LIVE_PARTS" != checks ] && feedback_on
    sleep 3
    run on
    feedback_off
}
show() { # "label" "req_per_s p99_ms requests server_cpu_s"
    awk -v l="$1" -v d="$DURATION" '{printf "%s %.0f req/s, p99 %.3f ms, server CPU %.2fs (busy %.0f%%), %.0f req per CPU-s",
        l, $1, $2, $4, 100 * $4 / d, $3 / $4}' <<<"$2"
}

taskset -c 1 wrk -t1 -c"$CONNS" -d2s "$URL" >/dev/null # warm-up
echo
echo "== /d with live scoring ($LIVE_PARTS) on and off; httpdns on core 0 (one runtime worker), wrk -t1 -c$CONNS on core 1"
echo "   $ROUNDS rounds of ${DURATION}s, each with one run of each, alternating order (off-on, on-off, ...)"
: >"$W/off"; : >"$W/on"; : >"$W/ratio"; : >"$W/eff"
p0=$(metric httpdns_health_probes_total); f0=$(metric httpdns_feedback_reports_total)
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then off_run; on_run; order="off, on"; else on_run; off_run; order="on, off"; fi
    o=$(tail -n1 "$W/off"); n=$(tail -n1 "$W/on")
    echo "  round $r ($order): $(show without "$o")"
    echo "             $(show "with   " "$n")"
    awk -v o="$o" -v n="$n" 'BEGIN {split(o, a, " "); split(n, b, " "); print b[1] / a[1]}' >>"$W/ratio"
    awk -v o="$o" -v n="$n" 'BEGIN {split(o, a, " "); split(n, b, " "); print (b[3] / b[4]) / (a[3] / a[4])}' >>"$W/eff"
done
PROBES=$(awk -v a="$(metric httpdns_health_probes_total)" -v b="$p0" 'BEGIN {printf "%.0f", a - b}')
FEEDBACK=$(awk -v a="$(metric httpdns_feedback_reports_total)" -v b="$f0" 'BEGIN {printf "%.0f", a - b}')
echo
echo "health probes run: $PROBES, feedback reports received: $FEEDBACK (during the measured rounds)"
echo "median of each side: without $(cut -d' ' -f1 "$W/off" | median) req/s, with $(cut -d' ' -f1 "$W/on" | median) req/s"
ratios "/d requests/s, with / without live scoring" <"$W/ratio"
ratios "/d requests per server CPU-second, with / without live scoring" <"$W/eff"
echo "command: ROUNDS=$ROUNDS LIVE_PARTS=$LIVE_PARTS scripts/bench-live.sh $DURATION $CONNS"

#!/usr/bin/env bash
# Plain DNS over UDP for a managed name: httpdns against Knot DNS and against hickory-server
# (scripts/hickory-bench: 0.26, an in-memory zone) serving an equivalent zone, in one run;
# then `/d` for a name resolved upstream and cached against `/d` for a managed name.
#
#   scripts/bench-dns.sh [duration_seconds] [clients] [outstanding]
#   ROUNDS=N (default 5), NAMES=N managed names queried (default 1000)
#   PROFILE=dist: httpdns built with the shipped binary's cargo profile (default release);
#   PROFILE=pgo: as deploy/Dockerfile builds it, that profile laid out by deploy/pgo/httpdns.profdata
#   HTTPDNS_BIN=PATH: measure that httpdns binary (an A/B of two builds against the same peers)
#   PERF=1: after the rounds, where each server's CPU goes under the same dnsperf load:
#   `perf record -e cpu-clock -g` of httpdns and of Knot (perf on core 1), the share of samples
#   in the kernel and in user space, and each one's hottest symbols (needs perf: linux-perf;
#   httpdns's own symbols need PROFILE=release, as the shipped build is stripped);
#   PERF_KEEP=DIR keeps the recordings there (DIR/perf.httpdns, DIR/perf.knot) for `perf report -i`
#
# What: 1. queries per second for `nI.bench.example A`, I = 1..NAMES in turn (no EDNS), over
# UDP, answered by httpdns (20 nodes, each of the NAMES managed domains answering two of them),
# by Knot DNS (a zone bench.example with the same two A records for every name) and by
# hickory-server (the same zone in its in-memory store), and queries per server CPU-second.
# 2. `/d` requests per second for www.partner.example (a Knot zone, httpdns's upstream:
# resolved once, then answered from httpdns's cache) against `/d` for the managed name.
#
# How: the servers are pinned to core 0 (`taskset -c 0`): httpdns's and hickory-server's tokio
# runtimes size themselves from the CPUs they may use, so each has one worker; Knot runs
# `udp-workers: 1`, `tcp-workers: 1`, `background-workers: 1`. The load generators run on
# core 1: `taskset -c 1 dnsperf -T 1 -c CLIENTS -q OUTSTANDING` (default -c 4 -q 500: four
# sockets and enough queries in flight that no server waits on the client between answers)
# and `taskset -c 1 wrk -t1 -c64`. Every round runs httpdns, Knot, then hickory-server (part 2:
# managed, then upstream) for DURATION each; the report is each round's raw numbers and the
# median of the per-round ratios with their min and max. Server CPU is utime+stime from
# /proc/PID/stat (fields 14 and 15, clock ticks; each server is one process, which counts all
# its threads) before and after each server's run, and queries per CPU-second are the queries
# dnsperf completed over that. One dnsperf on one core can saturate before a server does: then
# the servers show "busy" (CPU over the run time) well under 100% and queries per second
# compare the client's limit more than the servers; queries per server CPU-second compare what
# each answer costs the server either way, and are the figure to quote when busy is low.
#
# Needs dnsperf, knot (knotd) and dig, wrk, curl and taskset (apt-get install dnsperf knot
# bind9-dnsutils wrk curl util-linux), and cargo to build (hickory-server is built into
# target/hickory-bench, apart from the workspace).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CLIENTS="${2:-4}"
OUTSTANDING="${3:-500}"
ROUNDS="${ROUNDS:-5}"
NAMES="${NAMES:-1000}"
PROFILE="${PROFILE:-release}"
API=127.0.0.1:18590
DNS_PORT=18553
KNOT_PORT=18554
HICKORY_PORT=18555
TOKEN=bench-admin-token-0123456789

# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install dnsperf knot bind9-dnsutils wrk curl util-linux" dnsperf knotd dig wrk curl taskset
build_httpdns "$PROFILE"

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" "${KPID:-}" "${YPID:-}" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

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
{
    printf '$ORIGIN bench.example.\n$TTL 60\n'
    printf '@ SOA ns.bench.example. hostmaster.bench.example. 1 3600 600 86400 60\n@ NS ns.bench.example.\n'
    for i in $(seq 1 "$NAMES"); do printf 'n%d A 1.1.1.1\nn%d A 1.1.1.2\n' "$i" "$i"; done
} >"$W/knot/zones/bench.example.zone"
cat >"$W/knot/knot.conf" <<EOF
server:
    rundir: "$W/knot/run"
    listen: 127.0.0.1@$KNOT_PORT
    udp-workers: 1
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
  - domain: bench.example
    file: bench.example.zone
EOF
taskset -c 0 knotd -c "$W/knot/knot.conf" &
KPID=$!

# hickory-server, built apart from the workspace (a benchmark peer, not a dependency).
cargo build --release --quiet --manifest-path scripts/hickory-bench/Cargo.toml --target-dir target/hickory-bench
taskset -c 0 target/hickory-bench/release/hickory-bench $HICKORY_PORT "$NAMES" &
YPID=$!

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=127.0.0.1:$DNS_PORT HTTPDNS_UPSTREAMS=127.0.0.1:$KNOT_PORT \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn taskset -c 0 "$HTTPDNS_BIN" serve &
HPID=$!
ready=
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && { ready=1; break; }; sleep 0.1; done
[ -n "$ready" ] || { echo "httpdns did not come up within 10 s" >&2; exit 1; }
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
for i in $(seq 1 20); do
    put "nodes/n$i" "{\"ip\":\"1.1.1.$i\",\"pool\":\"edge\",\"isp\":\"telecom\",\"region\":\"beijing\",\"latency_ms\":$((i * 3)),\"load_pct\":$((i * 4)),\"bandwidth_mbps\":1000}"
done
put "domains/www.example.com" '{"pool":"edge","ttl":60,"max_answers":2}'
for i in $(seq 1 "$NAMES"); do put "domains/n$i.bench.example" '{"pool":"edge","ttl":60,"max_answers":2}'; done

answer() { # port -> the A records, sorted (nothing on an error: dig prints those with +short too)
    { dig +short +time=1 +tries=1 @127.0.0.1 -p "$1" www.example.com A 2>/dev/null || true; } |
        { grep -E '^[0-9]+(\.[0-9]+){3}$' || true; } | sort | tr '\n' ' '
}
for port in $KNOT_PORT $HICKORY_PORT $DNS_PORT; do
    ready=
    for _ in $(seq 1 50); do [ -n "$(answer "$port")" ] && { ready=1; break; }; sleep 0.1; done
    [ -n "$ready" ] || { echo "no answer for www.example.com A on port $port" >&2; exit 1; }
done
echo "httpdns: $(answer $DNS_PORT)"
echo "knot:    $(answer $KNOT_PORT)"
echo "hickory: $(answer $HICKORY_PORT)"

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

for i in $(seq 1 "$NAMES"); do echo "n$i.bench.example A"; done >"$W/queries"
# Every name answers on every server before the clock starts (the last one added last).
for port in $KNOT_PORT $HICKORY_PORT $DNS_PORT; do
    got=
    for _ in $(seq 1 50); do
        got=$({ dig +short +time=1 +tries=1 @127.0.0.1 -p "$port" "n$NAMES.bench.example" A 2>/dev/null || true; } | grep -c '^1\.1\.1\.' || true)
        [ "$got" = 2 ] && break
        sleep 0.1
    done
    [ "$got" = 2 ] || { echo "n$NAMES.bench.example A does not answer two records on port $port" >&2; exit 1; }
done
# One dnsperf run against a server; sets QPS, DONE (queries completed), LOST, CPU_S (server
# CPU seconds over the run).
dns_run() { # port pid
    local c0 c1
    c0=$(cpu "$2")
    taskset -c 1 dnsperf -s 127.0.0.1 -p "$1" -d "$W/queries" -l "$DURATION" -c "$CLIENTS" -T 1 -q "$OUTSTANDING" \
        >"$W/dnsperf.out" 2>"$W/dnsperf.err" || true
    c1=$(cpu "$2")
    read -r QPS DONE LOST < <(awk '
        /Queries completed:/ {d = $3}
        /Queries lost:/ {l = $3}
        /Queries per second:/ {q = $4}
        END {printf "%s %s %s\n", q, d, l}' "$W/dnsperf.out")
    [ -n "$QPS" ] && [ "${DONE:-0}" -gt 0 ] || { echo "dnsperf failed on port $1:" >&2; cat "$W/dnsperf.out" "$W/dnsperf.err" >&2; exit 1; }
    CPU_S=$(awk -v c=$((c1 - c0)) -v hz="$HZ" 'BEGIN {printf "%.3f", (c > 0 ? c : 1) / hz}')
}

echo
echo "== UDP nI.bench.example A, I = 1..$NAMES; servers on core 0, dnsperf -T 1 -c $CLIENTS -q $OUTSTANDING on core 1; $ROUNDS rounds of ${DURATION}s"
: >"$W/qps"; : >"$W/eff"; : >"$W/hq"; : >"$W/kq"; : >"$W/yqps"; : >"$W/yeff"; : >"$W/yq"
for r in $(seq 1 "$ROUNDS"); do
    dns_run $DNS_PORT "$HPID"
    h=$QPS hd=$DONE hl=$LOST hc=$CPU_S
    [ "$r" = 1 ] && echo "  httpdns: $(grep -E 'Response codes|Average packet size' "$W/dnsperf.out" | tr -s ' ' | tr '\n' ';')"
    dns_run $KNOT_PORT "$KPID"
    k=$QPS kd=$DONE kl=$LOST kc=$CPU_S
    [ "$r" = 1 ] && echo "  knot:    $(grep -E 'Response codes|Average packet size' "$W/dnsperf.out" | tr -s ' ' | tr '\n' ';')"
    dns_run $HICKORY_PORT "$YPID"
    y=$QPS yd=$DONE yl=$LOST yc=$CPU_S
    [ "$r" = 1 ] && echo "  hickory: $(grep -E 'Response codes|Average packet size' "$W/dnsperf.out" | tr -s ' ' | tr '\n' ';')"
    awk -v h="$h" -v y="$y" 'BEGIN {print h / y}' >>"$W/yqps"
    awk -v hd="$hd" -v hc="$hc" -v yd="$yd" -v yc="$yc" 'BEGIN {print (hd / hc) / (yd / yc)}' >>"$W/yeff"
    awk -v n="$yd" -v c="$yc" 'BEGIN {print n / c}' >>"$W/yq"
    awk -v r="$r" -v h="$h" -v hd="$hd" -v hl="$hl" -v hc="$hc" -v k="$k" -v kd="$kd" -v kl="$kl" -v kc="$kc" -v d="$DURATION" 'BEGIN {
        printf "  round %d: httpdns %.0f qps (%d lost), server CPU %.2fs (busy %.0f%%), %.0f queries per CPU-s\n",
            r, h, hl, hc, 100 * hc / d, hd / hc
        printf "           knot    %.0f qps (%d lost), server CPU %.2fs (busy %.0f%%), %.0f queries per CPU-s\n",
            k, kl, kc, 100 * kc / d, kd / kc }'
    awk -v y="$y" -v yd="$yd" -v yl="$yl" -v yc="$yc" -v d="$DURATION" 'BEGIN {
        printf "           hickory %.0f qps (%d lost), server CPU %.2fs (busy %.0f%%), %.0f queries per CPU-s\n",
            y, yl, yc, 100 * yc / d, yd / yc }'
    awk -v h="$h" -v k="$k" 'BEGIN {print h / k}' >>"$W/qps"
    awk -v hd="$hd" -v hc="$hc" -v kd="$kd" -v kc="$kc" 'BEGIN {print (hd / hc) / (kd / kc)}' >>"$W/eff"
    awk -v n="$hd" -v c="$hc" 'BEGIN {print n / c}' >>"$W/hq"
    awk -v n="$kd" -v c="$kc" 'BEGIN {print n / c}' >>"$W/kq"
done
echo
ratios "UDP queries per second, httpdns / Knot" <"$W/qps"
ratios "UDP queries per server CPU-second, httpdns / Knot" <"$W/eff"
ratios "UDP queries per second, httpdns / hickory-server" <"$W/yqps"
ratios "UDP queries per server CPU-second, httpdns / hickory-server" <"$W/yeff"
printf 'median queries per server CPU-second: httpdns %.0f, Knot %.0f, hickory-server %.0f\n' "$(median <"$W/hq")" "$(median <"$W/kq")" "$(median <"$W/yq")"

# Where a server's CPU goes under the rounds' load: kernel and user shares of perf's samples,
# then the hottest symbols (self time).
profile() { # name port pid
    taskset -c 1 dnsperf -s 127.0.0.1 -p "$2" -d "$W/queries" -l "$DURATION" -c "$CLIENTS" -T 1 -q "$OUTSTANDING" \
        >/dev/null 2>&1 &
    local load=$!
    sleep 1
    taskset -c 1 perf record -q -e cpu-clock -F 4999 -g -p "$3" -o "$W/perf.$1" -- sleep $((DURATION > 3 ? DURATION - 2 : 1)) \
        >/dev/null 2>&1
    wait "$load" || true
    [ -z "${PERF_KEEP:-}" ] || { mkdir -p "$PERF_KEEP" && cp "$W/perf.$1" "$PERF_KEEP/"; }
    perf report -i "$W/perf.$1" --stdio --no-children --sort dso 2>/dev/null |
        awk -v n="$1" '/^ +[0-9.]+%/ {v = $1; sub(/%/, "", v); if ($2 == "[kernel.kallsyms]") k += v; else u += v}
            END {printf "  %s: kernel %.1f%%, user space %.1f%% of samples\n", n, k, u}'
    perf report -i "$W/perf.$1" --stdio --no-children --sort dso,sym 2>/dev/null |
        awk '/^ +[0-9.]+%/ && n++ < 12 {print "    " $0}'
}
if [ -n "${PERF:-}" ]; then
    need "apt-get install linux-perf" perf
    echo
    echo "== profiles: perf record -e cpu-clock -F 4999 -g, the same dnsperf load, perf on core 1"
    profile httpdns $DNS_PORT "$HPID"
    profile knot $KNOT_PORT "$KPID"
fi

echo
echo "sample managed: $(curl -s "http://$API/d?dn=www.example.com&ip=1.0.1.7")"
echo "sample upstream: $(curl -s -D - "http://$API/d?dn=www.partner.example&ip=1.0.1.7" | tr -d '\r' | grep -iE '^x-httpdns-status|^[0-9]')"
# One wrk run; sets RPS.
wrk_run() { # url
    taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" "$1" >"$W/wrk.out"
    RPS=$(awk '/^Requests\/sec/ {print $2}' "$W/wrk.out")
    [ -n "$RPS" ] || { echo "wrk failed on $1:" >&2; cat "$W/wrk.out" >&2; exit 1; }
}
echo
echo "== /d, upstream name (cached) against managed name; httpdns on core 0, wrk -t1 -c64 on core 1; $ROUNDS rounds of ${DURATION}s"
: >"$W/d"
for r in $(seq 1 "$ROUNDS"); do
    wrk_run "http://$API/d?dn=www.example.com&ip=1.0.1.7"; m=$RPS
    wrk_run "http://$API/d?dn=www.partner.example&ip=1.0.1.7"; u=$RPS
    echo "  round $r: /d managed $m req/s, /d upstream (cached) $u req/s"
    awk -v m="$m" -v u="$u" 'BEGIN {print u / m}' >>"$W/d"
done
ratios "/d requests/s, upstream (cached) / managed" <"$W/d"
echo "command: ${GIVEN_BIN:+HTTPDNS_BIN=$GIVEN_BIN }ROUNDS=$ROUNDS NAMES=$NAMES PROFILE=$PROFILE${PERF:+ PERF=$PERF} scripts/bench-dns.sh $DURATION $CLIENTS $OUTSTANDING"

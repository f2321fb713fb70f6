#!/usr/bin/env bash
# An httpdns endpoint against a bare axum handler (examples/bare_axum.rs, and the same on
# mimalloc, examples/bare_axum_mimalloc.rs), in one run:
#
#   scripts/bench-http.sh d      [duration_seconds] [connections]   # /d for a managed domain
#   scripts/bench-http.sh config [duration_seconds] [connections]   # config GET answered 304
#   ROUNDS=N scripts/bench-http.sh ...                              # rounds (default 5)
#   PROFILE=dist scripts/bench-http.sh ...                          # cargo profile (default release)
#   PROFILE=pgo scripts/bench-http.sh ...                           # httpdns as shipped (dist + profile)
#
# What: requests per second of `httpdns serve` and of the bare axum server for the same
# request, and requests per server CPU-second. The bare server answers a constant response
# with the same bytes on the wire (status, header set, body; compared before measuring), so
# the ratio is the cost of httpdns's own work: routing, classifying the client, choosing nodes
# and formatting (/d), or looking up the module and comparing the ETag (config). The bare
# server runs twice: on the system allocator, as an axum server does by default ("bare"), and
# on mimalloc, which httpdns links ("bare-mi"): against the second the allocator is no
# difference, so that ratio is the stricter one.
#
# How: the servers are builds of one cargo profile (PROFILE: `release`, or `dist`, the shipped
# binary's, with fat LTO; or `pgo`: httpdns as deploy/Dockerfile builds it, `dist` laid out by
# deploy/pgo/httpdns.profdata, against peers built with `dist`), pinned to core 0
# (`taskset -c 0`). Each builds a multi-thread tokio runtime sized from the CPUs it may use, so each runs one worker: the same
# runtime shape. wrk runs on core 1 (`taskset -c 1 wrk -t1 -cCONNS --latency`, keep-alive).
# Every round runs httpdns, bare and bare-mi for DURATION each (after a 2 s warm-up of each);
# the report is each round's raw numbers and the median of the per-round ratios httpdns /
# bare and httpdns / bare-mi with their min and max. Server CPU is utime+stime of the server process (all
# threads) from /proc/PID/stat over the run; "busy" is that over the run time, near 100% when
# the server core (not the client) was the limit.
#
# d: 20 nodes, one operator network, www.example.com answering two nodes;
#    GET /d?dn=www.example.com&ip=1.0.1.7&ttl=1.
# config: one published module `cdn`; GET /app/config-center/module-config?module=cdn with
#    If-None-Match set to its ETag.
#
# Needs wrk, curl and taskset (apt-get install wrk curl util-linux), and cargo to build.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${1:-d}"
DURATION="${2:-10}"
CONNS="${3:-64}"
ROUNDS="${ROUNDS:-5}"
PROFILE="${PROFILE:-release}"
API=127.0.0.1:18480
BARE=127.0.0.1:18481
BARE_MI=127.0.0.1:18482
TOKEN=bench-admin-token-0123456789

case "$TARGET" in d | d-split | d-rules | config) ;; *) echo "unknown target $TARGET (d, d-split, d-rules or config)" >&2; exit 2 ;; esac
# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk curl util-linux" wrk curl taskset
build_httpdns "$PROFILE" --example bare_axum --example bare_axum_mimalloc

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" "${BPID:-}" "${MPID:-}" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=off HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off HTTPDNS_DATA_DIR="$W/data" \
HTTPDNS_ADMIN_TOKEN=$TOKEN RUST_LOG=warn taskset -c 0 "$HTTPDNS_BIN" serve &
HPID=$!
taskset -c 0 ./target/$PEER_PROFILE/examples/bare_axum $BARE 2>/dev/null &
BPID=$!
taskset -c 0 ./target/$PEER_PROFILE/examples/bare_axum_mimalloc $BARE_MI 2>/dev/null &
MPID=$!
ready=
for _ in $(seq 1 100); do
    if curl -sf "http://$API/readyz" >/dev/null && curl -s -o /dev/null "http://$BARE/d" && curl -s -o /dev/null "http://$BARE_MI/d"; then ready=1; break; fi
    sleep 0.1
done
[ -n "$ready" ] || { echo "servers did not come up within 10 s" >&2; exit 1; }

put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
HEADER=()
case "$TARGET" in
d | d-split | d-rules)
    # d-split and d-rules: the same 20 nodes in two pools of 10 (the same addresses' lengths,
    # so the same bytes on the wire), and the name decided by a 70/30 split between them, or
    # by three rules that do not match this client before its pool: the scheduling's cost.
    for i in $(seq 1 20); do
        isp=$([ $((i % 2)) = 0 ] && echo telecom || echo unicom)
        pool=edge ip="1.1.1.$i"
        [ "$TARGET" != d ] && [ "$i" -gt 10 ] && pool=edge2 ip="1.1.2.$((i - 10))"
        put "nodes/n$i" "{\"ip\":\"$ip\",\"pool\":\"$pool\",\"isp\":\"$isp\",\"region\":\"beijing\",\"latency_ms\":$((i * 3)),\"load_pct\":$((i * 4)),\"bandwidth_mbps\":1000}"
    done
    put "networks/1.0.1.0%2F24" '{"isp":"telecom","region":"beijing"}'
    case "$TARGET" in
    d) put "domains/www.example.com" '{"pool":"edge","ttl":60,"max_answers":2}' ;;
    d-split) put "domains/www.example.com" '{"split":[{"pool":"edge","weight":70},{"pool":"edge2","weight":30}],"ttl":60,"max_answers":2}' ;;
    d-rules) put "domains/www.example.com" '{"pool":"edge","rules":[{"match":{"isp":"mobile"},"pool":"edge2"},{"match":{"region":"shanghai"},"pool":"edge2"},{"match":{"app_version":">=9"},"pool":"edge2"}],"ttl":60,"max_answers":2}' ;;
    esac
    REQUEST="d?dn=www.example.com&ip=1.0.1.7&ttl=1"
    WANT=200
    ;;
config)
    put "config/cdn" '{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":1}],
      "hostListConfig":[{"host":"cdn.xxx.com","rate":1},{"host":"cdn-bak.xxx.com","rate":1}],
      "reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":["223.5.5.5"]}'
    REQUEST="app/config-center/module-config?module=cdn"
    ETAG=
    for _ in $(seq 1 50); do
        ETAG=$(curl -s -o /dev/null -D - "http://$API/$REQUEST" | tr -d '\r' | awk 'tolower($1) == "etag:" {print $2}')
        [ -n "$ETAG" ] && break
        sleep 0.1
    done
    [ -n "$ETAG" ] || { echo "the published module has no ETag after 5 s" >&2; exit 1; }
    HEADER=(-H "If-None-Match: $ETAG")
    WANT=304
    ;;
esac
H_URL="http://$API/$REQUEST"
B_URL="http://$BARE/$REQUEST"
M_URL="http://$BARE_MI/$REQUEST"
sleep 0.5 # the snapshot follows the store

# The same bytes on the wire from both (the Date value changes, not its length).
for who in httpdns:"$H_URL" bare:"$B_URL"; do
    : >"$W/body.${who%%:*}" # curl writes no file for an empty body (304)
    code=$(curl -s -D "$W/head.${who%%:*}" -o "$W/body.${who%%:*}" -w '%{http_code}' "${HEADER[@]}" "${who#*:}")
    [ "$code" = "$WANT" ] || { echo "${who%%:*} answered $code to $REQUEST, not $WANT" >&2; exit 1; }
done
headers() { tr -d '\r' <"$1" | awk -F': ' 'NR > 1 && NF {print tolower($1)}' | sort | tr '\n' ' '; }
echo "httpdns: $(wc -c <"$W/head.httpdns") header bytes, body '$(cat "$W/body.httpdns")'; headers: $(headers "$W/head.httpdns")"
echo "bare:    $(wc -c <"$W/head.bare") header bytes, body '$(cat "$W/body.bare")'; headers: $(headers "$W/head.bare")"
if ! cmp -s "$W/body.httpdns" "$W/body.bare" || [ "$(wc -c <"$W/head.httpdns")" != "$(wc -c <"$W/head.bare")" ]; then
    echo "WARNING: the two responses differ in bytes; update examples/bare_axum.rs to match" >&2
fi

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
# One wrk run against a server; sets RPS, P99 (ms), REQS, CPU_S (server CPU seconds), ERRS.
run() { # url pid
    local c0 c1
    c0=$(cpu "$2")
    taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "${HEADER[@]}" "$1" >"$W/wrk.out"
    c1=$(cpu "$2")
    read -r RPS P99 REQS ERRS < <(awk '
        /requests in/ {n = $1}
        /^Requests\/sec/ {r = $2}
        $1 == "99%" {v = $2; if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000} else if (v ~ /ms$/) {sub(/ms$/, "", v)} else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000}; p = v}
        /Non-2xx or 3xx/ {e += $NF}
        /Socket errors/ {for (i = 3; i <= NF; i++) {x = $i; sub(/,$/, "", x); if (x ~ /^[0-9]+$/) e += x}}
        END {printf "%s %s %d %d\n", r, (p == "" ? 0 : p), n, e}' "$W/wrk.out")
    [ -n "$RPS" ] && [ "$REQS" -gt 0 ] || { echo "wrk failed on $1:" >&2; cat "$W/wrk.out" >&2; exit 1; }
    CPU_S=$(awk -v c=$((c1 - c0)) -v hz="$HZ" 'BEGIN {printf "%.3f", (c > 0 ? c : 1) / hz}')
}

for url in "$H_URL" "$B_URL" "$M_URL"; do
    taskset -c 1 wrk -t1 -c"$CONNS" -d2s "${HEADER[@]}" "$url" >/dev/null # warm-up
done
echo
echo "== $TARGET: GET /$REQUEST ${HEADER[*]}"
echo "   servers on core 0 (one runtime worker each), wrk -t1 -c$CONNS on core 1; $ROUNDS rounds of ${DURATION}s"
echo "   bare: examples/bare_axum (system allocator); bare-mi: the same on mimalloc, httpdns's allocator"
: >"$W/ratio"; : >"$W/eff"; : >"$W/mratio"; : >"$W/meff"; : >"$W/hp99"; : >"$W/bp99"; : >"$W/mp99"
line() { # round label rps p99 reqs cpu errors
    awk -v r="$1" -v w="$2" -v x="$3" -v p="$4" -v n="$5" -v c="$6" -v e="$7" -v d="$DURATION" 'BEGIN {
        printf "  %-9s %-8s %.0f req/s, p99 %.3f ms, server CPU %.2fs (busy %.0f%%), %.0f req per CPU-s%s\n",
            r, w, x, p, c, 100 * c / d, n / c, (e ? sprintf(", %d errors", e) : "") }'
}
for r in $(seq 1 "$ROUNDS"); do
    run "$H_URL" "$HPID"
    h=$RPS hp=$P99 hn=$REQS hc=$CPU_S
    line "round $r:" httpdns "$RPS" "$P99" "$REQS" "$CPU_S" "$ERRS"
    run "$B_URL" "$BPID"
    b=$RPS bn=$REQS bc=$CPU_S
    line "" bare "$RPS" "$P99" "$REQS" "$CPU_S" "$ERRS"
    echo "$P99" >>"$W/bp99"
    run "$M_URL" "$MPID"
    line "" bare-mi "$RPS" "$P99" "$REQS" "$CPU_S" "$ERRS"
    echo "$P99" >>"$W/mp99"
    awk -v h="$h" -v b="$b" 'BEGIN {print h / b}' >>"$W/ratio"
    awk -v hn="$hn" -v hc="$hc" -v bn="$bn" -v bc="$bc" 'BEGIN {print (hn / hc) / (bn / bc)}' >>"$W/eff"
    awk -v h="$h" -v b="$RPS" 'BEGIN {print h / b}' >>"$W/mratio"
    awk -v hn="$hn" -v hc="$hc" -v bn="$REQS" -v bc="$CPU_S" 'BEGIN {print (hn / hc) / (bn / bc)}' >>"$W/meff"
    echo "$hp" >>"$W/hp99"
done
echo
ratios "$TARGET requests/s, httpdns / bare axum" <"$W/ratio"
ratios "$TARGET requests per server CPU-second, httpdns / bare axum" <"$W/eff"
ratios "$TARGET requests/s, httpdns / bare axum on mimalloc" <"$W/mratio"
ratios "$TARGET requests per server CPU-second, httpdns / bare axum on mimalloc" <"$W/meff"
echo "median p99: httpdns $(median <"$W/hp99") ms, bare $(median <"$W/bp99") ms, bare-mi $(median <"$W/mp99") ms"
echo "command: ROUNDS=$ROUNDS PROFILE=$PROFILE scripts/bench-http.sh $TARGET $DURATION $CONNS"

#!/usr/bin/env bash
# Profile-guided build of the shipped binary: the `dist` profile (fat LTO, one codegen unit),
# laid out by a profile of the requests it serves most.
#
#   scripts/pgo.sh            # train, merge, build: target/pgo/dist/httpdns
#   scripts/pgo.sh train      # only train and merge: deploy/pgo/httpdns.profdata
#   scripts/pgo.sh build      # only build from deploy/pgo/httpdns.profdata (trains if absent)
#   DURATION=N                # seconds of load per workload (default 5)
#
# Why: on `/d` and plain DNS the instruction count is no longer where httpdns loses time to
# its peers; how the hot code is laid out is (docs/benchmarks.md, "/d against a bare axum
# handler": one `#[inline(never)]` moved a timed run by 9%). LLVM lays code out from a profile
# when it has one: hot paths straight, cold ones out of the way.
#
# How: 1. an instrumented build (`-Cprofile-generate`, target/pgo-train); 2. that binary serves
# every hot path on loopback for DURATION seconds each: `/d` (one name, a batch, AAAA),
# `/resolve`, `/v2/d`, DNS over HTTPS (GET and POST), plain DNS over UDP and TCP (with and
# without EDNS client subnet), a config 304 and 200, mirror hits of 4 KiB and 1 MiB from a local
# origin (python3's http.server), `/app/events`, and over TLS: `/d` (HTTP/1.1 and h2), a mirror
# hit (HTTP/1.1), new and resumed handshakes, DNS over TLS; 3. `llvm-profdata merge` into
# deploy/pgo/httpdns.profdata; 4. the `dist` build with `-Cprofile-use` (target/pgo). A path
# the training never runs is laid out as cold, so every path the benchmarks measure is
# trained. deploy/Dockerfile uses deploy/pgo/httpdns.profdata when the build context has it.
#
# The profile is tied to the compiler's LLVM (rustc 1.95: LLVM 22): LLVM_PROFDATA names the
# merge tool, else llvm-profdata-22 (Debian: apt-get install llvm-22). A profile from older
# sources still builds: a function that changed since has no profile (LLVM matches functions
# by a hash of their control flow) and is laid out as without one.
#
# Training needs wrk, dnsperf, curl, openssl and python3 (apt-get install wrk dnsperf curl
# openssl python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-5}"
STEP="${1:-all}"
case "$STEP" in all | train | build) ;; *) echo "unknown step $STEP (train, build, or nothing for both)" >&2; exit 2 ;; esac
API=127.0.0.1:18690
MIRROR=127.0.0.1:18691
API_TLS=127.0.0.1:18693
MIRROR_TLS=127.0.0.1:18694
DNS_PORT=18653
DOT_PORT=18654
ORIGIN_PORT=18692
TOKEN=pgo-admin-token-0123456789
PROFDATA="$PWD/deploy/pgo/httpdns.profdata"

build() {
    echo "== optimised build (target/pgo)"
    RUSTFLAGS="-Cprofile-use=$PROFDATA" CARGO_TARGET_DIR=target/pgo \
        cargo build --profile dist --locked --quiet --bin httpdns
    echo "built target/pgo/dist/httpdns"
}
if [ "$STEP" = build ] && [ -f "$PROFDATA" ]; then
    build
    exit 0
fi

. scripts/lib-bench.sh
need "apt-get install wrk dnsperf curl openssl python3" wrk dnsperf curl openssl python3
LLVM_PROFDATA="${LLVM_PROFDATA:-$(command -v llvm-profdata-22 || true)}"
[ -n "$LLVM_PROFDATA" ] || { echo "llvm-profdata-22 is required (apt-get install llvm-22), or set LLVM_PROFDATA" >&2; exit 1; }

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" "${OPID:-}" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

echo "== instrumented build (target/pgo-train)"
# The profile directory is part of RUSTFLAGS, so it stays the same from run to run (cargo
# rebuilds everything when RUSTFLAGS change); the run's raw profiles are removed first.
RAW="$PWD/target/pgo-train/raw"
RUSTFLAGS="-Cprofile-generate=$RAW" CARGO_TARGET_DIR=target/pgo-train \
    cargo build --profile dist --locked --quiet --bin httpdns

rm -rf "$RAW"
echo "== training, ${DURATION}s a workload"
mkdir -p "$W/www/files" "$W/data"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$W/key.pem" \
    -out "$W/cert.pem" -days 2 -subj /CN=pgo.test -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
head -c 4096 /dev/urandom >"$W/www/files/4k.bin"
head -c 1048576 /dev/urandom >"$W/www/files/1m.bin"
python3 -m http.server "$ORIGIN_PORT" --bind 127.0.0.1 --directory "$W/www" >/dev/null 2>&1 &
OPID=$!
# The per-address limit on events is for floods from one client; the load generator is one.
printf '[events]\nrate_per_client = 1000000\nburst = 1000000\n' >"$W/httpdns.toml"
HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=$MIRROR HTTPDNS_DNS_ADDR=127.0.0.1:$DNS_PORT HTTPDNS_UPSTREAMS=off \
HTTPDNS_API_TLS_ADDR=$API_TLS HTTPDNS_MIRROR_TLS_ADDR=$MIRROR_TLS HTTPDNS_DOT_ADDR=127.0.0.1:$DOT_PORT \
HTTPDNS_TLS_CERT="$W/cert.pem" HTTPDNS_TLS_KEY="$W/key.pem" \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_ALLOW_LOCAL_ORIGINS=true RUST_LOG=warn \
LLVM_PROFILE_FILE="$RAW/httpdns-%p-%m.profraw" ./target/pgo-train/dist/httpdns --config "$W/httpdns.toml" serve &
HPID=$!
ready=
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && { ready=1; break; }; sleep 0.1; done
[ -n "$ready" ] || { echo "the instrumented httpdns did not come up within 10 s" >&2; exit 1; }

put() { curl -sS --fail-with-body -o "$W/put.out" -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" || { echo "PUT $1: $(cat "$W/put.out")" >&2; exit 1; }; }
for i in $(seq 1 30); do
    isp=$([ $((i % 2)) = 0 ] && echo telecom || echo unicom)
    ip=$([ "$i" -le 20 ] && echo "1.1.1.$i" || echo "2400:da00::$i")
    put "nodes/n$i" "{\"ip\":\"$ip\",\"pool\":\"edge\",\"isp\":\"$isp\",\"region\":\"beijing\",\"latency_ms\":$((i * 3)),\"load_pct\":$((i * 2)),\"bandwidth_mbps\":1000}"
done
put "networks/1.0.1.0%2F24" '{"isp":"telecom","region":"beijing"}'
put "domains/www.example.com" '{"pool":"edge","ttl":60,"max_answers":2}'
put "domains/img.example.com" '{"pool":"edge","ttl":60,"max_answers":2}'
for i in $(seq 1 1000); do put "domains/n$i.bench.example" '{"pool":"edge","ttl":60,"max_answers":2}'; done
put "accounts/100000" '{"secret":"pgo-training-secret-0123456789","rate_limit_qps":1000000}'
put "config/cdn" '{"mergeHostConfigs":[{"host":"image.xxx.com","pathPrefix":"/image","rate":1}],"hostListConfig":[{"host":"cdn.xxx.com","rate":1}],"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":["223.5.5.5"]}'
put mirror/rules/files "{\"path_prefix\":\"/files\",\"origin\":\"http://127.0.0.1:$ORIGIN_PORT/files\"}"
sleep 0.5 # the snapshot follows the store
for _ in $(seq 1 50); do
    curl -sf "http://$API/d?dn=n1000.bench.example&ip=1.0.1.7" | grep -q 1.1.1 && break
    sleep 0.1
done
ETAG=$(curl -s -o /dev/null -D - "http://$API/app/config-center/module-config?module=cdn" | tr -d '\r' | awk 'tolower($1) == "etag:" {print $2}')
[ -n "$ETAG" ] || { echo "the published module has no ETag" >&2; exit 1; }
curl -sf -o /dev/null "http://$MIRROR/files/4k.bin" && curl -sf -o /dev/null "http://$MIRROR/files/1m.bin" ||
    { echo "the mirror did not serve the origin's files" >&2; exit 1; }

load() { # url [wrk args...]
    local url=$1
    shift
    wrk -t1 -c32 -d"${DURATION}s" "$@" "$url" >"$W/wrk.out" || { cat "$W/wrk.out" >&2; exit 1; }
    # A path trained on its error answers would lay out the wrong code.
    if grep -q 'Non-2xx' "$W/wrk.out"; then
        echo "errors from $url:" >&2
        cat "$W/wrk.out" >&2
        exit 1
    fi
    echo "   $(awk '/^Requests\/sec/ {print $2}' "$W/wrk.out") req/s  $url"
}
DOH_GET=$(python3 -c 'import base64,struct;q=struct.pack(">HHHHHH",0,0x100,1,0,0,0)+b"\x03www\x07example\x03com\x00\x00\x01\x00\x01";print(base64.urlsafe_b64encode(q).decode().rstrip("="))')
python3 -c 'import struct,sys;sys.stdout.buffer.write(struct.pack(">HHHHHH",0,0x100,1,0,0,0)+b"\x01n\x05bench\x07example\x00\x00\x1c\x00\x01")' >"$W/doh.bin"
cat >"$W/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/dns-message"
local f = io.open("$W/doh.bin", "rb"); wrk.body = f:read("*a"); f:close()
EOF
NOW=$(date +%s)
cat >"$W/events.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"events":[{"event":"request","timestamp":$NOW,"host":"cdn1.example.com","outcome":"ok","latency_ms":40,"sample_rate":0.01,"convergence":true},{"event":"dns_fallback","timestamp":$NOW,"host":"www.example.com","fallback_reason":"HTTPDNS_TIMEOUT","fallback_duration_ms":120},{"event":"host_switch","timestamp":$NOW,"from":"cdn1.example.com","to":"cdn2.example.com","reason":"5xx","duration_ms":35},{"event":"localdns_compare","timestamp":$NOW,"host":"www.example.com","localdns":["2.2.2.1"],"httpdns":["1.1.1.2"]}]}'
EOF
load "http://$API/d?dn=www.example.com&ip=1.0.1.7&ttl=1"
load "http://$API/d?dn=www.example.com,img.example.com,n7.bench.example&ip=1.0.1.7&ttl=1&type=addrs"
load "http://$API/d?dn=n42.bench.example&ip=9.9.9.9&type=aaaa&query=1"
load "http://$API/resolve?host=www.example.com,img.example.com&query=4,6&ip=1.0.1.7"
load "http://$API/v2/d?id=100000&m=0&dn=www.example.com&q=4,6&cip=1.0.1.7"
load "http://$API/dns-query?dns=$DOH_GET" -H "Accept: application/dns-message"
load "http://$API/dns-query" -s "$W/post.lua"
load "http://$API/app/config-center/module-config?module=cdn" -H "If-None-Match: $ETAG"
load "http://$API/app/config-center/module-config?module=cdn"
load "http://$API/app/events" -s "$W/events.lua"
load "http://$MIRROR/files/4k.bin"
load "http://$MIRROR/files/1m.bin"
load "https://$API_TLS/d?dn=www.example.com&ip=1.0.1.7&ttl=1"
load "https://$MIRROR_TLS/files/4k.bin"
# h2 (wrk speaks only HTTP/1.1): curl's parallel transfers over one connection.
for i in $(seq 1 10000); do echo "url = \"https://$API_TLS/d?dn=n$((i % 1000 + 1)).bench.example&ip=1.0.1.7\""; echo "output = /dev/null"; done >"$W/h2.curl"
curl -sS --fail --http2 --cacert "$W/cert.pem" --parallel --parallel-max 32 -K "$W/h2.curl" >"$W/h2.out" 2>&1 ||
    { echo "h2 requests over TLS failed:" >&2; cat "$W/h2.out" >&2; exit 1; }
echo "   10000 h2 requests  https://$API_TLS/d"
for mode in -new -reuse; do
    openssl s_time -connect "$API_TLS" "$mode" -time "$DURATION" >"$W/s_time.out" 2>&1 || true
    grep -q 'connections in' "$W/s_time.out" || { echo "openssl s_time $mode failed:" >&2; cat "$W/s_time.out" >&2; exit 1; }
    echo "   $(awk '/connections in/ && /real seconds/ {print $1; exit}' "$W/s_time.out") handshakes ($mode)  $API_TLS"
done
for i in $(seq 1 1000); do echo "n$i.bench.example A"; echo "n$i.bench.example AAAA"; done >"$W/queries"
dns() { # label [dnsperf args...]
    local label=$1
    shift
    dnsperf -s 127.0.0.1 -p "$DNS_PORT" -d "$W/queries" -l "$DURATION" -c 4 -q 200 "$@" >"$W/dnsperf.out" 2>&1 || true
    grep -q 'NOERROR' "$W/dnsperf.out" && ! grep -qE 'REFUSED|SERVFAIL|FORMERR' "$W/dnsperf.out" ||
        { echo "not every answer was NOERROR for DNS $label:" >&2; cat "$W/dnsperf.out" >&2; exit 1; }
    echo "   $(awk '/Queries per second:/ {print $4}' "$W/dnsperf.out") qps  DNS $label"
}
dns UDP
dns "UDP, EDNS client subnet" -e -E 8:00011800010001
dns TCP -m tcp
DNS_PORT=$DOT_PORT dns TLS -m dot
curl -sf "http://$API/metrics" >/dev/null
kill -TERM "$HPID"
wait "$HPID" || true
HPID=

mkdir -p "$(dirname "$PROFDATA")"
"$LLVM_PROFDATA" merge --sparse -o "$PROFDATA" "$RAW"/*.profraw
echo "== merged: $PROFDATA ($(du -h "$PROFDATA" | cut -f1))"
[ "$STEP" = train ] || build

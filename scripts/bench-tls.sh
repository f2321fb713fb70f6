#!/usr/bin/env bash
# TLS: httpdns against nginx serving TLS with the same certificate, in one run.
#
#   scripts/bench-tls.sh [duration_seconds] [rounds]
#
# Both servers are pinned to core 0 (httpdns: its runtime then has one worker; nginx: one
# worker process); every load generator runs on core 1. Rounds alternate the two servers, and
# the report is the median of the per-round ratios with their spread.
#
# 1. `/d` over HTTPS with keep-alive (wrk -t1 -c32): httpdns's `/d` against nginx's
#    `return 200` of the same body.
# 2. Full handshakes per second: `openssl s_time -new` (a new TLS 1.3 session each time),
#    PAR processes in parallel (default 2). Besides the rate, the server's CPU seconds over
#    the run (utime+stime from /proc) give handshakes per server CPU second, which does not
#    depend on whether the client core was the limit.
# 3. Resumed handshakes per second: `openssl s_time -reuse` (the session of the first
#    connection resumed by ticket).
# 4. DNS over TLS against plain DNS over TCP (httpdns only), dnsperf -m dot / -m tcp over
#    persistent connections.
#
# Needs wrk, nginx, openssl and dnsperf (apt-get install wrk nginx-light dnsperf).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-8}"
ROUNDS="${2:-5}"
PAR="${PAR:-2}"
API=127.0.0.1:18600
API_TLS=127.0.0.1:18601
DNS_PORT=18653
DOT_PORT=18654
NGINX=127.0.0.1:18602
TOKEN=bench-admin-token-0123456789

# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk nginx-light openssl dnsperf util-linux" wrk nginx openssl dnsperf taskset
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

# One ECDSA P-256 certificate (the common choice today) for both servers.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$W/key.pem" \
    -out "$W/cert.pem" -days 2 -subj /CN=bench.test -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" 2>/dev/null
chmod 644 "$W/key.pem" "$W/cert.pem"

BODY="2.2.2.1;2.2.2.2"
cat >"$W/nginx.conf" <<EOF
worker_processes 1;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $W/nginx-tmp;
    proxy_temp_path $W/nginx-tmp;
    fastcgi_temp_path $W/nginx-tmp;
    uwsgi_temp_path $W/nginx-tmp;
    scgi_temp_path $W/nginx-tmp;
    server {
        listen $NGINX ssl http2;
        ssl_certificate $W/cert.pem;
        ssl_certificate_key $W/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;
        location /d { default_type text/plain; return 200 "$BODY"; }
    }
}
EOF
taskset -c 0 nginx -c "$W/nginx.conf"

HTTPDNS_API_ADDR=$API HTTPDNS_API_TLS_ADDR=$API_TLS HTTPDNS_MIRROR_ADDR=off \
HTTPDNS_DNS_ADDR=127.0.0.1:$DNS_PORT HTTPDNS_DOT_ADDR=127.0.0.1:$DOT_PORT HTTPDNS_UPSTREAMS=off \
HTTPDNS_TLS_CERT="$W/cert.pem" HTTPDNS_TLS_KEY="$W/key.pem" \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_CLIENT_RATE_LIMIT_QPS=off RUST_LOG=warn \
    taskset -c 0 ./target/release/httpdns serve &
HPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
put "networks/1.0.2.0%2F24" '{"isp":"unicom","region":"shanghai"}'
put "nodes/u1" '{"ip":"2.2.2.1","pool":"edge","isp":"unicom","region":"shanghai","latency_ms":1,"load_pct":10,"bandwidth_mbps":1000}'
put "nodes/u2" '{"ip":"2.2.2.2","pool":"edge","isp":"unicom","region":"shanghai","latency_ms":2,"load_pct":10,"bandwidth_mbps":1000}'
put "domains/www.example.com" '{"pool":"edge","ttl":60}'
sleep 0.5
NPID=$(cat "$W/nginx.pid")
NWORKER=$(pgrep -P "$NPID" | head -n1)
D_PATH="/d?dn=www.example.com&ip=1.0.2.7"
echo "httpdns: $(curl -s --cacert "$W/cert.pem" "https://$API_TLS$D_PATH")   nginx: $(curl -s --cacert "$W/cert.pem" "https://$NGINX$D_PATH")"
for who in "$API_TLS" "$NGINX"; do
    openssl s_client -connect "$who" -sess_out "$W/sess" </dev/null >/dev/null 2>&1 || true
    echo "resumption at $who: $(openssl s_client -connect "$who" -sess_in "$W/sess" </dev/null 2>/dev/null | grep -E '^(Reused|New),' | head -n1)"
done


wrk_rps() { taskset -c 1 wrk -t1 -c32 -d"${DURATION}s" "$1" | awk '/^Requests\/sec/ {print $2}'; }
# s_time processes in parallel on core 1: total connections per second, and the server's
# CPU seconds meanwhile.
handshakes() { # addr pid mode -> "conns_per_s server_cpu_s"
    local c0 c1 total=0 i pids=()
    c0=$(cpu "$2")
    for i in $(seq 1 "$PAR"); do
        taskset -c 1 openssl s_time -connect "$1" "$3" -time "$DURATION" >"$W/st.$i" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    c1=$(cpu "$2")
    for i in $(seq 1 "$PAR"); do
        n=$(awk '/connections in/ && /real seconds/ {print $1; exit}' "$W/st.$i")
        total=$((total + ${n:-0}))
    done
    awk -v n="$total" -v d="$DURATION" -v c=$((c1 - c0)) -v hz="$HZ" 'BEGIN {printf "%.1f %.3f\n", n / d, c / hz}'
}

echo
echo "== /d over HTTPS, keep-alive, wrk -t1 -c32 on core 1; $ROUNDS rounds of ${DURATION}s"
: >"$W/r1"
for r in $(seq 1 "$ROUNDS"); do
    h=$(wrk_rps "https://$API_TLS$D_PATH")
    n=$(wrk_rps "https://$NGINX$D_PATH")
    echo "  round $r: httpdns $h req/s, nginx $n req/s"
    awk -v h="$h" -v n="$n" 'BEGIN {print h / n}' >>"$W/r1"
done
ratios "/d over HTTPS keep-alive, httpdns / nginx" <"$W/r1"

for mode in -new -reuse; do
    echo
    echo "== handshakes: openssl s_time $mode, $PAR in parallel on core 1; $ROUNDS rounds of ${DURATION}s"
    : >"$W/rate"; : >"$W/eff"
    for r in $(seq 1 "$ROUNDS"); do
        read -r hr hc <<<"$(handshakes "$API_TLS" "$HPID" "$mode")"
        read -r nr nc <<<"$(handshakes "$NGINX" "$NWORKER" "$mode")"
        echo "  round $r: httpdns $hr/s (server CPU ${hc}s), nginx $nr/s (server CPU ${nc}s)"
        awk -v a="$hr" -v b="$nr" 'BEGIN {print a / b}' >>"$W/rate"
        awk -v a="$hr" -v ac="$hc" -v b="$nr" -v bc="$nc" 'BEGIN {print (a / ac) / (b / bc)}' >>"$W/eff"
    done
    ratios "handshakes $mode per second, httpdns / nginx" <"$W/rate"
    ratios "handshakes $mode per server CPU second, httpdns / nginx" <"$W/eff"
done

echo
echo "== DNS over TLS vs plain TCP (httpdns), dnsperf -c 8 on core 1, persistent connections"
echo "www.example.com A" >"$W/queries"
dnsperf_qps() { taskset -c 1 dnsperf -m "$1" -s 127.0.0.1 -p "$2" -d "$W/queries" -l "$DURATION" -c 8 -T 1 -q 200 2>/dev/null | awk '/Queries per second/ {print $4}'; }
: >"$W/r4"
for r in $(seq 1 "$ROUNDS"); do
    t=$(dnsperf_qps tcp $DNS_PORT)
    d=$(dnsperf_qps dot $DOT_PORT)
    echo "  round $r: TCP $t qps, DoT $d qps"
    awk -v a="$d" -v b="$t" 'BEGIN {print a / b}' >>"$W/r4"
done
ratios "DoT / TCP queries per second" <"$W/r4"

#!/usr/bin/env bash
# The mirror gateway against nginx, in one run, with ratios:
#
#   scripts/bench-mirror.sh [duration_seconds] [connections]
#
# 1. Hit path: 4 KiB and 1 MiB objects served by the mirror (stored copies on the local disk)
#    and by nginx serving the same files from disk (sendfile on). wrk, one thread, the same
#    request to both, ROUNDS rounds interleaved (default 3), best of each compared.
# 2. A 1 GiB object through a miss and then a hit, with the gateway's peak RSS (VmHWM)
#    before and after.
# 3. 1,000 concurrent misses on one 64 MiB key served slowly (nginx limit_rate), with the
#    origin request count and the time to first byte of every waiter (examples/mirror_herd.rs).
#
# MEMORY_MB sets HTTPDNS_MIRROR_MEMORY_MB (default 64; 0: every hit reads the file); HIT_ONLY=1
# stops after part 1. Needs wrk and nginx (apt-get install wrk nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNS="${2:-32}"
ROUNDS="${ROUNDS:-3}"
API=127.0.0.1:18580
MIRROR=127.0.0.1:18581
NGINX=127.0.0.1:18582
TOKEN=bench-admin-token-0123456789

command -v wrk >/dev/null || { echo "wrk is required: apt-get install wrk" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is required: apt-get install nginx-light" >&2; exit 1; }
cargo build --release --quiet --bin httpdns --example mirror_herd

WORK="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" 2>/dev/null || true
    [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www/files" "$WORK/data" "$WORK/nginx-tmp"
# nginx workers run as an unprivileged user: they must be able to read the files.
chmod 755 "$WORK" "$WORK/www" "$WORK/www/files"
head -c 4096 /dev/urandom >"$WORK/www/files/4k.bin"
head -c $((1 << 20)) /dev/urandom >"$WORK/www/files/1m.bin"
head -c $((64 << 20)) /dev/urandom >"$WORK/www/files/64m.bin"
truncate -s 1G "$WORK/www/files/1g.bin"
chmod 644 "$WORK"/www/files/*

# One nginx worker per core, as shipped; sendfile on, access log off, as tuned servers run.
cat >"$WORK/nginx.conf" <<EOF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx-tmp;
    proxy_temp_path $WORK/nginx-tmp;
    fastcgi_temp_path $WORK/nginx-tmp;
    uwsgi_temp_path $WORK/nginx-tmp;
    scgi_temp_path $WORK/nginx-tmp;
    types { application/octet-stream bin; }
    server {
        listen $NGINX;
        root $WORK/www;
        location /slow/ { alias $WORK/www/files/; limit_rate 32m; }
    }
}
EOF
nginx -c "$WORK/nginx.conf"

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=$MIRROR HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off \
HTTPDNS_DATA_DIR="$WORK/data" HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_MIRROR_MEMORY_MB="${MEMORY_MB:-64}" \
RUST_LOG=warn ./target/release/httpdns serve &
HPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
put mirror/rules/files "{\"path_prefix\":\"/files\",\"origin\":\"http://$NGINX/files\"}"
put mirror/rules/slow "{\"path_prefix\":\"/slow\",\"origin\":\"http://$NGINX/slow\",\"idle_timeout_ms\":60000}"

# Warm: one miss each, then the copies are hits.
for f in 4k 1m; do
    curl -sf -o /dev/null "http://$MIRROR/files/$f.bin"
    cmp <(curl -sf "http://$MIRROR/files/$f.bin") "$WORK/www/files/$f.bin"
done
echo "x-cache after warm-up: $(curl -s -o /dev/null -D - "http://$MIRROR/files/4k.bin" | tr -d '\r' | grep -i '^x-cache')"

run() { # url -> "rps p99_ms"
    local out rps p99
    out="$(wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$1")"
    rps="$(awk '/^Requests\/sec/ {print $2}' <<<"$out")"
    p99="$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")"
    echo "$rps $p99"
}

echo
echo "== hit path: $ROUNDS rounds of ${DURATION}s, $CONNS connections, wrk -t1"
for f in 4k 1m; do
    best_m=0; best_n=0; p99_m=0; p99_n=0
    for r in $(seq 1 "$ROUNDS"); do
        read -r m mp <<<"$(run "http://$MIRROR/files/$f.bin")"
        read -r n np <<<"$(run "http://$NGINX/files/$f.bin")"
        echo "  $f round $r: mirror $m req/s (p99 $mp ms), nginx $n req/s (p99 $np ms)"
        if awk "BEGIN{exit !($m > $best_m)}"; then best_m=$m; p99_m=$mp; fi
        if awk "BEGIN{exit !($n > $best_n)}"; then best_n=$n; p99_n=$np; fi
    done
    awk -v f="$f" -v m="$best_m" -v n="$best_n" -v pm="$p99_m" -v pn="$p99_n" \
        'BEGIN { printf "%s: mirror %.0f req/s (p99 %s ms) vs nginx %.0f req/s (p99 %s ms): ratio %.3f\n", f, m, pm, n, pn, m / n }'
done

[ -n "${HIT_ONLY:-}" ] && exit 0

echo
echo "== 1 GiB object: miss, then hit"
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$HPID/status"; }
before=$(hwm)
t0=$(date +%s.%N)
curl -sf -o /dev/null "http://$MIRROR/files/1g.bin"
t1=$(date +%s.%N)
after_miss=$(hwm)
curl -sf -o /dev/null -D "$WORK/h" "http://$MIRROR/files/1g.bin"
t2=$(date +%s.%N)
after_hit=$(hwm)
echo "  second request: $(tr -d '\r' <"$WORK/h" | grep -i '^x-cache')"
awk -v b="$before" -v m="$after_miss" -v h="$after_hit" -v t0="$t0" -v t1="$t1" -v t2="$t2" 'BEGIN {
    printf "1g: miss %.2f s, hit %.2f s; peak RSS %.1f MiB before, %.1f MiB after the miss, %.1f MiB after the hit: growth %.1f MiB\n",
        t1 - t0, t2 - t1, b / 1024, m / 1024, h / 1024, (h - b) / 1024 }'

echo
echo "== 1000 concurrent misses on one 64 MiB key (origin sends 32 MiB/s)"
./target/release/examples/mirror_herd "http://$MIRROR/slow/64m.bin" 1000
curl -sf -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/mirror/report" |
    python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["rules"] if x["rule"]=="slow"][0]; print("origin requests (back_to_source): %d, misses %d, coalesced %d, hits %d" % (r["back_to_source"], r["misses"], r["coalesced"], r["hits"]))'

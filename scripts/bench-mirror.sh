#!/usr/bin/env bash
# The mirror gateway against nginx, in one run:
#
#   scripts/bench-mirror.sh [duration_seconds] [connections]
#   ROUNDS=N (default 5)   MEMORY_MB=M (HTTPDNS_MIRROR_MEMORY_MB, default 64; 0: every hit
#   reads the file)   HIT_ONLY=1 (stop after part 1)
#   PROFILE=P: httpdns's cargo profile (default release; `pgo`: as deploy/Dockerfile builds it)
#   SENDFILE=false: HTTPDNS_MIRROR_SENDFILE=false, the mirror writes every body from memory
#   COPY_PEER=1: also nginx serving the same files with `sendfile off` (`output_buffers 1 2m`:
#   read into memory, then written, as the mirror writes a body it holds), in every round
#
# 1. Hit path: 4 KiB and 1 MiB objects, requests per second and per server CPU-second, from
#    - the mirror: `httpdns serve` with a rule whose origin is nginx, copies stored on the
#      local disk after one warm-up miss each (X-Cache: HIT checked);
#    - nginx serving the same files from disk (`sendfile on`, `tcp_nopush on`, access log
#      off), the origin itself;
#    - nginx `proxy_cache` in front of that same origin, what operators would run instead of
#      the mirror: a second server block of the same nginx, cache on the local disk
#      (`proxy_cache_valid 200 1d`, `use_temp_path=off`), warmed by one miss each and checked
#      to answer `X-Cache: HIT` before measuring.
#    The mirror and nginx (`worker_processes 1`; the proxy and the origin are the same worker)
#    are pinned to core 0 (`taskset -c 0`; httpdns's runtime sizes itself from the CPUs it
#    may use, so it has one worker). wrk runs on core 1 (`taskset -c 1 wrk -t1 -cCONNS
#    --latency`, keep-alive). Every round runs the mirror, nginx static and nginx proxy_cache
#    for DURATION each; the report is each round's raw numbers and the median of the
#    per-round ratios mirror / nginx with their min and max. Server CPU is utime+stime from
#    /proc/PID/stat (the httpdns process with all its threads; nginx's worker process) over
#    the run; "busy" is that over the run time; "cores busy" is core 0 / core 1 from
#    /proc/stat over the run (all but idle: softirq time included, which no process may be
#    charged with). With 1 MiB bodies one wrk on one core can be the limit (server busy well
#    under 100%, core 1 near it): then compare the per-CPU-second figures.
# 2. A 1 GiB object through a miss and then a hit, with the gateway's peak RSS (VmHWM) before
#    and after (curl on core 1).
# 3. 1,000 concurrent misses on one 64 MiB key served slowly (nginx limit_rate 32m), with the
#    origin request count and the time to first byte of every waiter (examples/mirror_herd.rs
#    on core 1).
#
# Needs wrk, nginx, curl and taskset (apt-get install wrk nginx-light curl util-linux), python3
# for part 3's report, and cargo to build.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNS="${2:-32}"
ROUNDS="${ROUNDS:-5}"
MEMORY_MB="${MEMORY_MB:-64}"
PROFILE="${PROFILE:-release}"
SENDFILE="${SENDFILE:-true}"
API=127.0.0.1:18580
MIRROR=127.0.0.1:18581
NGINX=127.0.0.1:18582
NGINX_CACHE=127.0.0.1:18583
NGINX_COPY=127.0.0.1:18584
TOKEN=bench-admin-token-0123456789

# cpu, HZ, ratios, medians and need (the working directory is the repository here).
. scripts/lib-bench.sh
need "apt-get install wrk nginx-light curl util-linux" wrk nginx curl taskset
# Part 3's client only when part 3 runs: with PROFILE=pgo it is a `dist` build of its own.
if [ -n "${HIT_ONLY:-}" ]; then build_httpdns "$PROFILE"; else build_httpdns "$PROFILE" --example mirror_herd; fi

W="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" 2>/dev/null || true
    [ -f "$W/nginx.pid" ] && kill "$(cat "$W/nginx.pid")" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
COMMAND="ROUNDS=$ROUNDS PROFILE=$PROFILE MEMORY_MB=$MEMORY_MB${HIT_ONLY:+ HIT_ONLY=$HIT_ONLY}${COPY_PEER:+ COPY_PEER=$COPY_PEER}$([ "$SENDFILE" = true ] || echo " SENDFILE=$SENDFILE") scripts/bench-mirror.sh $DURATION $CONNS"

mkdir -p "$W/www/files" "$W/data" "$W/nginx-tmp" "$W/nginx-cache"
# nginx workers run as an unprivileged user: they must be able to read the files (nginx's
# master chowns its temp and cache directories to that user itself).
chmod 755 "$W" "$W/www" "$W/www/files"
head -c 4096 /dev/urandom >"$W/www/files/4k.bin"
head -c $((1 << 20)) /dev/urandom >"$W/www/files/1m.bin"
head -c $((64 << 20)) /dev/urandom >"$W/www/files/64m.bin"
truncate -s 1G "$W/www/files/1g.bin"
chmod 644 "$W"/www/files/*

cat >"$W/nginx.conf" <<EOF
worker_processes 1;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path $W/nginx-tmp;
    proxy_temp_path $W/nginx-tmp;
    fastcgi_temp_path $W/nginx-tmp;
    uwsgi_temp_path $W/nginx-tmp;
    scgi_temp_path $W/nginx-tmp;
    proxy_cache_path $W/nginx-cache levels=1:2 keys_zone=mirror:10m max_size=4g inactive=1d use_temp_path=off;
    types { application/octet-stream bin; }
    # The origin of the mirror and of the caching proxy, and the static-file peer.
    server {
        listen $NGINX;
        root $W/www;
        location /slow/ { alias $W/www/files/; limit_rate 32m; }
    }
    # Static files without sendfile (COPY_PEER=1): whether the page cache's pages or a copy
    # from memory moves a large body faster depends on the machine (docs/benchmarks.md).
    server {
        listen $NGINX_COPY;
        root $W/www;
        sendfile off;
        output_buffers 1 2m;
    }
    # The caching proxy peer: the same origin behind nginx's own cache.
    server {
        listen $NGINX_CACHE;
        location /files/ {
            proxy_pass http://$NGINX;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache mirror;
            proxy_cache_valid 200 1d;
            add_header X-Cache \$upstream_cache_status;
        }
    }
}
EOF
taskset -c 0 nginx -c "$W/nginx.conf"

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=$MIRROR HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off \
HTTPDNS_DATA_DIR="$W/data" HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_MIRROR_MEMORY_MB="$MEMORY_MB" HTTPDNS_ALLOW_LOCAL_ORIGINS=true \
HTTPDNS_MIRROR_SENDFILE="$SENDFILE" \
RUST_LOG=warn taskset -c 0 "$HTTPDNS_BIN" serve &
HPID=$!
ready=
for _ in $(seq 1 100); do
    if curl -sf "http://$API/readyz" >/dev/null && curl -sf -o /dev/null "http://$NGINX/files/4k.bin"; then ready=1; break; fi
    sleep 0.1
done
[ -n "$ready" ] || { echo "httpdns or nginx did not come up within 10 s" >&2; exit 1; }
# nginx's worker (besides it, the master runs a cache manager and a cache loader).
NWORKER=$(pgrep -P "$(cat "$W/nginx.pid")" -f 'worker process' | head -n1)
[ -n "$NWORKER" ] || { echo "no nginx worker process" >&2; exit 1; }
put() { curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/$1" -d "$2" >/dev/null; }
put mirror/rules/files "{\"path_prefix\":\"/files\",\"origin\":\"http://$NGINX/files\"}"
put mirror/rules/slow "{\"path_prefix\":\"/slow\",\"origin\":\"http://$NGINX/slow\",\"idle_timeout_ms\":60000}"

# Warm both caches: one miss each, then every request is a hit.
xcache() { curl -s -o /dev/null -D - "$1" | tr -d '\r' | awk 'tolower($1) == "x-cache:" {print $2}'; }
for f in 4k 1m; do
    for via in "$MIRROR" "$NGINX_CACHE"; do
        curl -sf -o /dev/null "http://$via/files/$f.bin"
        cmp <(curl -sf "http://$via/files/$f.bin") "$W/www/files/$f.bin"
        for _ in $(seq 1 50); do
            x=$(xcache "http://$via/files/$f.bin")
            [ "$x" = HIT ] && break
            sleep 0.1
        done
        [ "$x" = HIT ] || { echo "$via/files/$f.bin: X-Cache '$x' after warm-up, not HIT" >&2; exit 1; }
        # The bytes of a hit, the path measured (from memory or, on the mirror, sendfile).
        cmp <(curl -sf "http://$via/files/$f.bin") "$W/www/files/$f.bin"
    done
done
echo "x-cache after warm-up: mirror $(xcache "http://$MIRROR/files/4k.bin"), nginx proxy_cache $(xcache "http://$NGINX_CACHE/files/4k.bin")"

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
# One wrk run against a server; prints "req_per_s p99_ms requests server_cpu_s errors
# core0_busy% core1_busy%".
run() { # url pid
    local c0 c1 k0 k1 line
    c0=$(cpu "$2")
    k0=$(cores)
    taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$1" >"$W/wrk.out"
    k1=$(cores)
    c1=$(cpu "$2")
    line=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v k="$(core_busy "$k0" "$k1")" '
        /requests in/ {n = $1}
        /^Requests\/sec/ {r = $2}
        $1 == "99%" {v = $2; if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000} else if (v ~ /ms$/) {sub(/ms$/, "", v)} else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000}; p = v}
        /Non-2xx or 3xx/ {e += $NF}
        /Socket errors/ {for (i = 3; i <= NF; i++) {x = $i; sub(/,$/, "", x); if (x ~ /^[0-9]+$/) e += x}}
        END {if (r != "" && n > 0) printf "%s %s %d %.3f %d %s\n", r, (p == "" ? 0 : p), n, (c > 0 ? c : 1) / hz, e, k}' "$W/wrk.out")
    [ -n "$line" ] || { echo "wrk failed on $1:" >&2; cat "$W/wrk.out" >&2; exit 1; }
    echo "$line"
}
show() { # "label" "req_per_s p99_ms requests server_cpu_s errors"
    awk -v l="$1" -v d="$DURATION" '{printf "%s %.0f req/s, p99 %.3f ms, server CPU %.2fs (busy %.0f%%), %.0f req per CPU-s; cores busy %s%%/%s%%%s\n",
        l, $1, $2, $4, 100 * $4 / d, $3 / $4, $6, $7, ($5 ? sprintf(", %d errors", $5) : "")}' <<<"$2"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); print x[1] / y[1]}'; }
eff() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); print (x[3] / x[4]) / (y[3] / y[4])}'; }

echo
echo "== hit path: servers on core 0 (one worker each), wrk -t1 -c$CONNS on core 1; $ROUNDS rounds of ${DURATION}s"
for f in 4k 1m; do
    : >"$W/static"; : >"$W/static.eff"; : >"$W/cache"; : >"$W/cache.eff"; : >"$W/copy"; : >"$W/copy.eff"
    for r in $(seq 1 "$ROUNDS"); do
        m=$(run "http://$MIRROR/files/$f.bin" "$HPID")
        n=$(run "http://$NGINX/files/$f.bin" "$NWORKER")
        c=$(run "http://$NGINX_CACHE/files/$f.bin" "$NWORKER")
        echo "  $f round $r: $(show "mirror           " "$m")"
        echo "             $(show "nginx static     " "$n")"
        echo "             $(show "nginx proxy_cache" "$c")"
        ratio "$m" "$n" >>"$W/static"; eff "$m" "$n" >>"$W/static.eff"
        ratio "$m" "$c" >>"$W/cache"; eff "$m" "$c" >>"$W/cache.eff"
        if [ -n "${COPY_PEER:-}" ]; then
            k=$(run "http://$NGINX_COPY/files/$f.bin" "$NWORKER")
            echo "             $(show "nginx no sendfile" "$k")"
            ratio "$m" "$k" >>"$W/copy"; eff "$m" "$k" >>"$W/copy.eff"
        fi
    done
    ratios "$f requests/s, mirror / nginx static (sendfile)" <"$W/static"
    ratios "$f requests per server CPU-second, mirror / nginx static (sendfile)" <"$W/static.eff"
    ratios "$f requests/s, mirror / nginx proxy_cache" <"$W/cache"
    ratios "$f requests per server CPU-second, mirror / nginx proxy_cache" <"$W/cache.eff"
    if [ -n "${COPY_PEER:-}" ]; then
        ratios "$f requests/s, mirror / nginx static without sendfile" <"$W/copy"
        ratios "$f requests per server CPU-second, mirror / nginx static without sendfile" <"$W/copy.eff"
    fi
done
# How the mirror's hits left: bytes sent from files with sendfile (0 with SENDFILE=false).
echo "mirror body bytes sent with sendfile: $(curl -s "http://$API/metrics" |
    awk '/^httpdns_http_sendfile_bytes_total\{listener="mirror"\}/ {printf "%.0f", $2}')"

if [ -n "${HIT_ONLY:-}" ]; then
    echo "command: $COMMAND"
    exit 0
fi

echo
echo "== 1 GiB object: miss, then hit (curl on core 1)"
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$HPID/status"; }
before=$(hwm)
t0=$(date +%s.%N)
taskset -c 1 curl -sf -o /dev/null "http://$MIRROR/files/1g.bin"
t1=$(date +%s.%N)
after_miss=$(hwm)
taskset -c 1 curl -sf -o /dev/null -D "$W/h" "http://$MIRROR/files/1g.bin"
t2=$(date +%s.%N)
after_hit=$(hwm)
echo "  second request: $(tr -d '\r' <"$W/h" | grep -i '^x-cache')"
awk -v b="$before" -v m="$after_miss" -v h="$after_hit" -v t0="$t0" -v t1="$t1" -v t2="$t2" 'BEGIN {
    printf "1g: miss %.2f s, hit %.2f s; peak RSS %.1f MiB before, %.1f MiB after the miss, %.1f MiB after the hit: growth %.1f MiB\n",
        t1 - t0, t2 - t1, b / 1024, m / 1024, h / 1024, (h - b) / 1024 }'

echo
echo "== 1000 concurrent misses on one 64 MiB key (origin sends 32 MiB/s; mirror_herd on core 1)"
taskset -c 1 ./target/$PEER_PROFILE/examples/mirror_herd "http://$MIRROR/slow/64m.bin" 1000
curl -sf -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/mirror/report" |
    python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["rules"] if x["rule"]=="slow"][0]; print("origin requests (back_to_source): %d, misses %d, coalesced %d, hits %d" % (r["back_to_source"], r["misses"], r["coalesced"], r["hits"]))'
echo "command: $COMMAND"

#!/usr/bin/env bash
# Image renders per second: a 1920×1080 JPEG to a 260-wide WebP, by the mirror gateway and by
# ImageMagick, in one run, with ratios:
#
#   scripts/bench-image.sh [duration_seconds] [rounds]
#
# * ours: `httpdns serve` pinned to core 0 (`taskset -c 0`), the original stored through the
#   admin API, HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES=0 so no variant is stored and every
#   request renders; wrk pinned to core 1 with one connection (single flight would merge
#   concurrent identical requests into one render), for the duration.
# * peers, pinned to core 0 with MAGICK_THREAD_LIMIT=1: `convert photo.jpg -resize 260x
#   -quality 85 out.webp` run again and again for the duration (one process per render, as a
#   renderer behind a CGI would), and `mogrify` over a batch of copies (no process start per
#   render).
# * rounds interleave ours and the peers (default 5); each round gives a ratio; the median
#   of the per-round ratios is reported with their spread (min–max).
#
# Needs wrk (apt-get install wrk), ImageMagick (/usr/bin/convert, /usr/bin/mogrify) and
# taskset. Builds the release binary into ${CARGO_TARGET_DIR:-target}.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
ROUNDS="${2:-5}"
API=127.0.0.1:18680
MIRROR=127.0.0.1:18681
TOKEN=bench-admin-token-0123456789
CONVERT=/usr/bin/convert
MOGRIFY=/usr/bin/mogrify
TARGET="${CARGO_TARGET_DIR:-target}"

command -v wrk >/dev/null || { echo "wrk is required: apt-get install wrk" >&2; exit 1; }
command -v taskset >/dev/null || { echo "taskset is required (util-linux)" >&2; exit 1; }
[ -x "$CONVERT" ] && [ -x "$MOGRIFY" ] || { echo "ImageMagick is required: apt-get install imagemagick" >&2; exit 1; }
cargo build --release --quiet --bin httpdns

WORK="$(mktemp -d)"
cleanup() {
    kill "${HPID:-}" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# A photo-like 1080p JPEG (a plasma fractal, fixed seed) at quality 90.
"$CONVERT" -seed 7 -size 1920x1080 plasma:fractal -blur 0x1 -quality 90 "$WORK/photo.jpg"
echo "original: $(stat -c %s "$WORK/photo.jpg") bytes, $("$CONVERT" "$WORK/photo.jpg" -format '%wx%h q%Q' info:)"

OURS_CMD="taskset -c 0 $TARGET/release/httpdns serve"
LOAD_URL="http://$MIRROR/img/photo.jpg?x-oss-process=image/resize,w_260/format,webp/quality,Q_85"
LOAD_CMD="taskset -c 1 wrk -t1 -c1 -d${DURATION}s $LOAD_URL"
CONVERT_CMD="taskset -c 0 $CONVERT photo.jpg -resize 260x -quality 85 out.webp"
MOGRIFY_CMD="taskset -c 0 $MOGRIFY -path out -resize 260x -quality 85 -format webp batch/*.jpg"
echo "server:  $OURS_CMD   (HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES=0)"
echo "load:    $LOAD_CMD"
echo "peer 1:  $CONVERT_CMD   (repeated for ${DURATION}s)"
echo "peer 2:  $MOGRIFY_CMD   (a batch sized to ~${DURATION}s)"

HTTPDNS_API_ADDR=$API HTTPDNS_MIRROR_ADDR=$MIRROR HTTPDNS_DNS_ADDR=off HTTPDNS_UPSTREAMS=off \
HTTPDNS_DATA_DIR="$WORK/data" HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES=0 \
RUST_LOG=warn taskset -c 0 "$TARGET/release/httpdns" serve &
HPID=$!
for _ in $(seq 1 100); do curl -sf "http://$API/readyz" >/dev/null && break; sleep 0.1; done
# The rule's origin is never asked: the original is written into the store directly.
curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$API/admin/v1/mirror/rules/img" \
    -d '{"path_prefix":"/img","origin":"http://127.0.0.1:9/none"}' >/dev/null
curl -sf -X PUT -H "Authorization: Bearer $TOKEN" -H "Content-Type: image/jpeg" \
    --data-binary @"$WORK/photo.jpg" "http://$API/admin/v1/mirror/objects/img/photo.jpg" >/dev/null
curl -sf -o "$WORK/ours.webp" -D "$WORK/h" "$LOAD_URL"
echo "ours:    $(tr -d '\r' <"$WORK/h" | grep -i '^x-image-size'), $(stat -c %s "$WORK/ours.webp") bytes, $("$CONVERT" "$WORK/ours.webp" -format '%m %wx%h' info:)"
(cd "$WORK" && "$CONVERT" photo.jpg -resize 260x -quality 85 out.webp)
echo "convert: $(stat -c %s "$WORK/out.webp") bytes, $("$CONVERT" "$WORK/out.webp" -format '%m %wx%h' info:)"

ours_rps() {
    taskset -c 1 wrk -t1 -c1 -d"${DURATION}s" "$LOAD_URL" | awk '/^Requests\/sec/ {print $2}'
}
convert_rps() {
    (
        cd "$WORK"
        local n=0 start end
        start=$(date +%s.%N)
        end=$(awk -v s="$start" -v d="$DURATION" 'BEGIN { printf "%.3f", s + d }')
        while awk -v now="$(date +%s.%N)" -v e="$end" 'BEGIN { exit !(now < e) }'; do
            MAGICK_THREAD_LIMIT=1 taskset -c 0 "$CONVERT" photo.jpg -resize 260x -quality 85 out.webp
            n=$((n + 1))
        done
        awk -v n="$n" -v s="$start" -v t="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", n / (t - s) }'
    )
}
mogrify_rps() { # $1: batch size
    (
        cd "$WORK"
        rm -rf batch out && mkdir batch out
        for i in $(seq 1 "$1"); do ln -s ../photo.jpg "batch/$i.jpg"; done
        local start
        start=$(date +%s.%N)
        MAGICK_THREAD_LIMIT=1 taskset -c 0 "$MOGRIFY" -path out -resize 260x -quality 85 -format webp batch/*.jpg
        awk -v n="$1" -v s="$start" -v t="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", n / (t - s) }'
    )
}

# Warm-up, and the batch size that takes about the duration.
ours_rps >/dev/null
first=$(mogrify_rps 10)
BATCH=$(awk -v r="$first" -v d="$DURATION" 'BEGIN { b = int(r * d); if (b < 10) b = 10; print b }')

echo
echo "== $ROUNDS rounds of ${DURATION}s, interleaved"
RATIOS_C=()
RATIOS_M=()
for r in $(seq 1 "$ROUNDS"); do
    o=$(ours_rps)
    c=$(convert_rps)
    m=$(mogrify_rps "$BATCH")
    rc=$(awk -v o="$o" -v c="$c" 'BEGIN { printf "%.3f", o / c }')
    rm=$(awk -v o="$o" -v m="$m" 'BEGIN { printf "%.3f", o / m }')
    RATIOS_C+=("$rc")
    RATIOS_M+=("$rm")
    echo "  round $r: ours $o renders/s, convert $c/s (ratio $rc), mogrify $m/s (ratio $rm)"
done
summary() { # name ratios...
    local name=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v name="$name" '{ v[NR] = $1 } END {
        med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "ours / %s: median of per-round ratios %.3f (spread %.3f to %.3f, %d rounds)\n", name, med, v[1], v[NR], NR }'
}
echo
summary convert "${RATIOS_C[@]}"
summary mogrify "${RATIOS_M[@]}"

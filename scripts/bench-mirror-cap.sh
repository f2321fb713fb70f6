#!/usr/bin/env bash
# The byte cap's cost on a 4 KiB mirror hit: the same release binary with and without
# HTTPDNS_MIRROR_MAX_BYTES, interleaved rounds, requests per second and per server CPU-second.
#
#   scripts/bench-mirror-cap.sh [duration_seconds] [connections]
#   ROUNDS=N (default 5)   MEMORY_MB=M (HTTPDNS_MIRROR_MEMORY_MB, default 64; 0: every hit
#   reads its file, and pins the copy while it does)
#
# The origin is python3's http.server (one miss per run warms the copy). httpdns is pinned to
# core 0 (one runtime worker), wrk to core 1 (`-t1 -cCONNS`, keep-alive). Each round runs the
# capped gateway and the uncapped one for DURATION each; the report is each round's figures and
# the median of the per-round ratios capped / uncapped.
#
# Needs wrk, python3, curl and taskset, and a release build (`cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-5}"
CONNS="${2:-32}"
ROUNDS="${ROUNDS:-5}"
MEMORY_MB="${MEMORY_MB:-64}"
BIN="${CARGO_TARGET_DIR:-target}/release/httpdns"
TOKEN=bench-admin-token-0123456789
ORIGIN_PORT=18690
for tool in wrk python3 curl taskset; do
  command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "build first: cargo build --release ($BIN)" >&2; exit 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/origin"
head -c 4096 /dev/urandom >"$WORK/origin/a.bin"
(cd "$WORK/origin" && exec python3 -m http.server "$ORIGIN_PORT" --bind 127.0.0.1 >/dev/null 2>&1) &
PIDS+=($!)

# cpu_ticks PID: utime+stime of the process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# run NAME CAP API MIRROR: one gateway, warmed, measured; prints "req_per_s req_per_cpu_s".
run() {
  local name=$1 cap=$2 api=$3 mirror=$4
  local data="$WORK/$name"
  mkdir -p "$data"
  HTTPDNS_API_ADDR=$api HTTPDNS_MIRROR_ADDR=$mirror HTTPDNS_DNS_ADDR=off HTTPDNS_DATA_DIR=$data \
    HTTPDNS_ADMIN_TOKEN=$TOKEN HTTPDNS_UPSTREAMS=off HTTPDNS_ALLOW_LOCAL_ORIGINS=true \
    HTTPDNS_MIRROR_MEMORY_MB=$MEMORY_MB HTTPDNS_MIRROR_MAX_BYTES=$cap RUST_LOG=warn \
    taskset -c 0 "$BIN" serve >"$data/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://$api/healthz" >/dev/null && break; sleep 0.1; done
  curl -sf -X PUT -H "Authorization: Bearer $TOKEN" "http://$api/admin/v1/mirror/rules/b" \
    -d "{\"path_prefix\": \"/b\", \"origin\": \"http://127.0.0.1:$ORIGIN_PORT\"}" >/dev/null
  for _ in $(seq 50); do
    curl -sf -D - -o /dev/null "http://$mirror/b/a.bin" | grep -qi '^x-cache: HIT' && break
    sleep 0.1
  done
  local before after
  before=$(cpu_ticks "$pid")
  local rps
  rps=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://$mirror/b/a.bin" | awk '/Requests\/sec/ {print $2}')
  after=$(cpu_ticks "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "import sys; r=float('$rps'); c=($after-$before)/$HZ; print(f'{r:.0f} {r*$DURATION/c if c else 0:.0f}')"
}

RATIOS=()
CPU_RATIOS=()
for round in $(seq "$ROUNDS"); do
  read -r off off_cpu < <(run "off-$round" off 127.0.0.1:18680 127.0.0.1:18681)
  read -r on on_cpu < <(run "on-$round" 1G 127.0.0.1:18682 127.0.0.1:18683)
  echo "round $round: uncapped $off req/s ($off_cpu per CPU-s), capped $on req/s ($on_cpu per CPU-s)"
  RATIOS+=("$(python3 -c "print($on/$off)")")
  CPU_RATIOS+=("$(python3 -c "print($on_cpu/$off_cpu if $off_cpu else 0)")")
done
python3 - "${RATIOS[@]}" -- "${CPU_RATIOS[@]}" <<'EOF'
import statistics, sys
args = sys.argv[1:]
cut = args.index('--')
r, c = [float(x) for x in args[:cut]], [float(x) for x in args[cut + 1:]]
print(f"capped / uncapped, req/s: median {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}); "
      f"per CPU-s: median {statistics.median(c):.3f} ({min(c):.3f}-{max(c):.3f})")
EOF

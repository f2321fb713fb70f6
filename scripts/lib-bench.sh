# Shared by the bench-*.sh scripts (sourced; not a benchmark itself): the server CPU reading and the median of
# per-round ratios that every benchmark reports.

# need HINT TOOL...: stops with "TOOL is required (HINT)" unless every tool is on the PATH.
need() {
    local hint=$1 t
    shift
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "$t is required ($hint)" >&2; exit 1; }
    done
}

# utime+stime of a process, all its threads, in clock ticks (divide by $HZ for seconds).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# Jiffies of CPUs 0 and 1 from /proc/stat, "busy0 all0 busy1 all1" (busy: all but idle and
# iowait). Beside a process's utime+stime this says whether the load generator's core was the
# limit, and holds softirq time the kernel may charge to no process (loopback's receive side).
cores() {
    awk '$1 == "cpu0" || $1 == "cpu1" {a = 0; for (i = 2; i <= 9; i++) a += $i; printf "%d %d ", a - $5 - $6, a}' /proc/stat
}
# core_busy "BEFORE" "AFTER" (two `cores` readings): "B0 B1", each core's busy share in percent.
core_busy() {
    awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " ");
        printf "%.0f %.0f", 100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9), 100 * (y[3] - x[3]) / (y[4] - x[4] + 1e-9)}'
}

# Reads one ratio per line; prints "<name>: median ratio M (min A, max B, N rounds)".
ratios() {
    sort -g | awk -v name="$1" '{v[NR]=$1} END {m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
        printf "%s: median ratio %.3f (min %.3f, max %.3f, %d rounds)\n", name, m, v[1], v[NR], NR}'
}

# Reads one value per line; prints "<name>: median M (min A, max B, N rounds)".
medians() {
    sort -g | awk -v name="$1" '{v[NR]=$1} END {m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
        printf "%s: median %.0f (min %.0f, max %.0f, %d rounds)\n", name, m, v[1], v[NR], NR}'
}

# build_httpdns PROFILE [cargo args for peers...]: builds httpdns (and whatever else the args
# name) with cargo profile PROFILE and sets HTTPDNS_BIN and PEER_PROFILE (where the other
# binaries are: target/$PEER_PROFILE). PROFILE=pgo is the shipped binary as deploy/Dockerfile
# builds it: the `dist` profile laid out by deploy/pgo/httpdns.profdata (scripts/pgo.sh build,
# which trains first when there is no profile); the peers then build with `dist`, unprofiled.
# HTTPDNS_BIN=PATH set by the caller measures that binary instead (an A/B of two builds, each
# against the same peers); PROFILE then only chooses how the peers build.
# GIVEN_BIN is that path, empty otherwise, for the command line a script prints.
build_httpdns() {
    local profile=$1
    shift
    GIVEN_BIN="${HTTPDNS_BIN:-}"
    if [ -n "$GIVEN_BIN" ]; then
        [ -x "$HTTPDNS_BIN" ] || { echo "HTTPDNS_BIN=$HTTPDNS_BIN is not an executable" >&2; exit 1; }
        PEER_PROFILE=$profile
        [ "$profile" != pgo ] || PEER_PROFILE=dist
    elif [ "$profile" = pgo ]; then
        scripts/pgo.sh build >/dev/null
        HTTPDNS_BIN=./target/pgo/dist/httpdns
        PEER_PROFILE=dist
    else
        cargo build --profile "$profile" --quiet --bin httpdns
        HTTPDNS_BIN=./target/$profile/httpdns
        PEER_PROFILE=$profile
    fi
    [ $# -eq 0 ] || cargo build --profile "$PEER_PROFILE" --quiet "$@"
}

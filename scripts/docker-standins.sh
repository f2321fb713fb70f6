#!/usr/bin/env bash
# Builds local stand-ins for the base images deploy/ names, for a Docker engine that cannot
# reach a registry (as on this project's machines), then the httpdns image from
# deploy/Dockerfile unchanged. What each stand-in is: deploy/README.md, "What was run".
#
#   scripts/docker-standins.sh WORKDIR      # root; needs dockerd running, debootstrap, s3s-fs
#
# Then, with secrets of your own in an env file that also names the stand-ins:
#   cp deploy/.env WORKDIR/env/.env && sh deploy/generate-secrets.sh   (run in WORKDIR/env)
#   cat WORKDIR/standins.env >> WORKDIR/env/.env
#   cd deploy && docker-compose --env-file WORKDIR/env/.env up -d --no-build \
#       postgres minio minio-init httpdns-a httpdns-b prometheus
set -euo pipefail
work=${1:?usage: docker-standins.sh WORKDIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
root=$work/bookworm

# Debian bookworm with what the stand-ins run; services are not started inside the chroot.
if [ ! -x "$root/usr/bin/prometheus" ]; then
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian
    printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
    chmod +x "$root/usr/sbin/policy-rc.d"
    mkdir -p "$root/etc/postgresql-common"
    echo "create_main_cluster = false" > "$root/etc/postgresql-common/createcluster.conf"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends gcc libc6-dev ca-certificates curl postgresql-15 prometheus netbase tzdata'
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root/usr/sbin/policy-rc.d"
fi
tar -C "$root" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - httpdns-standin/bookworm:latest

# gcr.io/distroless/cc-debian12:nonroot: the same packages' files, uid 65532, no shell.
dl=$work/distroless
rm -rf "$dl"
mkdir -p "$dl/usr"
for l in bin lib lib64 sbin; do mkdir -p "$dl/usr/$l"; ln -s "usr/$l" "$dl/$l"; done
(
    cd "$root"
    for p in libc6 libgcc-s1 libstdc++6 libgomp1 libssl3 netbase tzdata ca-certificates base-files; do
        chroot "$root" dpkg -L "$p"
    done | sed -E 's#^/(lib|lib64|bin|sbin)/#/usr/\1/#' | sort -u | while read -r f; do
        if [ -f "./$f" ] || [ -L "./$f" ]; then cp -a --parents ".$f" "$dl/"; fi
    done
    cp -a --parents ./etc/ssl/certs "$dl/"
)
rm -rf "$dl"/usr/share/{doc,man,lintian,info,locale,gcc,gdb}
mkdir -p "$dl/tmp" "$dl/home/nonroot" "$dl/root"
chmod 1777 "$dl/tmp"
chown 65532:65532 "$dl/home/nonroot"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$dl/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$dl/etc/group"
tar -C "$dl" -c . | docker import -c 'USER 65532:65532' -c 'WORKDIR /home/nonroot' \
    -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - httpdns-standin/distroless-cc:nonroot

# rust:1.95-bookworm: this machine's toolchain and crate cache, offline.
ctx=$work/rust-ctx
rm -rf "$ctx"
mkdir -p "$ctx/registry"
cp -al "$(readlink -f "$(rustc --print sysroot)")" "$ctx/toolchain"
rm -rf "$ctx/toolchain/share/doc"
cp -al "${CARGO_HOME:-$HOME/.cargo}/registry/index" "${CARGO_HOME:-$HOME/.cargo}/registry/cache" "$ctx/registry/"
cat > "$ctx/Dockerfile" <<'EOF'
FROM httpdns-standin/bookworm:latest
COPY toolchain /usr/local/rust
COPY registry /usr/local/cargo/registry
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CARGO_HOME=/usr/local/cargo CARGO_NET_OFFLINE=true
EOF
DOCKER_BUILDKIT=0 docker build -q -t httpdns-standin/rust:1.95 "$ctx"

# postgres: Debian's PostgreSQL 15 with the official image's POSTGRES_* start-up.
mkdir -p "$work/postgres"
cat > "$work/postgres/entrypoint.sh" <<'EOF'
#!/bin/sh
set -eu
PGDATA=/var/lib/postgresql/data
BIN=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
    chown postgres "$pw"
    su postgres -s /bin/sh -c "$BIN/initdb -D $PGDATA -U $POSTGRES_USER --pwfile=$pw --auth-local=trust --auth-host=scram-sha-256" >/dev/null
    rm -f "$pw"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $PGDATA -w -o '-c listen_addresses=' start" >/dev/null
    su postgres -s /bin/sh -c "$BIN/createdb -U $POSTGRES_USER $POSTGRES_DB"
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $PGDATA -w stop" >/dev/null
fi
exec su postgres -s /bin/sh -c "exec $BIN/postgres -D $PGDATA -c listen_addresses='*'"
EOF
cat > "$work/postgres/Dockerfile" <<'EOF'
FROM httpdns-standin/bookworm:latest
COPY entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod +x /usr/local/bin/docker-entrypoint.sh && ln -s /usr/lib/postgresql/15/bin/pg_isready /usr/local/bin/pg_isready
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
EOF
DOCKER_BUILDKIT=0 docker build -q -t httpdns-standin/postgres:latest "$work/postgres"

# minio and mc: s3s-fs behind shims of the commands docker-compose.yml runs.
mkdir -p "$work/minio"
cp "$(command -v s3s-fs)" "$work/minio/s3s-fs"
cat > "$work/minio/minio" <<'EOF'
#!/bin/sh
set -eu
[ "$1" = server ] || { echo "minio stand-in: only 'server'" >&2; exit 2; }
exec /usr/local/bin/s3s-fs --host 0.0.0.0 --port 9000 --access-key "$MINIO_ROOT_USER" --secret-key "$MINIO_ROOT_PASSWORD" "$2"
EOF
cat > "$work/minio/mc" <<'EOF'
#!/bin/sh
set -eu
conf=/tmp/mc-aliases
case "$1" in
ready) code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9000/ || true); [ "$code" != 000 ] ;;
alias) printf '%s %s %s %s\n' "$3" "$4" "$5" "$6" >> "$conf" ;;
mb)
    [ "$2" = --ignore-existing ] && target=$3 || target=$2
    name=${target%%/*}; bucket=${target#*/}
    set -- $(grep "^$name " "$conf" | tail -n1)
    empty=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-amz-content-sha256: $empty" \
        --aws-sigv4 "aws:amz:us-east-1:s3" --user "$3:$4" -X PUT "$2/$bucket")
    case "$code" in 200) echo "Bucket created: $bucket" ;; 409) echo "Bucket exists: $bucket" ;; *) echo "mb $bucket: HTTP $code" >&2; exit 1 ;; esac ;;
*) echo "mc stand-in: unsupported $1" >&2; exit 2 ;;
esac
EOF
cat > "$work/minio/Dockerfile" <<'EOF'
FROM httpdns-standin/bookworm:latest
COPY s3s-fs minio mc /usr/local/bin/
RUN chmod +x /usr/local/bin/s3s-fs /usr/local/bin/minio /usr/local/bin/mc
EXPOSE 9000
ENTRYPOINT ["/usr/local/bin/minio"]
EOF
DOCKER_BUILDKIT=0 docker build -q -t httpdns-standin/minio:latest "$work/minio"

# prometheus: Debian's Prometheus.
mkdir -p "$work/prometheus"
printf 'FROM httpdns-standin/bookworm:latest\nWORKDIR /prometheus\nEXPOSE 9090\nENTRYPOINT ["/usr/bin/prometheus"]\n' \
    > "$work/prometheus/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t httpdns-standin/prometheus:latest "$work/prometheus"

# The httpdns image itself, from the unchanged Dockerfile.
DOCKER_BUILDKIT=0 docker build -f "$repo/deploy/Dockerfile" \
    --build-arg RUST_IMAGE=httpdns-standin/rust:1.95 \
    --build-arg RUNTIME_IMAGE=httpdns-standin/distroless-cc:nonroot -t httpdns:latest "$repo"
docker images httpdns:latest

cat > "$work/standins.env" <<'EOF'
POSTGRES_IMAGE=httpdns-standin/postgres:latest
MINIO_IMAGE=httpdns-standin/minio:latest
MC_IMAGE=httpdns-standin/minio:latest
PROMETHEUS_IMAGE=httpdns-standin/prometheus:latest
EOF
echo "stand-ins built; image overrides in $work/standins.env"

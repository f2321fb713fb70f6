#!/bin/sh
# Replaces every placeholder secret in deploy/.env with a random value (openssl), in place.
# Run once before the first `docker compose up`; running it again rotates every secret, which
# also changes the config signing key that apps pin: do that only on purpose.
set -eu
cd "$(dirname "$0")"
command -v openssl >/dev/null || { echo "generate-secrets.sh: openssl is needed" >&2; exit 1; }
tmp=$(mktemp .env.XXXXXX)
trap 'rm -f "$tmp"' EXIT
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
        POSTGRES_PASSWORD=*|MINIO_ROOT_PASSWORD=*|HTTPDNS_ADMIN_TOKEN=*|GRAFANA_ADMIN_PASSWORD=*)
            printf '%s=%s\n' "${line%%=*}" "$(openssl rand -hex 24)" ;;
        HTTPDNS_CONFIG_SIGNING_KEY=*)
            printf '%s=%s\n' "${line%%=*}" "$(openssl rand -base64 32)" ;;
        *) printf '%s\n' "$line" ;;
    esac
done < .env > "$tmp"
chmod 600 "$tmp"
mv "$tmp" .env
trap - EXIT
echo "$(pwd)/.env: new secrets written (mode 0600)."

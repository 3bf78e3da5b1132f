#!/usr/bin/env bash
# The Prometheus door's files for docker-compose.yml's aiops-remote-write (`--profile prometheus`),
# signed by the broker's CA (config/kafka/make-tls.sh, run first), for a site without its own:
#   KAFKA_EXTERNAL_HOST=head01.mgmt config/kafka/make-remote-write-tls.sh
# writes config/kafka/tls/remote-write/token (the bearer token, its first line), cert.pem (for the
# name Prometheus reaches the door by, KAFKA_EXTERNAL_HOST: a DNS name or an address) and key.pem.
# Give the Prometheus host the token and config/kafka/tls/ca.pem (config/prometheus/remote-write.yml).
# Files that exist are kept: delete them to make new ones. The image's user (uid 10001) reads
# them and no one else: run as root, the script gives them to it; otherwise it prints the command.
set -euo pipefail
: "${KAFKA_EXTERNAL_HOST:?set KAFKA_EXTERNAL_HOST (as in .env): the name Prometheus reaches the door by}"
tls="$(cd "$(dirname "$0")" && pwd)/tls"
[ -f "$tls/ca.pem" ] && [ -f "$tls/ca.key" ] || { echo "no CA in $tls: run config/kafka/make-tls.sh first" >&2; exit 1; }
dir="$tls/remote-write"
mkdir -p "$dir"
cd "$dir"
[ -s token ] || { umask 077; openssl rand -hex 32 >token; }
if [ ! -f cert.pem ] || [ ! -f key.pem ]; then
  case "$KAFKA_EXTERNAL_HOST" in *[!0-9.]*) san="DNS:$KAFKA_EXTERNAL_HOST" ;; *) san="IP:$KAFKA_EXTERNAL_HOST" ;; esac
  openssl req -newkey rsa:3072 -nodes -subj "/CN=aiops-remote-write" -keyout key.pem -out req.csr 2>/dev/null
  printf 'subjectAltName=%s\n' "$san" >ext
  openssl x509 -req -in req.csr -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 825 -extfile ext \
    -out cert.pem 2>/dev/null
  rm -f req.csr ext
fi
if [ "$(id -u)" = 0 ]; then
  chown -R 10001:10001 . && chmod -R u=rwX,go= .
else
  echo "then, as root: chown -R 10001:10001 '$dir' && chmod -R u=rwX,go= '$dir'" >&2
fi
echo "$dir"

#!/usr/bin/env bash
# The broker's TLS files for docker-compose.yml, with a CA of their own, for a site without one:
#   KAFKA_TLS_PASSWORD=... KAFKA_EXTERNAL_HOST=head01.mgmt config/kafka/make-tls.sh
# writes config/kafka/tls/ca.pem (give it to the GPU hosts' Telegraf as tls_ca), ca.key (keep it
# elsewhere once done), and broker.p12 (the broker's key and certificate, for the names kafka,
# localhost, 127.0.0.1 and KAFKA_EXTERNAL_HOST, protected by KAFKA_TLS_PASSWORD). Files that exist
# are kept: delete them to make new ones.
set -euo pipefail
: "${KAFKA_TLS_PASSWORD:?set KAFKA_TLS_PASSWORD (as in .env)}"
host="${KAFKA_EXTERNAL_HOST:-127.0.0.1}"
dir="$(cd "$(dirname "$0")" && pwd)/tls"
mkdir -p "$dir"
chmod 755 "$dir"  # the broker's container (its own user) reads ca.pem and broker.p12; ca.key stays 600
cd "$dir"
if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=aiops kafka CA" -keyout ca.key -out ca.pem
fi
if [ ! -f broker.p12 ]; then
  case "$host" in *[!0-9.]*) san="DNS:$host" ;; *) san="IP:$host" ;; esac
  openssl req -newkey rsa:3072 -nodes -subj "/CN=kafka" -keyout broker.key -out broker.csr
  printf 'subjectAltName=DNS:kafka,DNS:localhost,IP:127.0.0.1,%s\n' "$san" >broker.ext
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile broker.ext \
    -out broker.pem
  openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -passout "env:KAFKA_TLS_PASSWORD" \
    -out broker.p12
  rm -f broker.key broker.csr broker.ext
fi
chmod 644 ca.pem broker.p12  # the broker's container reads them as its own user
echo "$dir"

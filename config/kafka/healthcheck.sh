#!/usr/bin/env bash
# The kafka service's healthcheck (docker-compose.yml): the broker answers on INTERNAL (kafka:9092)
# through TLS, with the name in its certificate, to User:admin's login. The login is the broker's
# own PLAIN one, read from the JAAS setting the container is given.
set -euo pipefail
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
chmod 600 "$config"
cat >"$config" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=$KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG
ssl.truststore.type=PEM
ssl.truststore.location=${KAFKA_CA:-/etc/kafka/aiops/tls/ca.pem}
PROPS
args=(--bootstrap-server "${KAFKA_BOOTSTRAP:-kafka:9092}" --command-config "$config")
if [ -n "${KAFKA_LIB:-}" ]; then  # a folder of Kafka's jars (the test's broker), not the image's tools
  java -Xmx256m -cp "$KAFKA_LIB/*" org.apache.kafka.tools.BrokerApiVersionsCommand "${args[@]}" >/dev/null 2>&1
else
  /opt/kafka/bin/kafka-broker-api-versions.sh "${args[@]}" >/dev/null 2>&1
fi

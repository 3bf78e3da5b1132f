#!/usr/bin/env bash
# Kafka's logins and ACLs for the compose stack (the one-shot `kafka-setup` service of
# docker-compose.yml runs it once the broker is healthy and before any daemon starts;
# tests/integration/test_kafka_acls.py runs it against a broker with the same settings).
#
# Idempotent: every SCRAM-SHA-512 login is set (again) from its password variable, every ACL is
# added (adding one that exists changes nothing). A login whose password variable is empty is left
# as it is (a profile the site does not run). ACLs this script never granted are not removed:
# revoke those with kafka-acls.sh --remove.
#
# The principals (docs/security.md, "Kafka"):
#   User:admin            the broker's own (inter-broker, controller) and this script's: super user
#   User:gpu-host         Telegraf on the GPU hosts (EXTERNAL listener): Write+Describe on the
#                         telemetry topic, nothing else: no other topic, no group, no create
#   User:aiops-ingest     aiops ingest:      reads telemetry (group aiops-ingest), writes dead letters
#   User:aiops-run        aiops run:         reads telemetry and the scheduler's events (group
#                         aiops-run), writes anomalies, predictions, incidents, notices, dead letters
#   User:aiops-detect     aiops detect:      reads telemetry (group aiops-detect), the cohorts and
#                         the events, writes anomalies, predictions, cohorts, progress, dead letters
#   User:aiops-rca        aiops run --from-detection: reads anomalies, predictions, progress and the
#                         events (group aiops-rca), describes telemetry, writes incidents, notices,
#                         dead letters
#   User:aiops-scheduler  aiops scheduler follow: writes the scheduler's events
#   User:aiops-remote-write  aiops ingest --remote-write (Prometheus's door): writes telemetry and
#                         dead letters, nothing else: reads nothing, no group
#   User:ANONYMOUS        the HOST listener (plaintext, published on the head node's loopback
#                         only): the aiops.* topics and aiops-* groups, for tools run on the head node
# Every daemon may also create the topics it writes or reads (the daemons make missing topics
# themselves, ingest/kafka/admin.py ensure_topics); the GPU hosts may not. The daemons that
# checkpoint (run, detect, rca) also read the topics they write: after a restart they read back
# what was published since their checkpoint so as not to publish it twice (aiops/daemon.py);
# without it a detect member retried that read forever and detected nothing (issue 65's compose run).
#
# Environment:
#   KAFKA_BOOTSTRAP          the SASL_SSL listener to reach (default kafka:9092)
#   KAFKA_CA                 the CA that signed the broker's certificate (PEM)
#   KAFKA_ADMIN_PASSWORD     User:admin's password (PLAIN, in the broker's JAAS settings)
#   KAFKA_GPU_HOST_PASSWORD, KAFKA_INGEST_PASSWORD, KAFKA_RUN_PASSWORD, KAFKA_DETECT_PASSWORD,
#   KAFKA_RCA_PASSWORD, KAFKA_SCHEDULER_PASSWORD, KAFKA_REMOTE_WRITE_PASSWORD
#                            the SCRAM-SHA-512 logins (letters and digits)
#   AIOPS_KAFKA__*_TOPIC, AIOPS_KAFKA__*_GROUP      topic and group names (vocab/settings.py defaults)
#   KAFKA_RCA_GROUP          the group of aiops run --from-detection (default aiops-rca)
#   KAFKA_HOST_LISTENER_ACLS=false                  no ACLs for User:ANONYMOUS (the HOST listener)
#   KAFKA_LIB                a folder of Kafka's jars: run the tools with java from there instead of
#                            /opt/kafka/bin (the apache/kafka image's)
set -euo pipefail

BOOTSTRAP="${KAFKA_BOOTSTRAP:-kafka:9092}"
CA="${KAFKA_CA:-/etc/kafka/aiops/tls/ca.pem}"
: "${KAFKA_ADMIN_PASSWORD:?set KAFKA_ADMIN_PASSWORD}"

TELEMETRY="${AIOPS_KAFKA__TELEMETRY_TOPIC:-aiops.telemetry}"
DEADLETTER="${AIOPS_KAFKA__DEADLETTER_TOPIC:-aiops.deadletter}"
ANOMALIES="${AIOPS_KAFKA__ANOMALIES_TOPIC:-aiops.anomalies}"
PREDICTIONS="${AIOPS_KAFKA__PREDICTIONS_TOPIC:-aiops.predictions}"
INCIDENTS="${AIOPS_KAFKA__INCIDENTS_TOPIC:-aiops.incidents}"
NOTICES="${AIOPS_KAFKA__NOTICES_TOPIC:-aiops.notices}"
EVENTS="${AIOPS_KAFKA__EVENTS_TOPIC:-aiops.events}"
COHORTS="${AIOPS_KAFKA__COHORTS_TOPIC:-aiops.cohorts}"
PROGRESS="${AIOPS_KAFKA__PROGRESS_TOPIC:-aiops.progress}"
INGEST_GROUP="${AIOPS_KAFKA__INGEST_GROUP:-aiops-ingest}"
DETECT_GROUP="${AIOPS_KAFKA__DETECT_GROUP:-aiops-detect}"
RUN_GROUP="${AIOPS_KAFKA__RUN_GROUP:-aiops-run}"
RCA_GROUP="${KAFKA_RCA_GROUP:-aiops-rca}"  # aiops-rca's AIOPS_KAFKA__RUN_GROUP

log() { printf '[kafka-setup] %3ds %s\n' "$SECONDS" "$*" >&2; }

tool() {  # tool acls|configs ARGS...: Kafka's own command-line tool
  local name="$1"; shift
  if [ -n "${KAFKA_LIB:-}" ]; then
    local class
    case "$name" in
      acls) class=org.apache.kafka.tools.AclCommand ;;
      configs) class=kafka.admin.ConfigCommand ;;
    esac
    java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$KAFKA_LIB/*" "$class" "$@"
  else
    "/opt/kafka/bin/kafka-$name.sh" "$@"
  fi
}

ADMIN_CONFIG="$(mktemp)"
trap 'rm -f "$ADMIN_CONFIG"' EXIT
chmod 600 "$ADMIN_CONFIG"
cat >"$ADMIN_CONFIG" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$CA
PROPS
COMMON=(--bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG")

# Each tool is a JVM of its own (seconds to start): a few at once, every one's status checked.
PARALLEL="${KAFKA_SETUP_PARALLEL:-4}"
running=()
failed=0
bg() {
  "$@" &
  running+=("$!")
  if [ "${#running[@]}" -ge "$PARALLEL" ]; then
    wait "${running[0]}" || failed=1
    running=("${running[@]:1}")
  fi
}
wait_all() {
  local pid
  for pid in "${running[@]}"; do wait "$pid" || failed=1; done
  running=()
  if [ "$failed" != 0 ]; then log "failed (see above)"; exit 1; fi
}

login() {  # login USER PASSWORD: set USER's SCRAM-SHA-512 credential (an upsert)
  local user="$1" password="$2"
  if [ -z "$password" ]; then log "no password for $user: its login is left as it is"; return 0; fi
  case "$password" in *[!A-Za-z0-9._-]*) log "the password of $user must be letters, digits, '.', '_' or '-'"; return 1 ;; esac
  tool configs "${COMMON[@]}" --alter --entity-type users --entity-name "$user" \
    --add-config "SCRAM-SHA-512=[iterations=8192,password=$password]" >/dev/null
  log "login $user set"
}

allow() {  # allow PRINCIPAL OPERATIONS RESOURCE-ARGS...: one kafka-acls --add (operations comma-separated)
  local principal="$1" operations="$2" op args=(); shift 2
  for op in ${operations//,/ }; do args+=(--operation "$op"); done
  tool acls "${COMMON[@]}" --add --allow-principal "$principal" "${args[@]}" "$@" >/dev/null
  log "$principal: $operations on $*"
}

topics() { local t out=(); for t in "$@"; do out+=(--topic "$t"); done; printf '%s\n' "${out[@]}"; }

bg login gpu-host "${KAFKA_GPU_HOST_PASSWORD:-}"
bg login aiops-ingest "${KAFKA_INGEST_PASSWORD:-}"
bg login aiops-run "${KAFKA_RUN_PASSWORD:-}"
bg login aiops-detect "${KAFKA_DETECT_PASSWORD:-}"
bg login aiops-rca "${KAFKA_RCA_PASSWORD:-}"
bg login aiops-scheduler "${KAFKA_SCHEDULER_PASSWORD:-}"
bg login aiops-remote-write "${KAFKA_REMOTE_WRITE_PASSWORD:-}"

# the GPU hosts: the telemetry topic, written, and nothing else
bg allow User:gpu-host Write,Describe --topic "$TELEMETRY"

mapfile -t ingest_reads < <(topics "$TELEMETRY")
mapfile -t ingest_writes < <(topics "$DEADLETTER")
bg allow User:aiops-ingest Read,Describe,Create "${ingest_reads[@]}"
bg allow User:aiops-ingest Write,Describe,Create "${ingest_writes[@]}"
bg allow User:aiops-ingest Read,Describe --group "$INGEST_GROUP"

mapfile -t run_reads < <(topics "$TELEMETRY" "$EVENTS")
mapfile -t run_writes < <(topics "$ANOMALIES" "$PREDICTIONS" "$INCIDENTS" "$NOTICES" "$DEADLETTER")
bg allow User:aiops-run Read,Describe,Create "${run_reads[@]}"
bg allow User:aiops-run Read,Write,Describe,Create "${run_writes[@]}"
bg allow User:aiops-run Read,Describe --group "$RUN_GROUP"

mapfile -t detect_reads < <(topics "$TELEMETRY" "$EVENTS" "$COHORTS")
mapfile -t detect_writes < <(topics "$ANOMALIES" "$PREDICTIONS" "$COHORTS" "$PROGRESS" "$DEADLETTER")
bg allow User:aiops-detect Read,Describe,Create "${detect_reads[@]}"
bg allow User:aiops-detect Read,Write,Describe,Create "${detect_writes[@]}"
bg allow User:aiops-detect Read,Describe --group "$DETECT_GROUP"

mapfile -t rca_reads < <(topics "$ANOMALIES" "$PREDICTIONS" "$PROGRESS" "$EVENTS")
mapfile -t rca_writes < <(topics "$INCIDENTS" "$NOTICES" "$DEADLETTER")
bg allow User:aiops-rca Describe,Create --topic "$TELEMETRY"
bg allow User:aiops-rca Read,Describe,Create "${rca_reads[@]}"
bg allow User:aiops-rca Read,Write,Describe,Create "${rca_writes[@]}"
bg allow User:aiops-rca Read,Describe --group "$RCA_GROUP"

bg allow User:aiops-scheduler Write,Describe,Create --topic "$EVENTS"

# the Prometheus door: what it publishes (ingest/remote_write_service.py run_remote_write makes both
# topics when missing); no Read, no group
mapfile -t remote_write_writes < <(topics "$TELEMETRY" "$DEADLETTER")
bg allow User:aiops-remote-write Write,Describe,Create "${remote_write_writes[@]}"

if [ "${KAFKA_HOST_LISTENER_ACLS:-true}" != false ]; then
  bg allow User:ANONYMOUS Read,Write,Describe,Create --resource-pattern-type prefixed --topic aiops.
  bg allow User:ANONYMOUS Read,Describe --resource-pattern-type prefixed --group aiops-
fi
wait_all
log "done"

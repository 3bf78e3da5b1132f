"""The GPU hosts' Kafka listener as docker-compose.yml configures it, on a real broker: a broker of
its own (Kafka's jars from scripts/services kafka-lib, its own state and ports, the suite's TLS CA
from scripts/services tls-dir) started from the kafka service's environment in
docker-compose.yml, turned into server.properties as the apache/kafka image does
(KAFKA_FOO_BAR -> foo.bar, ___ -> -), with only addresses, ports, files and passwords replaced.
Its logins and ACLs are set by config/kafka/setup-acls.sh (kafka-configs and kafka-acls, as the
kafka-setup service runs it), and it is waited for with config/kafka/healthcheck.sh.

- a GPU host's login (User:gpu-host, SCRAM-SHA-512 over TLS on EXTERNAL) writes the telemetry
  topic, and ingest's (User:aiops-ingest, on INTERNAL) reads the record back in its group;
- its writes to the events, anomalies, predictions, progress and cohorts topics are refused
  (TopicAuthorizationFailed), and so is committing an offset for a consumer group;
- without a login, or with a wrong password, EXTERNAL takes nothing;
- the Prometheus door's login (User:aiops-remote-write, as the aiops-remote-write service logs in)
  makes its topics and writes telemetry and dead letters with the door's own producer; its writes
  to the events and anomalies topics and its offset commits are refused.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
SERVICES = str(ROOT / "scripts" / "services")
# this broker's ports, beside the suite's (9092..9095) and the TLS test's (9192..9195)
PORTS = {"INTERNAL": 9392, "CONTROLLER": 9393, "EXTERNAL": 9394, "HOST": 9396}
INTERNAL = f"localhost:{PORTS['INTERNAL']}"  # the suite's certificate names localhost and 127.0.0.1
EXTERNAL = f"127.0.0.1:{PORTS['EXTERNAL']}"
TEST_KEYSTORE_PASSWORD = "aiops-test"  # scripts/services kafka_tls_pki
PASSWORDS = {
    "KAFKA_ADMIN_PASSWORD": "admin-test-password",
    "KAFKA_GPU_HOST_PASSWORD": "gpu-host-test-password",
    "KAFKA_INGEST_PASSWORD": "ingest-test-password",
    "KAFKA_RUN_PASSWORD": "run-test-password",
    "KAFKA_DETECT_PASSWORD": "detect-test-password",
    "KAFKA_RCA_PASSWORD": "rca-test-password",
    "KAFKA_SCHEDULER_PASSWORD": "scheduler-test-password",
    "KAFKA_REMOTE_WRITE_PASSWORD": "remote-write-test-password",
}
TELEMETRY = "aiops.telemetry"
DEADLETTER = "aiops.deadletter"
# what a GPU host must not write (vocab/settings.py's defaults, which the compose daemons use)
NOT_THE_GPU_HOSTS = ["aiops.events", "aiops.anomalies", "aiops.predictions", "aiops.progress", "aiops.cohorts"]


def _open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message}, from `variables` (a required one
    that is missing fails the test, as compose would refuse to start)."""

    def one(match: re.Match[str]) -> str:
        name, how, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if variables.get(name):
            return variables[name]
        assert how != ":?", f"compose requires {name}: {rest}"
        return rest if how == ":-" else ""

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(:[-?])?([^}]*)\}", one, value)


def _property(env_name: str) -> str:
    """The apache/kafka image's KafkaDockerWrapper: KAFKA_ dropped, lower case, _ -> ., ___ -> -, __ -> _."""
    return env_name.removeprefix("KAFKA_").lower().replace("_", ".").replace("...", "-").replace("..", "_")


def compose_kafka_environment(variables: dict[str, str]) -> dict[str, str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["kafka"]["environment"]
    return {k: _interpolate(str(v), variables) for k, v in env.items()}


def server_properties(env: dict[str, str], state: Path, tls: Path) -> str:
    """docker-compose.yml's broker, here: its listeners on this test's ports (the compose network's
    name `kafka` is `localhost`), its data in `state`, the suite's keystore."""
    props = {_property(k): v for k, v in env.items() if k.startswith("KAFKA_")}
    ports = {"9092": PORTS["INTERNAL"], "9093": PORTS["CONTROLLER"], "29092": PORTS["HOST"], "29094": PORTS["EXTERNAL"]}
    listeners = []
    for item in props["listeners"].split(","):
        name, address = item.split("://")
        listeners.append(f"{name}://127.0.0.1:{ports[address.rsplit(':', 1)[1]]}")
    props["listeners"] = ",".join(listeners)
    props["advertised.listeners"] = ",".join(
        f"{name}://{'localhost' if name == 'INTERNAL' else '127.0.0.1'}:{PORTS[name]}"
        for name in (item.split("://")[0] for item in props["advertised.listeners"].split(","))
    )
    node, _ = props["controller.quorum.voters"].split("@")
    props["controller.quorum.voters"] = f"{node}@localhost:{PORTS['CONTROLLER']}"
    props["log.dirs"] = str(state / "data")
    props["ssl.keystore.location"] = str(tls / "broker.p12")
    props["ssl.truststore.location"] = str(tls / "ca.pem")
    props["process.roles"] = env["KAFKA_PROCESS_ROLES"]
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


@dataclass(frozen=True)
class Broker:
    ca: Path
    lib: Path
    env: dict[str, str]  # the kafka service's environment, interpolated


def _tool_env(broker: Broker, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **PASSWORDS,
        "KAFKA_LIB": str(broker.lib),
        "KAFKA_CA": str(broker.ca),
        "KAFKA_BOOTSTRAP": INTERNAL,
        **extra,
    }


@pytest.fixture(scope="module")
def compose_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    busy = [port for port in PORTS.values() if _open(port)]
    assert not busy, f"ports {busy} are taken: another run of this test, or something else"
    tls = Path(subprocess.run([SERVICES, "tls-dir"], capture_output=True, text=True, check=True).stdout.strip())
    lib = Path(subprocess.run([SERVICES, "kafka-lib"], capture_output=True, text=True, check=True).stdout.strip())
    variables = {**PASSWORDS, "KAFKA_TLS_PASSWORD": TEST_KEYSTORE_PASSWORD, "KAFKA_EXTERNAL_HOST": "127.0.0.1"}
    env = compose_kafka_environment(variables)
    state = tmp_path_factory.mktemp("kafka-acls")
    (state / "server.properties").write_text(server_properties(env, state, tls))
    (state / "log4j2.properties").write_text(
        "rootLogger.level=WARN\nrootLogger.appenderRef.file.ref=file\nappender.file.type=File\n"
        f"appender.file.name=file\nappender.file.fileName={state}/kafka.log\n"
        "appender.file.layout.type=PatternLayout\nappender.file.layout.pattern=[%d] %p %m (%c)%n\n"
    )
    java = ["java", "-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={state}/log4j2.properties", "-cp", f"{lib}/*"]
    subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", env["CLUSTER_ID"], "-c", str(state / "server.properties")],
        capture_output=True,
        check=True,
        timeout=120,
    )
    with (state / "kafka.out").open("wb") as out:
        process = subprocess.Popen([*java, "kafka.Kafka", str(state / "server.properties")], stdout=out, stderr=out)
    broker = Broker(tls / "ca.pem", lib, env)
    try:
        # the compose healthcheck, through INTERNAL as User:admin (TLS, PLAIN)
        check_env = _tool_env(
            broker,
            KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG=env[
                "KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"
            ],
        )
        deadline = time.monotonic() + 120
        while subprocess.run(
            ["bash", str(ROOT / "config" / "kafka" / "healthcheck.sh")], env=check_env, check=False
        ).returncode:
            assert process.poll() is None, (state / "kafka.out").read_text()[-3000:]
            assert time.monotonic() < deadline, (state / "kafka.log").read_text()[-3000:]
            time.sleep(1)
        # what the kafka-setup service does, twice: a second run changes nothing and succeeds
        for _ in range(2):
            done = subprocess.run(
                ["bash", str(ROOT / "config" / "kafka" / "setup-acls.sh")],
                env=_tool_env(broker),
                check=False,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        yield broker
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _client(broker: Broker, user: str, password: str, bootstrap: str, program: str) -> str:
    """A kafka-python client in a process of its own (see test_kafka_tls._in_a_client_process),
    logged in as `user` through the service's own settings (AIOPS_KAFKA__*), printing its answer."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AIOPS_KAFKA__BOOTSTRAP": bootstrap,
        "AIOPS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "AIOPS_KAFKA__SSL_CAFILE": str(broker.ca),
        "AIOPS_KAFKA__SASL_USERNAME": user,
        "AIOPS_KAFKA__SASL_PASSWORD": password,
    }
    prelude = "from ingest.kafka.client import security\nBOOTSTRAP = " + repr(bootstrap) + "\n"
    done = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", prelude + program],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def _as(broker: Broker, user: str, program: str, bootstrap: str = INTERNAL) -> str:
    password = PASSWORDS[f"KAFKA_{user.removeprefix('aiops-').replace('-', '_').upper()}_PASSWORD"]
    return _client(broker, user, password, bootstrap, program)


def _commit(broker: Broker, user: str, groups: tuple[str, ...], bootstrap: str = INTERNAL) -> dict[str, str]:
    """What committing an offset of the telemetry topic in each of `groups` answers `user`:
    "committed" or the error's name."""
    answers = _as(
        broker,
        user,
        f"""
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
answers = {{}}
for group in {groups!r}:
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=group, enable_auto_commit=False,
        request_timeout_ms=15000, **security())
    part = TopicPartition({TELEMETRY!r}, 0)
    consumer.assign([part])
    try:
        consumer.commit({{part: OffsetAndMetadata(0, "", -1)}})
    except KafkaError as refused:
        answers[group] = type(refused).__name__
    else:
        answers[group] = "committed"
    consumer.close(autocommit=False)
print(repr(answers))
""",
        bootstrap,
    )
    result: dict[str, str] = ast.literal_eval(answers)
    return result


def _make_topics(broker: Broker, user: str, topics: list[str]) -> None:
    made = _as(
        broker,
        user,
        f"""
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, **security())
for topic in {topics!r}:
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
admin.close()
print("made")
""",
    )
    assert made == "made"


PRODUCE = """
from kafka import KafkaProducer
from kafka.errors import KafkaError
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, max_block_ms=10000, retries=0, **security())
answers = {}
for topic in TOPICS:
    try:
        producer.send(topic, LINE).get(timeout=15)
    except KafkaError as refused:
        answers[topic] = type(refused).__name__
    else:
        answers[topic] = "written"
producer.close()
print(repr(answers))
"""


def _produce(broker: Broker, topics: list[str], line: bytes, user: str = "gpu-host", bootstrap: str = EXTERNAL) -> Any:
    program = f"TOPICS = {topics!r}\nLINE = {line!r}\n" + PRODUCE
    return eval(_as(broker, user, program, bootstrap))  # our own child's repr of a dict of str


def test_a_gpu_host_writes_telemetry_that_ingest_reads_back(compose_broker: Broker) -> None:
    _make_topics(compose_broker, "aiops-ingest", [TELEMETRY])
    line = f"gpu,gpu=n00001-gpu0,node=n00001 DCGM_FI_DEV_GPU_TEMP=41 {time.time_ns()}\n".encode()
    assert _produce(compose_broker, [TELEMETRY], line) == {TELEMETRY: "written"}
    read = _as(
        compose_broker,
        "aiops-ingest",
        f"""
from kafka import KafkaConsumer
consumer = KafkaConsumer({TELEMETRY!r}, bootstrap_servers=BOOTSTRAP, group_id="aiops-ingest",
    auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000, **security())
values = [m.value for m in consumer]
consumer.commit()  # ingest commits its group's offsets: allowed for its own group
consumer.close()
print(repr(values))
""",
    )
    assert line in eval(read)


def test_a_gpu_host_may_write_no_other_topic(compose_broker: Broker) -> None:
    # the topics exist (made by the principals that own them), so a refusal is about the ACLs
    _make_topics(compose_broker, "aiops-scheduler", ["aiops.events"])
    _make_topics(
        compose_broker, "aiops-detect", ["aiops.anomalies", "aiops.predictions", "aiops.progress", "aiops.cohorts"]
    )
    answers = _produce(compose_broker, NOT_THE_GPU_HOSTS, b"gpu,node=n00001 fake=1\n")
    assert answers == dict.fromkeys(NOT_THE_GPU_HOSTS, "TopicAuthorizationFailedError")
    # nor make one (auto-creation needs Create, which it has nowhere)
    assert _produce(compose_broker, ["aiops.somewhere-new"], b"x\n") == {
        "aiops.somewhere-new": "TopicAuthorizationFailedError"
    }
    # while the principal the topic belongs to writes it
    assert _produce(compose_broker, ["aiops.events"], b"{}", user="aiops-scheduler", bootstrap=INTERNAL) == {
        "aiops.events": "written"
    }


def test_a_gpu_host_may_not_commit_a_groups_offsets(compose_broker: Broker) -> None:
    _make_topics(compose_broker, "aiops-ingest", [TELEMETRY])
    answers = _commit(compose_broker, "gpu-host", ("aiops-ingest", "aiops-run", "gpu-host"), bootstrap=EXTERNAL)
    assert answers == dict.fromkeys(("aiops-ingest", "aiops-run", "gpu-host"), "GroupAuthorizationFailedError")


def test_the_gpu_hosts_listener_takes_no_one_without_the_login(compose_broker: Broker) -> None:
    program = """
from kafka import KafkaProducer
from kafka.errors import KafkaError
try:
    KafkaProducer(bootstrap_servers=BOOTSTRAP, request_timeout_ms=5000, max_block_ms=10000, **security()).close()
except KafkaError as refused:
    print("refused", type(refused).__name__)
else:
    print("accepted")
"""
    assert _client(compose_broker, "gpu-host", "not-the-password", EXTERNAL, program).startswith("refused")
    # the broker's own PLAIN login is not offered on EXTERNAL: SCRAM-SHA-512 only
    assert compose_broker.env["KAFKA_LISTENER_NAME_EXTERNAL_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"


def test_the_prometheus_door_writes_telemetry_and_dead_letters_and_nothing_else(compose_broker: Broker) -> None:
    """Issue 65, item 5: User:aiops-remote-write, the aiops-remote-write service's login."""
    door = "aiops-remote-write"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"][door]["environment"]["AIOPS_KAFKA__SASL_USERNAME"] == door
    line = f"gpu,gpu=n00002-gpu0,node=n00002 DCGM_FI_DEV_GPU_TEMP=42 {time.time_ns()}\n".encode()
    # what the door does at start and for a request (ingest/remote_write_service.py run_remote_write):
    # its two topics made where missing, then its lines and a dead letter through its producer
    published = _as(
        compose_broker,
        door,
        f"""
from ingest.kafka import TelemetryProducer, ensure_topics
ensure_topics(BOOTSTRAP, [{TELEMETRY!r}, {DEADLETTER!r}])
producer = TelemetryProducer(BOOTSTRAP, client_id="aiops-remote-write")
producer.send_raw({TELEMETRY!r}, {line!r}, key=b"n00002")
producer.send_raw({DEADLETTER!r}, b'{{"reason": "acl test"}}', key=b"remote_write")
producer.flush(timeout_s=30)
producer.close()
print("published")
""",
    )
    assert published == "published"
    # the topics it must not write exist (made by the principals that own them): a refusal is the ACLs'
    _make_topics(compose_broker, "aiops-scheduler", ["aiops.events"])
    _make_topics(compose_broker, "aiops-detect", ["aiops.anomalies"])
    topics = [TELEMETRY, DEADLETTER, "aiops.events", "aiops.anomalies"]
    assert _produce(compose_broker, topics, line, user=door, bootstrap=INTERNAL) == {
        TELEMETRY: "written",
        DEADLETTER: "written",
        "aiops.events": "TopicAuthorizationFailedError",
        "aiops.anomalies": "TopicAuthorizationFailedError",
    }
    # no group: it reads nothing, so it commits no offsets, its own name's group or ingest's
    answers = _commit(compose_broker, door, ("aiops-ingest", "aiops-remote-write"))
    assert answers == dict.fromkeys(("aiops-ingest", "aiops-remote-write"), "GroupAuthorizationFailedError")

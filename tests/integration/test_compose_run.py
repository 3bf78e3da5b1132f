"""The compose files, run as shipped (issue 65): the README's site checklist walked line by line in a
copy of the repository, then every service of docker-compose.yml and compose.site.yml, with every
profile, started from the definition compose-go resolves (tests/integration/compose_run.py: how,
without a Docker engine) in the image `scripts/container build` made, on a bridge of its own where
each container has its own address and the service names resolve.

What a site needs of it, checked in order:
- Kafka (SASL_SSL, ACLs) and InfluxDB come up healthy under their compose definitions, kafka-setup
  completes, and our services start in depends_on order: ingest, the analysis daemon, the
  Prometheus door and the scheduler's follower; every healthcheck passes;
- a GPU host (the generator, with the GPU hosts' login `gpu-host`, TLS and the CA) publishes an hour
  of a 256-GPU cluster with four faults to KAFKA_EXTERNAL_HOST:19092, the listener compose.site.yml
  publishes; the analysis daemon opens incidents and delivers them to a webhook stand-in, each
  message with a link to its incident page under AIOPS_PUBLIC_URL;
- it checkpoints into the state volume (as the image's user), and a restart (SIGTERM, exit 0
  within its stop_grace_period, then started again) resumes from it, sending no message twice;
- the real Prometheus remote-writes a dcgm-exporter stand-in's scrapes through the published door
  (TLS, bearer token) and ingest stores them in InfluxDB;
- the follower reads the suite's real slurmrestd (at SLURM_URL, with the JWT in config/slurm-jwt)
  and publishes its jobs;
- split detection (`--profile split`, aiops-run scaled to 0): two aiops-detect members and
  aiops-rca open incidents from the same telemetry;
- then everything keeps running, healthy, for SPAN_S more seconds.

A container that exits fails the test with its log. The run's log (each container's argv and
environment as resolved, secrets masked) is printed at the end, and kept with each container's
output under the test's tmp folder.

On 5b6a13f this fails first at the analysis daemon: no scrape interval (exit 2), then, with one
given, at its first checkpoint (PermissionError in a root-owned state volume).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.collectors.dcgm_exporter import ExporterServer, read_counters
from tests.integration.compose_run import (
    ROOT,
    SERVICES_SCRIPT,
    HostContainer,
    ImageContainer,
    Network,
    Project,
    ServiceFailedError,
    image_config,
)
from tests.integration.compose_run import Forwarder as PortForwarder
from tests.integration.test_compose_config import compose_config  # noqa: F401  (fixture)
from tests.integration.test_container import image  # noqa: F401  (fixture: the built image)
from tests.integration.test_kafka_acls import _property
from tests.integration.test_prometheus_remote_write import _prometheus, prometheus_config
from tests.integration.test_run_kafka import FAULTS, GEN
from tests.integration.test_telegraf import OUR_COUNTERS

pytestmark = [pytest.mark.slow, pytest.mark.services]

FILES = ("docker-compose.yml", "compose.site.yml")
PROFILES = ("prometheus", "slurm", "split")
PUBLIC_URL = "https://aiops.site.example"
INTERVAL_S = GEN[GEN.index("--interval") + 1]  # the generated cluster's scrape interval
SPAN_S = 90  # how long everything keeps running, healthy, at the end
# the host Prometheus scrapes: a name the generated cluster does not have (its GPUs reach InfluxDB
# through the door only)
PROMETHEUS_HOST = "prom-gpu-host-01"
CHECKLIST_MARK = "<!-- site checklist: walked by tests/integration/test_compose_run.py -->"
# the apache/kafka image's defaults: its heap, and variables that are the launcher's, not the broker's
KAFKA_HEAP = ["-Xmx1G", "-Xms1G"]
NOT_BROKER_SETTINGS = {"KAFKA_LIB", "KAFKA_CA", "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_LOG4J_OPTS"}


# ---------------------------------------------------------------- stand-ins outside the compose project


@dataclass
class Webhook:
    """The chat app: a `kind: webhook` receiver's URL, on the head node's address (the containers
    reach it over the bridge). Each POST's JSON body, as sent."""

    host: str
    posts: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                posts.append({"path": self.path, "content_type": self.headers.get("Content-Type"), "body": body})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.url = f"http://{self.host}:{self.server.server_address[1]}/hooks/oncall"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(p["body"]) for p in list(self.posts)]

    def incident_links(self) -> list[str]:
        """Each incident's page link in the messages (our webhook JSON: `incidents[].links`)."""
        links = [n.get("links", {}).get("Incident", "") for body in self.bodies() for n in body.get("incidents", [])]
        return [link for link in links if link.startswith(f"{PUBLIC_URL}/incidents/")]


def _wait(what: str, ready: Callable[[], bool], timeout_s: float, project: Project) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        project.check_running()
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}\n{project.run_log.read_text()[-3000:]}")
        time.sleep(2)
    project.say(f"seen: {what}")


# ---------------------------------------------------------------- the images we cannot run: their programs


def kafka_program(lib: Path) -> tuple[Callable[[HostContainer], list[str]], Callable[[HostContainer], None]]:
    """apache/kafka's entrypoint: the KAFKA_* variables become server.properties (KAFKA_FOO_BAR ->
    foo.bar, ___ -> -, __ -> _), the storage is formatted with CLUSTER_ID on the first start, the
    broker logs to its output."""

    def properties(container: HostContainer) -> Path:
        return container.state / "server.properties"

    def prepare(container: HostContainer) -> None:
        env = container.env()
        props = {_property(k): v for k, v in env.items() if k.startswith("KAFKA_") and k not in NOT_BROKER_SETTINGS}
        properties(container).write_text("".join(f"{k}={v}\n" for k, v in sorted(props.items())))
        (container.state / "log4j2.properties").write_text(
            "rootLogger.level=INFO\nrootLogger.appenderRef.out.ref=out\nappender.out.type=Console\n"
            "appender.out.name=out\nappender.out.layout.type=PatternLayout\n"
            "appender.out.layout.pattern=[%d] %p %m (%c)%n\nlogger.kafka.name=kafka\nlogger.kafka.level=WARN\n"
            "logger.apache.name=org.apache.kafka\nlogger.apache.level=WARN\n"
        )
        if not (Path(props["log.dirs"]) / "meta.properties").exists():
            subprocess.run(
                [
                    *java(container),
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    env["CLUSTER_ID"],
                    "-c",
                    str(properties(container)),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )

    def java(container: HostContainer) -> list[str]:
        return [
            "java",
            *KAFKA_HEAP,
            f"-Dlog4j2.configurationFile={container.state}/log4j2.properties",
            "-cp",
            f"{lib}/*",
        ]

    def program(container: HostContainer) -> list[str]:
        return [*java(container), "kafka.Kafka", str(properties(container))]

    return program, prepare


def command_program(container: HostContainer) -> list[str]:
    """The service's own command, its in-image paths moved (kafka-setup: bash setup-acls.sh)."""
    return [container.moved(str(a)) for a in container.definition.spec["command"]]


def _services_path(what: str) -> Path:
    done = subprocess.run([str(SERVICES_SCRIPT), what], capture_output=True, text=True, check=True, timeout=900)
    return Path(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the README's checklist, walked


def checklist_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert CHECKLIST_MARK in text, "the README's site checklist is gone"
    block = text.split(CHECKLIST_MARK, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def _command(line: str) -> str:
    """The line without its comment (`  # ...`)."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def _fill_env(env_file: Path, values: dict[str, str]) -> None:
    """The operator's edit of .env: every REQUIRED empty value set, and the site's own values."""
    text = env_file.read_text(encoding="utf-8")
    required: set[str] = set()
    for paragraph in re.split(r"\n\s*\n", text):
        if "REQUIRED" in paragraph:
            required.update(re.findall(r"^([A-Z_][A-Z0-9_]*)=[ \t]*$", paragraph, flags=re.MULTILINE))
    filled = {name: f"test{name.lower().replace('_', '')}" for name in required}  # letters and digits
    filled["AIOPS_STATE_KEY"] = "0123456789abcdef" * 4
    filled["GRAFANA_ADMIN_PASSWORD"] = "grafana-test"
    filled.update(values)
    missing = [name for name in values if not re.search(rf"^{name}=", text, flags=re.MULTILINE)]
    assert not missing, f".env.example lacks {missing}"

    def one(match: re.Match[str]) -> str:
        return f"{match.group(1)}={filled[match.group(1)]}" if match.group(1) in filled else match.group(0)

    env_file.write_text(re.sub(r"^([A-Z_][A-Z0-9_]*)=.*$", one, text, flags=re.MULTILINE), encoding="utf-8")


def _notify_config(path: Path, webhook_url: str) -> None:
    """The operator's edit of config/notify.yml: the chat app's URL in `oncall`; this site has no
    Alertmanager, so its receiver and route go."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["receivers"] = [r for r in config["receivers"] if r["kind"] != "alertmanager"]
    config["receivers"][0]["url"] = webhook_url
    config["routes"] = [r for r in config["routes"] if r["receiver"] != "alertmanager"]
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def walk_checklist(
    site: Path, env_values: dict[str, str], webhook_url: str, cluster: Path, say: Callable[[str], None]
) -> None:
    """Each line of the README's block, in order: shell lines run as written (after the line that
    loads .env, with it loaded); the three lines that ask for a person's edit or a real cluster's
    tools are done as a person would: .env's values, the webhook URL, and the topology of the
    generated cluster (its telemetry comes from the GPU host below) for `aiops topology import`."""
    loaded = ""
    handled = {"env": False, "tls": False, "door": False, "notify": False, "topology": False, "up": False}
    for line in checklist_lines():
        command = _command(line)
        say(f"checklist: {command}")
        if command.startswith("docker compose "):
            assert command.split()[1:] == [
                "compose",
                "-f",
                "docker-compose.yml",
                "-f",
                "compose.site.yml",
                "up",
                "-d",
                "--build",
            ]
            handled["up"] = True  # the caller starts the project from compose-go's model of these files
            continue
        if command.startswith("aiops topology import "):
            assert command.endswith("--out config/topology.json")
            shutil.copy(cluster / "topology.json", site / "config" / "topology.json")
            shutil.copy(cluster / "events.jsonl", site / "config" / "events.jsonl")
            handled["topology"] = True
            continue
        if command.startswith("set -a;"):
            loaded = command + "\n"
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", loaded + command],
            cwd=site,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
        if command == "cp .env.example .env":
            _fill_env(site / ".env", env_values)
            handled["env"] = True
        elif command == "cp config/notify.example.yml config/notify.yml":
            _notify_config(site / "config" / "notify.yml", webhook_url)
            handled["notify"] = True
        elif command.endswith("make-tls.sh"):
            handled["tls"] = True
        elif command.endswith("make-remote-write-tls.sh"):
            handled["door"] = True
        else:
            raise AssertionError(f"the README's checklist has a line this test does not know: {line}")
    assert all(handled.values()), handled


# ---------------------------------------------------------------- the run


@pytest.fixture
def network() -> Iterator[Network]:
    made = Network.create()
    yield made
    made.remove()


def _site_copy(site: Path) -> None:
    """What a clone holds that the compose files and the checklist read."""
    for name in ("docker-compose.yml", "compose.site.yml", ".env.example", "Dockerfile"):
        shutil.copy(ROOT / name, site / name)
    shutil.copytree(ROOT / "config", site / "config", ignore=shutil.ignore_patterns("tls"))


def _resolve(binary: Path, site: Path) -> dict[str, Any]:
    args = [str(binary), "--project-directory", str(site), "--env-file", str(site / ".env")]
    for name in FILES:
        args += ["-f", str(site / name)]
    for profile in PROFILES:
        args += ["--profile", profile]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"compose-go refused the site's files:\n{done.stderr}"
    model: dict[str, Any] = json.loads(done.stdout)
    return model


def _gpu_host_env(site: Path, password: str) -> dict[str, str]:
    """A GPU host's Kafka login, as Telegraf's node.conf takes it (AIOPS_KAFKA_USER=gpu-host)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIOPS_")}
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "AIOPS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "AIOPS_KAFKA__SSL_CAFILE": str(site / "config" / "kafka" / "tls" / "ca.pem"),
        "AIOPS_KAFKA__SASL_USERNAME": "gpu-host",
        "AIOPS_KAFKA__SASL_PASSWORD": password,
    }


def _env_file_values(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE))


def _api(container: ImageContainer | Any, path: str) -> Any:
    return requests.get(f"http://{container.address}:8080{path}", timeout=10).json()


def _incidents(container: Any) -> list[dict[str, Any]]:
    try:
        body = _api(container, "/api/incidents")
    except (requests.RequestException, ValueError):
        return []
    return list(body.get("incidents", body) if isinstance(body, dict) else body)


def _influx_nodes(address: str) -> set[str]:
    try:
        body = requests.get(
            f"http://{address}:8086/query",
            params={"db": "aiops", "q": 'SHOW TAG VALUES FROM "gpu" WITH KEY = "node"'},
            timeout=10,
        ).json()
    except (requests.RequestException, ValueError):
        return set()
    series = (body.get("results") or [{}])[0].get("series") or []
    return {value for s in series for _, value in s.get("values") or []}


# about 6 minutes alone (the image built), 10 on a loaded machine; lanes side by side on 2 cores slow it more
@pytest.mark.timeout(2400)
def test_the_compose_services_run_as_shipped(
    image: None,  # noqa: F811
    compose_config: Path,  # noqa: F811
    network: Network,
    tmp_path: Path,
) -> None:
    from tests.slurm_site import SlurmSite

    site = tmp_path / "site"
    site.mkdir()
    _site_copy(site)
    project_logs = tmp_path / "run"
    webhook = Webhook(network.gateway)
    forwarders: list[PortForwarder] = []
    project: Project | None = None
    try:
        slurm: SlurmSite | None = SlurmSite.find()
    except pytest.skip.Exception as why:  # the rest runs; the follower is not started, and the log says why
        slurm = None
        slurm_missing = str(why)
    try:
        # the generated cluster a site would export from its inventory (same seed: the GPU host's later)
        cluster = tmp_path / "cluster"
        gen = [sys.executable, "-m", "aiops.cli", "gen", *GEN, *FAULTS]
        subprocess.run(
            [*gen, "--out", str(cluster)],
            check=True,
            capture_output=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        env_values = {
            # the head node's address on the management network: the bridge's, here
            "KAFKA_EXTERNAL_HOST": network.gateway,
            "KAFKA_EXTERNAL_BIND": network.gateway,
            "AIOPS_SCRAPE_INTERVAL_S": INTERVAL_S,
            "AIOPS_PUBLIC_URL": PUBLIC_URL,
            "AIOPS_API_TOKEN": "api-test-token",
            "SLURM_URL": f"http://{network.gateway}:6820",
            "SLURM_USER": slurm.user if slurm else "aiops",
        }
        project_logs.mkdir()
        say_early: list[str] = []
        walk_checklist(site, env_values, webhook.url, cluster, say_early.append)
        if slurm is not None:  # the site's slurmrestd, outside the project, on the head node's address
            (site / "config" / "slurm-jwt").write_text(f"SLURM_JWT={slurm.token()}\n")
            (site / "config" / "slurm-jwt").chmod(0o644)
            rest_port = int(slurm.rest.rsplit(":", 1)[1])
            forwarders.append(PortForwarder((network.gateway, 6820), ("127.0.0.1", rest_port)))

        model = _resolve(compose_config, site)
        project = Project(model, project_logs, image_config(), network)
        for line in say_early:
            project.say(line)
        if slurm is None:
            project.say(f"no Slurm here, aiops-scheduler not started: {slurm_missing}")
        lib = _services_path("kafka-lib")
        program, prepare = kafka_program(lib)
        project.on_host("kafka", program, {"KAFKA_LIB": str(lib), "KAFKA_CA": "/etc/kafka/aiops/tls/ca.pem"}, prepare)
        project.on_host("kafka-setup", command_program, {"KAFKA_LIB": str(lib)})
        influxd = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops")) / "bin" / "influxd"
        # the influxdb image's influxdb.conf puts its files under /var/lib/influxdb (its volume)
        project.on_host(
            "influxdb",
            lambda _c: [str(influxd)],
            {
                "INFLUXDB_META_DIR": "/var/lib/influxdb/meta",
                "INFLUXDB_DATA_DIR": "/var/lib/influxdb/data",
                "INFLUXDB_DATA_WAL_DIR": "/var/lib/influxdb/wal",
            },
        )
        values = _env_file_values(site / ".env")

        # ---- phase 1: `up` with the default services and the prometheus and slurm profiles
        ours = ["aiops", "aiops-run", "aiops-remote-write"] + (["aiops-scheduler"] if slurm else [])
        project.plan(["kafka", "kafka-setup", "influxdb", *ours, "aiops-detect", "aiops-rca"])
        project.up(["kafka", "influxdb"])
        project.wait_healthy(project.container("influxdb"))
        # the influxdb image's entrypoint creates INFLUXDB_DB on its first start
        influx = project.container("influxdb").address
        db = project.services["influxdb"]["environment"]["INFLUXDB_DB"]
        requests.post(
            f"http://{influx}:8086/query", params={"q": f'CREATE DATABASE "{db}"'}, timeout=10
        ).raise_for_status()
        project.up(ours)
        for container in project.running():
            if container.healthcheck() is not None:
                project.wait_healthy(container)

        # ---- a GPU host publishes an hour of telemetry to the listener compose.site.yml publishes
        host_env = _gpu_host_env(site, values["KAFKA_GPU_HOST_PASSWORD"])
        publish = subprocess.run(
            [*gen, "--kafka", f"{values['KAFKA_EXTERNAL_HOST']}:19092", "--truth-dir", str(tmp_path / "gpu-host")],
            env=host_env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert publish.returncode == 0, publish.stderr[-3000:]
        project.say("the GPU host published its hour of telemetry")
        run = project.container("aiops-run")
        _wait(
            "an incident delivered to the webhook with its page's link",
            lambda: bool(webhook.incident_links()),
            420,
            project,
        )
        opened = _incidents(run)
        assert opened, "the API lists no incident"
        link_ids = {link.rsplit("/", 1)[1] for link in webhook.incident_links()}
        assert link_ids <= {i["incident_id"] for i in opened}, (link_ids, [i["incident_id"] for i in opened])

        # ---- the checkpoint, in the state volume, as the image's user
        state = project.volumes_dir / f"{project.name}_aiops-state"
        _wait("a checkpoint in the state volume", lambda: any(state.glob("*.ckpt")), 120, project)
        checkpoint = next(state.glob("*.ckpt"))
        assert checkpoint.stat().st_uid == run.uid if isinstance(run, ImageContainer) else True

        # ---- the Prometheus door: the real Prometheus remote-writes through the published port
        token = site / "config" / "kafka" / "tls" / "remote-write" / "token"
        ca = site / "config" / "kafka" / "tls" / "ca.pem"
        door = f"{values['KAFKA_EXTERNAL_HOST']}:9201"
        with (
            ExporterServer(PROMETHEUS_HOST, 8, read_counters(OUR_COUNTERS)) as exporter,
            (tmp_path / "prometheus.log").open("wb") as log,
        ):
            (tmp_path / "prometheus.yml").write_text(prometheus_config(exporter.url, door, token, ca))
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                web = s.getsockname()[1]
            prometheus = subprocess.Popen(
                [
                    _prometheus(),
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{web}",
                ],
                stdout=log,
                stderr=log,
            )
            try:
                _wait(
                    f"{PROMETHEUS_HOST}'s GPUs, remote-written through the door, in InfluxDB",
                    lambda: PROMETHEUS_HOST in _influx_nodes(influx),
                    180,
                    project,
                )
            finally:
                prometheus.terminate()
                prometheus.wait(timeout=30)

        # ---- the scheduler's follower published Slurm's jobs
        if slurm is not None:
            follower = project.container("aiops-scheduler")
            _wait("the follower's first poll published", lambda: "published" in follower.log_text(), 120, project)

        # ---- a restart of the analysis daemon: graceful, resumed from its checkpoint, nothing sent twice
        sent_before = len(webhook.posts)
        codes = project.restart("aiops-run")
        assert codes == [0], run.log_tail()
        project.wait_healthy(run)
        # (its API answers before the checkpoint is read: the line may come after the healthcheck)
        _wait(
            "aiops-run resumed from its checkpoint",
            lambda: "resuming from the checkpoint of" in run.log_text().rsplit("---- start 2:", 1)[1],
            120,
            project,
        )
        time.sleep(45)  # a notification group's wait (30 s) and more
        keys = [body["key"] for body in webhook.bodies() if not body.get("repeat")]
        assert len(keys) == len(set(keys)), f"a message sent twice across the restart ({sent_before} before): {keys}"

        # ---- split detection in place of aiops-run (`--profile split up -d --scale aiops-run=0`)
        project.stop("aiops-run")
        project.up(["aiops-detect", "aiops-rca"])
        rca = project.container("aiops-rca")
        project.wait_healthy(rca)
        _wait("incidents from split detection", lambda: bool(_incidents(rca)), 420, project)

        # ---- and everything keeps running, healthy
        end = time.monotonic() + SPAN_S
        while time.monotonic() < end:
            project.check_running()
            time.sleep(5)
        for container in project.running():
            if container.healthcheck() is not None:
                ok, output = container.healthy_once()
                assert ok, f"{container.definition.name} unhealthy at the end: {output}"
        project.say(f"every service ran for {SPAN_S} s more, healthy")
        for service in reversed(list(project.containers)):
            if service in ("kafka", "influxdb", "kafka-setup"):
                continue
            codes = project.stop(service)
            assert set(codes) <= {0, None}, (service, codes, project.container(service).log_tail())
    except ServiceFailedError:
        raise
    finally:
        webhook.close()
        for forwarder in forwarders:
            forwarder.close()
        if project is not None:
            project.down()
            print(project.run_log.read_text())


def test_the_checklist_names_every_site_file_the_compose_files_mount() -> None:
    """Every bind mount of our services that a site makes (git ignores it) is made by a line of the checklist."""
    lines = "\n".join(checklist_lines())
    assert "make-tls.sh" in lines and "make-remote-write-tls.sh" in lines
    assert "config/notify.yml" in lines and "config/topology.json" in lines and ".env" in lines
    mounted = set(re.findall(r"^\s+- (\./config/kafka/tls[^:\s]*):", (ROOT / "docker-compose.yml").read_text(), re.M))
    assert mounted == {"./config/kafka/tls/ca.pem", "./config/kafka/tls/remote-write"}
    for line in checklist_lines():  # each command is shell a person can paste (comments aside)
        assert shlex.split(_command(line)), line

"""A compose project run here as Docker Compose runs it, with no Docker engine (issue 65).

The model is compose-go's (tools/compose-config: what `docker compose config` prints), and every
service is started from its definition alone:

- **Network**: one bridge for the project, one network namespace per container with an address of
  its own on it, and in each an /etc/hosts naming every service (Docker's embedded DNS answers the
  service names; a file answers them here). A container's ports are its own, as in Docker: two
  services may both listen on 8080.
- **Our image** (`aiops-gpu:latest`): a working container of the built image per service replica
  (`scripts/container rootfs NAME`, kept across a restart as Docker keeps a container's
  filesystem), entered with chroot as the image's USER (or the service's `user`), in its working
  dir (or `working_dir`), with the image's environment, then the service's `environment`, and
  `entrypoint` + `command` over the image's. Volumes are mounted at their targets: a bind mount from
  its source (read-only where `:ro`); a named volume from a folder of the project's, which, new,
  takes the image's content, owner and mode at its mount path (Docker's rule; a path the image
  lacks makes it root's). `init: true` (tini as PID 1) has no equivalent without a PID namespace:
  the command is the process, and SIGTERM goes to it.
- **The images we cannot run here** (apache/kafka, influxdb): the same program from the suite's
  builds (Kafka's jars, the influxd built from its Go module), in the service's network namespace
  under the service's name, started from the service's `environment` as the image's entrypoint
  reads it, their paths under the service's volumes moved to the volumes' folders (the one change,
  logged). Grafana is not run (AGPL: not used here, and no build of it): nothing of ours depends
  on it.
- **Ports**: a port published on an address other than loopback (compose.site.yml's
  KAFKA_EXTERNAL_BIND) is forwarded from that address, as docker-proxy does; one published on
  127.0.0.1 is not (the suite's own services hold the host's loopback ports), and the log says so:
  the test reaches those services at their addresses, as the host reaches a Docker bridge.
- **depends_on** conditions (service_started, service_healthy, service_completed_successfully)
  are waited for in order, healthchecks run in the container (`CMD`, `CMD-SHELL`) with their
  interval, timeout, retries and start_period.

Every container's argv and environment (secrets masked) go to the run's log, and each container's
output to a file of its own (appended across restarts, as `docker logs`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_SCRIPT = ROOT / "scripts" / "container"
SERVICES_SCRIPT = ROOT / "scripts" / "services"
OUR_IMAGE = "aiops-gpu:latest"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$|JAAS", re.IGNORECASE)


def masked(env: dict[str, str]) -> dict[str, str]:
    return {k: ("***" if SECRET_NAME.search(k) and v else v) for k, v in env.items()}


def go_duration_s(text: str | None, default: float) -> float:
    """A Go duration as compose-go prints it ("1m30s", "500ms", "10s") in seconds."""
    if not text:
        return default
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(ms|us|µs|ns|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


# ---------------------------------------------------------------- the project's network


@dataclass
class Network:
    """A bridge with a /24 of 172.31.0.0/16 that no interface here uses; the host is its .1."""

    prefix: str
    bridge: str
    namespaces: list[str] = field(default_factory=list)

    @classmethod
    def create(cls) -> Network:
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        for third in range(200, 255):
            prefix = f"172.31.{third}"
            bridge = f"aiopsbr{third}"
            if f" {prefix}." not in used and not Path(f"/sys/class/net/{bridge}").exists():
                try:
                    _ip("link", "add", bridge, "type", "bridge")
                except subprocess.CalledProcessError:  # another project took it meanwhile
                    continue
                _ip("addr", "add", f"{prefix}.1/24", "dev", bridge)
                _ip("link", "set", bridge, "up")
                return cls(prefix, bridge)
        raise RuntimeError("no free 172.31.x.0/24 for the project's bridge")

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def attach(self, namespace: str) -> str:
        """A network namespace with lo, and eth0 on the bridge at the next address; its address."""
        index = len(self.namespaces) + 2
        address = f"{self.prefix}.{index}"
        host_side, inner = f"{self.bridge}h{index}", f"{self.bridge}c{index}"
        _ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        _ip("link", "add", host_side, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", host_side, "master", self.bridge, "up")
        for args in (
            ("link", "set", "lo", "up"),
            ("link", "set", inner, "name", "eth0"),
            ("addr", "add", f"{address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("route", "add", "default", "via", self.gateway),
        ):
            _ip("-n", namespace, *args)
        return address

    def remove(self) -> None:
        for namespace in self.namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
            shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)


class Forwarder:
    """A published port: connections to (address, port) are relayed to a container's (as docker-proxy)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen, reuse_port=False)
        self.server.settimeout(0.5)
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name=f"forward-{listen[1]}").start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        source.settimeout(None)
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):  # the other direction's recv ends with an error: it is done too
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


# ---------------------------------------------------------------- containers


@dataclass
class Definition:
    """One container of a service: what compose-go resolved, with the name it runs under."""

    service: str
    name: str  # <project>-<service>-<n>
    spec: dict[str, Any]

    @property
    def environment(self) -> dict[str, str]:
        return {k: ("" if v is None else str(v)) for k, v in (self.spec.get("environment") or {}).items()}

    @property
    def hostname(self) -> str:
        return str(self.spec.get("hostname") or self.name)


class Container:
    """A started container: its process, log file, address, and how to run a command beside it."""

    def __init__(self, definition: Definition, address: str, namespace: str, log_path: Path) -> None:
        self.definition = definition
        self.address = address
        self.namespace = namespace
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # what each kind of container fills in
    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def launch(self) -> list[str]:
        """The command line that starts argv() in this container."""
        raise NotImplementedError

    def in_container(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """A command run beside the service (a healthcheck, `docker compose exec`)."""
        raise NotImplementedError

    def before_start(self) -> None:
        """What the image's entrypoint does before the program (format storage, write config)."""

    def start(self) -> None:
        self.before_start()
        with self.log_path.open("ab") as log:
            log.write(f"---- start {self.starts + 1}: {shlex.join(self.argv())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self.launch(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM, then SIGKILL after the grace period, as `docker compose stop`: the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def log_tail(self, chars: int = 6000) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return text[-chars:]

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def healthcheck(self) -> list[str] | None:
        test = (self.definition.spec.get("healthcheck") or {}).get("test")
        if not test or test[0] == "NONE" or (self.definition.spec.get("healthcheck") or {}).get("disable"):
            return None
        if test[0] == "CMD":
            return list(test[1:])
        if test[0] == "CMD-SHELL":
            return ["/bin/sh", "-c", " ".join(test[1:])]
        raise AssertionError(f"{self.definition.name}: healthcheck test {test!r}")

    def healthy_once(self) -> tuple[bool, str]:
        check = self.healthcheck()
        assert check is not None
        timeout = go_duration_s((self.definition.spec.get("healthcheck") or {}).get("timeout"), 30)
        try:
            done = self.in_container(check, timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout} s"
        return done.returncode == 0, (done.stdout + done.stderr)[-1500:]


def _image_user(rootfs: Path, user: str) -> tuple[int, int, str]:
    """uid, gid and home of `user` (a name or a number, optionally :group) in the image's passwd."""
    name = user.split(":", 1)[0]
    for line in (rootfs / "etc" / "passwd").read_text().splitlines():
        parts = line.split(":")
        if name in (parts[0], parts[2]):
            return int(parts[2]), int(parts[3]), parts[5]
    if name.isdigit():
        return int(name), int(name), "/"
    raise AssertionError(f"user {user!r} is not in the image")


class ImageContainer(Container):
    """A container of our image, entered with chroot as its user."""

    def __init__(
        self,
        definition: Definition,
        address: str,
        namespace: str,
        log_path: Path,
        image: dict[str, Any],
        volumes: Callable[[str, Path, str], Path],
        hosts: str,
    ) -> None:
        super().__init__(definition, address, namespace, log_path)
        self.image = image
        self.working_name = namespace  # the bridge's name first: two projects here never share one
        self.rootfs = Path(
            subprocess.run(
                [str(CONTAINER_SCRIPT), "rootfs", self.working_name], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        user = str(definition.spec.get("user") or image.get("User") or "root")
        self.uid, self.gid, self.home = _image_user(self.rootfs, user)
        self.workdir = str(definition.spec.get("working_dir") or image.get("WorkingDir") or "/")
        (self.rootfs / "etc" / "hosts").write_text(hosts)
        (self.rootfs / "etc" / "hostname").write_text(definition.hostname + "\n")
        self.mounts: list[tuple[Path, str, bool]] = []  # host path, target, read only
        for volume in definition.spec.get("volumes") or []:
            target = volume["target"]
            if volume["type"] == "bind":
                source = Path(volume["source"])
            elif volume["type"] == "volume":
                source = volumes(volume["source"], self.rootfs, target)
            else:
                raise AssertionError(f"{definition.name}: volume type {volume['type']}")
            self.mounts.append((source, target, bool(volume.get("read_only"))))
        self.mounts.sort(key=lambda mount: mount[1].rstrip("/").count("/"))  # parents first, as Docker mounts

    def argv(self) -> list[str]:
        entrypoint = self.definition.spec.get("entrypoint")
        command = self.definition.spec.get("command")
        if entrypoint is None:
            entrypoint = self.image.get("Entrypoint") or []
            command = (self.image.get("Cmd") or []) if command is None else command
        return [*entrypoint, *(command or [])]

    def env(self) -> dict[str, str]:
        env = dict(item.split("=", 1) for item in self.image.get("Env") or [])
        env.update({"HOSTNAME": self.definition.hostname, "HOME": self.home})
        env.update(self.definition.environment)
        return env

    def _entered(self, argv: list[str]) -> list[str]:
        root = shlex.quote(str(self.rootfs))
        hostname = shlex.quote(self.definition.hostname)
        steps = [f"hostname {hostname}", f"mount --rbind /dev {root}/dev", f"mount --rbind /proc {root}/proc"]
        for source, target, read_only in self.mounts:
            inside = shlex.quote(f"{self.rootfs}{target}")
            make = f"mkdir -p {inside}" if source.is_dir() else f"mkdir -p $(dirname {inside}) && touch {inside}"
            steps += [make, f"mount --bind {shlex.quote(str(source))} {inside}"]
            if read_only:
                steps.append(f"mount -o remount,bind,ro {inside}")
        steps.append(f'exec chroot --userspec={self.uid}:{self.gid} {root} "$@"')
        env = [f"{k}={v}" for k, v in self.env().items()]
        inner = ["env", "-i", *env, "sh", "-c", 'cd "$0" && exec "$@"', self.workdir, *argv]
        return [
            "ip",
            "netns",
            "exec",
            self.namespace,
            "unshare",
            "-m",
            "-u",
            "--propagation",
            "private",
            "sh",
            "-c",
            " && ".join(steps),
            "sh",
            *inner,
        ]

    def launch(self) -> list[str]:
        return self._entered(self.argv())

    def in_container(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._entered(argv), capture_output=True, text=True, timeout=timeout, check=False)


class HostContainer(Container):
    """A service whose image cannot run here: the same program from the suite's build, in the
    service's network namespace, its in-image paths under its volumes moved to the volumes' folders."""

    def __init__(
        self,
        definition: Definition,
        address: str,
        namespace: str,
        log_path: Path,
        hosts: str,
        volumes: Callable[[str, Path | None, str], Path],
        program: Callable[[HostContainer], list[str]],
        extra_env: dict[str, str],
        prepare: Callable[[HostContainer], None] | None = None,
    ) -> None:
        super().__init__(definition, address, namespace, log_path)
        etc = Path("/etc/netns") / namespace
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts)  # `ip netns exec` puts it at /etc/hosts
        self.paths: dict[str, Path] = {}
        for volume in definition.spec.get("volumes") or []:
            source = (
                Path(volume["source"])
                if volume["type"] == "bind"
                else volumes(volume["source"], None, volume["target"])
            )
            self.paths[volume["target"]] = source
        self.program = program
        self.extra_env = extra_env
        self.prepare = prepare
        self.state = log_path.parent / f"{definition.name}.state"
        self.state.mkdir(exist_ok=True)

    def moved(self, text: str) -> str:
        """An in-image path under one of the service's volumes, as the volume's folder here."""
        for target in sorted(self.paths, key=len, reverse=True):
            if text == target or text.startswith(target.rstrip("/") + "/"):
                return str(self.paths[target]) + text[len(target.rstrip("/")) :]
        return text

    def env(self) -> dict[str, str]:
        env = {k: self.moved(v) for k, v in self.definition.environment.items()}
        extra = {k: self.moved(v) for k, v in self.extra_env.items()}
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.state), **env, **extra}

    def argv(self) -> list[str]:
        return self.program(self)

    def before_start(self) -> None:
        if self.prepare is not None:
            self.prepare(self)

    def _in_namespace(self, argv: list[str]) -> list[str]:
        env = [f"{k}={v}" for k, v in self.env().items()]
        named = ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', self.definition.hostname]
        return ["ip", "netns", "exec", self.namespace, *named, "env", "-i", *env, *argv]

    def launch(self) -> list[str]:
        return self._in_namespace(self.argv())

    def in_container(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._in_namespace([self.moved(a) for a in argv]),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


# ---------------------------------------------------------------- the project


class ServiceFailedError(AssertionError):
    pass


class Project:
    """compose-go's model of a project, run here: `up(services)`, `stop`, `restart`, `check_running`."""

    def __init__(self, model: dict[str, Any], workdir: Path, image: dict[str, Any], network: Network) -> None:
        self.model = model
        self.name = str(model.get("name") or "aiops")
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.volumes_dir = workdir / "volumes"
        self.volumes_dir.mkdir(exist_ok=True)
        self.image = image
        self.network = network
        self._namespaces: dict[str, str] = {}
        self.containers: dict[str, list[Container]] = {}
        self.forwarders: list[Forwarder] = []
        self.run_log = self.logs / "compose-run.log"
        self.addresses: dict[str, str] = {}
        self.host_programs: dict[str, tuple[Callable[[HostContainer], list[str]], dict[str, str], Any]] = {}
        self.stopped: set[str] = set()  # containers stopped on purpose

    # -- logging
    def say(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        with self.run_log.open("a", encoding="utf-8") as out:
            out.write(f"[{stamp}] {line}\n")

    @property
    def services(self) -> dict[str, dict[str, Any]]:
        return dict(self.model["services"])

    def definitions(self, service: str) -> list[Definition]:
        spec = self.services[service]
        replicas = int((spec.get("deploy") or {}).get("replicas") or 1)
        return [Definition(service, f"{self.name}-{service}-{n}", spec) for n in range(1, replicas + 1)]

    # -- volumes, as Docker makes them
    def volume(self, name: str, rootfs: Path | None, target: str) -> Path:
        """The named volume's folder; new, it takes the image's content, owner and mode at target
        (a path the image lacks, or an image we cannot unpack here: root-owned and empty)."""
        declared = (self.model.get("volumes") or {}).get(name) or {}
        path = self.volumes_dir / str(declared.get("name") or f"{self.name}_{name}")
        if path.exists():
            return path
        source = rootfs / target.lstrip("/") if rootfs is not None else None
        if source is not None and source.is_dir():
            subprocess.run(["cp", "-a", str(source), str(path)], check=True)
            self.say(f"volume {path.name}: new, filled from the image's {target} ({_owner_mode(path)})")
        else:
            path.mkdir(mode=0o755)
            os.chown(path, 0, 0)
            self.say(f"volume {path.name}: new, the image has no {target}: root-owned ({_owner_mode(path)})")
        return path

    def hosts(self, definition: Definition) -> str:
        """The container's /etc/hosts: every service and container name, and its own hostname (as
        Docker writes it; Kafka resolves its own name at start)."""
        lines = ["127.0.0.1\tlocalhost"]
        for service, address in self.addresses.items():
            lines.append(f"{address}\t{service}")
        lines.append(f"{self.addresses[definition.name]}\t{definition.hostname}")
        return "\n".join(lines) + "\n"

    def plan(self, services: Iterable[str]) -> None:
        """Every container of these services gets its address first (the names resolve in each)."""
        for service in services:
            for definition in self.definitions(service):
                if definition.name not in self._namespaces:
                    namespace = f"{self.network.bridge}-{definition.name}"[:60]
                    address = self.network.attach(namespace)
                    self.addresses.setdefault(service, address)
                    self.addresses[definition.name] = address
                    self._namespaces[definition.name] = namespace

    def on_host(
        self,
        service: str,
        program: Callable[[HostContainer], list[str]],
        extra_env: dict[str, str] | None = None,
        prepare: Callable[[HostContainer], None] | None = None,
    ) -> None:
        self.host_programs[service] = (program, extra_env or {}, prepare)

    def _container(self, definition: Definition) -> Container:
        address = self.addresses[definition.name]
        namespace = self._namespaces[definition.name]
        log_path = self.logs / f"{definition.name}.log"
        if definition.spec.get("image") == OUR_IMAGE:
            return ImageContainer(
                definition, address, namespace, log_path, self.image, self.volume, self.hosts(definition)
            )
        program, extra_env, prepare = self.host_programs[definition.service]
        return HostContainer(
            definition, address, namespace, log_path, self.hosts(definition), self.volume, program, extra_env, prepare
        )

    def _describe(self, container: Container) -> None:
        spec = container.definition.spec
        if isinstance(container, ImageContainer):
            mounts = [(str(s), t, "ro" if ro else "rw") for s, t, ro in container.mounts]
            how = f"user {container.uid}:{container.gid}, working dir {container.workdir}, mounts: {mounts}"
        elif isinstance(container, HostContainer):
            how = f"paths moved to the volumes' folders: { {k: str(v) for k, v in container.paths.items()} }"
        depends = {k: v.get("condition") for k, v in (spec.get("depends_on") or {}).items()}
        self.say(
            f"container {container.definition.name} (service {container.definition.service}) at "
            f"{container.address}, hostname {container.definition.hostname}\n"
            f"    argv: {shlex.join(container.argv())}\n"
            f"    environment: {json.dumps(masked(container.env()), sort_keys=True)}\n"
            f"    {how}\n"
            f"    healthcheck: {spec.get('healthcheck')}, restart: {spec.get('restart')}, depends_on: {depends}"
        )

    def _publish(self, container: Container) -> None:
        for port in container.definition.spec.get("ports") or []:
            host_ip = port.get("host_ip") or "0.0.0.0"
            published = int(port["published"])
            if host_ip.startswith("127."):
                self.say(
                    f"port {host_ip}:{published} -> {container.definition.name}:{port['target']} not published "
                    f"(the suite's services hold the host's loopback): reached at {container.address}:{port['target']}"
                )
                continue
            self.forwarders.append(Forwarder((host_ip, published), (container.address, int(port["target"]))))
            self.say(f"port {host_ip}:{published} -> {container.definition.name}:{port['target']} published")

    # -- up, as `docker compose up -d SERVICES`: dependencies first, their conditions waited for
    def up(self, services: list[str], deadline_s: float = 600) -> None:
        order = self._order(services)
        self.plan(order)
        for service in order:
            if service in self.containers:
                continue
            for dependency, how in (self.services[service].get("depends_on") or {}).items():
                self._wait_condition(dependency, how.get("condition", "service_started"), deadline_s)
            self.containers[service] = []
            for definition in self.definitions(service):
                container = self._container(definition)
                self._describe(container)
                container.start()
                self._publish(container)
                self.containers[service].append(container)
                self.say(f"started {definition.name}")

    def _order(self, services: list[str]) -> list[str]:
        order: list[str] = []

        def visit(name: str) -> None:
            if name in order:
                return
            for dependency in self.services[name].get("depends_on") or {}:
                visit(dependency)
            order.append(name)

        for name in services:
            visit(name)
        return order

    def _wait_condition(self, service: str, condition: str, deadline_s: float) -> None:
        containers = self.containers[service]
        if condition == "service_started":
            return
        if condition == "service_completed_successfully":
            for container in containers:
                assert container.process is not None
                try:
                    rc = container.process.wait(timeout=deadline_s)
                except subprocess.TimeoutExpired:
                    raise ServiceFailedError(
                        f"{container.definition.name} did not complete:\n{container.log_tail()}"
                    ) from None
                if rc != 0:
                    raise ServiceFailedError(f"{container.definition.name} exited {rc}:\n{container.log_tail()}")
                self.say(f"{container.definition.name} completed successfully")
            return
        assert condition == "service_healthy", condition
        for container in containers:
            self.wait_healthy(container)

    def wait_healthy(self, container: Container) -> None:
        """Docker's rule: checks every `interval`; failures in `start_period` do not count; unhealthy
        after `retries` failures in a row. Unhealthy, or the process gone, fails."""
        spec = container.definition.spec.get("healthcheck") or {}
        assert container.healthcheck() is not None, f"{container.definition.name} has no healthcheck"
        interval = go_duration_s(spec.get("interval"), 30)
        start_period = go_duration_s(spec.get("start_period"), 0)
        retries = int(spec.get("retries") or 3)
        started = time.monotonic()
        failures = 0
        while True:
            self.check_running([container])
            ok, output = container.healthy_once()
            if ok:
                self.say(f"{container.definition.name} healthy after {time.monotonic() - started:.0f} s")
                return
            if time.monotonic() - started > start_period:
                failures += 1
            if failures >= retries:
                raise ServiceFailedError(
                    f"{container.definition.name} unhealthy ({retries} failures after its start period): {output}\n"
                    f"{container.log_tail()}"
                )
            time.sleep(min(interval, 2.0) if time.monotonic() - started < start_period else interval)

    def running(self) -> Iterator[Container]:
        for containers in self.containers.values():
            for container in containers:
                if container.definition.name not in self.stopped and container.definition.spec.get("restart") != "no":
                    yield container

    def check_running(self, containers: Iterable[Container] | None = None) -> None:
        """A container of a long-running service that exited fails the run with its log."""
        for container in containers if containers is not None else self.running():
            if container.definition.spec.get("restart") == "no":
                continue
            if not container.alive():
                rc = container.process.returncode if container.process else None
                raise ServiceFailedError(f"{container.definition.name} exited ({rc}):\n{container.log_tail()}")

    def container(self, service: str, index: int = 0) -> Container:
        return self.containers[service][index]

    def stop(self, service: str) -> list[int | None]:
        grace = go_duration_s(self.services[service].get("stop_grace_period"), 10)
        codes = []
        for container in self.containers.get(service, []):
            self.stopped.add(container.definition.name)
            started = time.monotonic()
            rc = container.stop(grace)
            self.say(f"stopped {container.definition.name}: exit {rc} after {time.monotonic() - started:.1f} s")
            codes.append(rc)
        return codes

    def restart(self, service: str) -> list[int | None]:
        """`docker compose restart SERVICE`: the same containers (filesystem, volumes) started again."""
        codes = self.stop(service)
        for container in self.containers[service]:
            self.stopped.discard(container.definition.name)
            container.start()
            self.say(f"restarted {container.definition.name}")
        return codes

    def down(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()
        for service in reversed(list(self.containers)):
            for container in self.containers[service]:
                container.stop(5)
        for containers in self.containers.values():
            for container in containers:
                if isinstance(container, ImageContainer):
                    subprocess.run(
                        [str(CONTAINER_SCRIPT), "rm", container.working_name], capture_output=True, check=False
                    )


def _owner_mode(path: Path) -> str:
    st = path.stat()
    return f"owner {st.st_uid}:{st.st_gid}, mode {st.st_mode & 0o7777:o}"


def image_config() -> dict[str, Any]:
    done = subprocess.run([str(CONTAINER_SCRIPT), "config"], capture_output=True, text=True, check=True)
    config: dict[str, Any] = json.loads(done.stdout)
    return config

"""`docker compose config` equivalence (issue 65): the compose model the tests read is the one
compose-go resolves.

There is no Docker engine here, so tools/compose-config (built once by
`scripts/services build-compose-config` into ~/.cache/aiops/bin) loads the files with compose-go,
the library the docker compose CLI loads them with, exactly as
`docker compose -f A [-f B] --env-file E [--profile P] config --format json` does, and prints the
resolved model. The env file is .env.example with every empty value of its REQUIRED paragraphs
filled in, as the README tells an operator to do.

For docker-compose.yml alone and with compose.site.yml, with no profile and with each profile the
files declare:
- a small Python resolver (yaml.safe_load, `${VAR}`, `${VAR:-default}`, `${VAR:?message}`
  substitution and compose's merge rules for the keys these files use) must give, for every
  service of our image, the same command, entrypoint, environment, user, working_dir, volumes,
  ports, depends_on conditions, healthcheck and restart as compose-go;
- the properties the deployment relies on hold on compose-go's model (`resolved`, a fixture other
  compose tests can import: `from tests.integration.test_compose_config import resolved`).

Without Go (or with no cached binary and the Go module proxy unreachable) the tests skip and say
which.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.daemon_state import MIN_KEY_CHARS
from tests.integration.test_compose import _environment, _service, _setting_path_exists, clean_env
from vocab.settings import OTHER_VARIABLES, Settings

__all__ = ["clean_env", "resolved"]  # clean_env: test_compose's fixture, used here

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = "docker-compose.yml"
SITE_FILE = "compose.site.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SERVICES_SCRIPT = ROOT / "scripts" / "services"
OUR_IMAGE = "aiops-gpu:latest"
STATE_VOLUME, STATE_DIR = "aiops-state", "/var/lib/aiops-state"

# test values for the REQUIRED variables that are not passwords (the passwords get test-<name>)
TEST_VALUES = {
    "AIOPS_STATE_KEY": "0123456789abcdef" * 4,  # `openssl rand -hex 32`: 64 hex characters
    "KAFKA_EXTERNAL_BIND": "10.0.0.5",
}
# files a site makes that the repository does not ship (documented: .env.example, config/kafka/.gitignore)
SITE_FILES = ("config/kafka/tls",)

FILE_SETS: dict[str, tuple[str, ...]] = {"compose": (COMPOSE_FILE,), "compose+site": (COMPOSE_FILE, SITE_FILE)}


def _declared_profiles() -> list[str]:
    """Every profile a service of either file declares."""
    found: set[str] = set()
    for name in (COMPOSE_FILE, SITE_FILE):
        data = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))
        for service in (data.get("services") or {}).values():
            found.update((service or {}).get("profiles") or [])
    return sorted(found)


PROFILES = _declared_profiles()
PROFILE_SETS: list[tuple[str, ...]] = [(), *((p,) for p in PROFILES), tuple(PROFILES)]
CASES = [
    pytest.param(files, profiles, id=f"{fid}-{'+'.join(profiles) or 'no-profile'}")
    for fid, files in FILE_SETS.items()
    for profiles in PROFILE_SETS
]


# ---------------------------------------------------------------- the env file an operator writes


def _required_empty_names(text: str) -> list[str]:
    """Every `NAME=` with an empty value in a paragraph (lines between blank lines) that says REQUIRED."""
    names: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        if "REQUIRED" not in paragraph:
            continue
        names += re.findall(r"^([A-Z_][A-Z0-9_]*)=[ \t]*$", paragraph, flags=re.MULTILINE)
    return names


def _example_values() -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE.read_text(encoding="utf-8"), flags=re.MULTILINE))


def _operator_env() -> dict[str, str]:
    """.env.example's values with every REQUIRED empty one set, as the README says."""
    values = _example_values()
    for name in _required_empty_names(ENV_EXAMPLE.read_text(encoding="utf-8")):
        values[name] = TEST_VALUES.get(name, f"test-{name.lower().replace('_', '-')}")
    return values


def _write_env(path: Path, values: dict[str, str]) -> Path:
    """.env.example with its values replaced (comments and order kept), written to path."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}={values[name]}" if name in values else ""

    path.write_text(
        re.sub(r"^([A-Z_][A-Z0-9_]*)=.*$", fill, ENV_EXAMPLE.read_text(encoding="utf-8"), flags=re.MULTILINE),
        encoding="utf-8",
    )
    return path


# ---------------------------------------------------------------- compose-go


@pytest.fixture(scope="session")
def compose_config() -> Path:
    """tools/compose-config, built once (cached under ~/.cache/aiops/bin) by scripts/services."""
    cache = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops"))
    if shutil.which("go") is None:
        cached = cache / "bin" / "compose-config"
        if not os.access(cached, os.X_OK):
            pytest.skip("no Go on PATH and no compose-config built: scripts/services build-compose-config needs Go")
    done = subprocess.run(
        [str(SERVICES_SCRIPT), "build-compose-config"], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        log = cache / "run" / "logs" / "compose-config-build.log"
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.is_file() else ""
        if re.search(r"dial tcp|no such host|i/o timeout|proxyconnect|connection refused|TLS handshake", tail):
            pytest.skip(f"the Go module proxy is unreachable and compose-config is not built yet:\n{tail}")
        pytest.fail(f"scripts/services build-compose-config failed:\n{done.stderr}\n{tail}")
    return Path(done.stdout.strip().splitlines()[-1])


def _run_compose_config(
    binary: Path, files: Sequence[str], profiles: Sequence[str], env_file: Path
) -> subprocess.CompletedProcess[str]:
    args = [str(binary), "--project-directory", str(ROOT), "--env-file", str(env_file)]
    for name in files:
        args += ["-f", str(ROOT / name)]
    for profile in profiles:
        args += ["--profile", profile]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="session")
def operator_env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_env(tmp_path_factory.mktemp("compose-env") / ".env", _operator_env())


@pytest.fixture(scope="session")
def resolved(compose_config: Path, operator_env_file: Path) -> Callable[[Sequence[str], Sequence[str]], dict[str, Any]]:
    """resolved(files, profiles) -> compose-go's model (`docker compose config --format json`) of
    those files (names relative to the repository) with the operator's env file and profiles."""

    @functools.cache
    def load(files: tuple[str, ...], profiles: tuple[str, ...]) -> str:
        done = _run_compose_config(compose_config, files, profiles, operator_env_file)
        assert done.returncode == 0, f"compose-go refused {files} {profiles}:\n{done.stderr}"
        return done.stdout

    def resolve(files: Sequence[str], profiles: Sequence[str] = ()) -> dict[str, Any]:
        model: dict[str, Any] = json.loads(load(tuple(files), tuple(profiles)))
        return model

    return resolve


# ---------------------------------------------------------------- a Python reading of the YAML

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariableError(Exception):
    pass


def _substitute(text: str, env: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("braced") or match.group("named")
        op, arg = match.group("op"), match.group("arg") or ""
        value = env.get(name)
        missing = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in ("-", ":-"):
            return arg if missing else str(value)
        if op in ("?", ":?"):
            if missing:
                raise MissingVariableError(f"required variable {name} is missing a value: {arg}")
            return str(value)
        return value or ""

    return _VARIABLE.sub(one, text)


def _interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _substitute(node, env)
    if isinstance(node, list):
        return [_interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _interpolate(value, env) for key, value in node.items()}
    return node


def _short_port(entry: Any) -> dict[str, Any]:
    if isinstance(entry, dict):
        return {
            "host_ip": entry.get("host_ip"),
            "published": None if entry.get("published") is None else str(entry["published"]),
            "target": int(entry["target"]),
            "protocol": entry.get("protocol", "tcp"),
        }
    spec, _, protocol = str(entry).partition("/")
    *front, target = spec.rsplit(":", 2)  # [[host_ip:]published:]target
    host_ip = front[0] if len(front) == 2 else None
    published = front[-1] if front else None
    return {"host_ip": host_ip, "published": published, "target": int(target), "protocol": protocol or "tcp"}


def _short_volume(entry: Any) -> dict[str, Any]:
    if isinstance(entry, dict):
        source = entry.get("source")
        if entry["type"] == "bind" and source:
            source = os.path.normpath(os.path.join(ROOT, source))
        return {
            "type": entry["type"],
            "source": source,
            "target": entry["target"],
            "read_only": bool(entry.get("read_only")),
        }
    parts = str(entry).split(":")
    source, target, mode = parts[0], parts[1], (parts[2] if len(parts) > 2 else "")
    bind = source.startswith((".", "/", "~"))
    return {
        "type": "bind" if bind else "volume",
        "source": os.path.normpath(os.path.join(ROOT, source)) if bind else source,
        "target": target,
        "read_only": "ro" in mode.split(","),
    }


def _merge_service(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """compose's merge of an override file's service into the base one, for the keys used here."""
    out = dict(base)
    for key, value in over.items():
        if key == "environment":
            out[key] = {**_environment(base), **_environment(over)}
        elif key == "ports":
            merged = [_short_port(p) for p in base.get("ports", [])]
            merged += [p for p in map(_short_port, value) if p not in merged]  # appended, unique
            out[key] = merged
        elif key == "volumes":
            by_target = {v["target"]: v for v in map(_short_volume, base.get("volumes", []))}
            by_target.update({v["target"]: v for v in map(_short_volume, value)})  # keyed by target
            out[key] = list(by_target.values())
        elif key == "depends_on":
            out[key] = {**_depends_on(base), **_depends_on(over)}
        elif isinstance(value, dict) and isinstance(base.get(key), dict) and key != "healthcheck":
            out[key] = {**base[key], **value}
        elif key == "healthcheck" and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}  # healthcheck.test is overridden whole
        else:
            out[key] = value  # command, entrypoint and scalars: overridden
    return out


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {
        name: spec if isinstance(spec, str) else (spec or {}).get("condition", "service_started")
        for name, spec in deps.items()
    }


def python_model(files: Sequence[str], profiles: Sequence[str], env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Services of the files as a Python reading resolves them: each file interpolated, then merged
    in order; the services whose profiles are not enabled left out."""
    services: dict[str, dict[str, Any]] = {}
    for name in files:
        data = _interpolate(yaml.safe_load((ROOT / name).read_text(encoding="utf-8")), env)
        for service_name, service in (data.get("services") or {}).items():
            services[service_name] = _merge_service(services.get(service_name, {}), service or {})
    return {name: s for name, s in services.items() if not s.get("profiles") or set(s["profiles"]) & set(profiles)}


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|ns|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _seconds(value: Any) -> float | None:
    """A compose duration ("120s", "1m30s") or Go's ("2m0s") in seconds."""
    if value is None:
        return None
    parts = _DURATION.findall(str(value))
    assert "".join(n + u for n, u in parts) == str(value), f"not a duration: {value!r}"
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _command(value: Any) -> list[str] | None:
    if value is None:
        return None
    return [str(v) for v in value] if isinstance(value, list) else str(value).split()


def _view(service: dict[str, Any]) -> dict[str, Any]:
    """The properties compared, in one shape for both readings."""
    health = service.get("healthcheck")
    return {
        "command": _command(service.get("command")),
        "entrypoint": _command(service.get("entrypoint")),
        "environment": _environment(service),
        "user": service.get("user"),
        "working_dir": service.get("working_dir"),
        "volumes": sorted((_short_volume(v) for v in service.get("volumes", [])), key=lambda v: v["target"]),
        "ports": sorted(
            (_short_port(p) for p in service.get("ports", [])),
            key=lambda p: (p["host_ip"] or "", p["published"] or "", p["target"]),
        ),
        "depends_on": _depends_on(service),
        "healthcheck": None
        if health is None
        else {
            "test": health.get("test"),
            "retries": health.get("retries"),
            **{k: _seconds(health.get(k)) for k in ("interval", "timeout", "start_period", "start_interval")},
        },
        "restart": service.get("restart"),
    }


def _ours(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("image") == OUR_IMAGE}


# ---------------------------------------------------------------- tests


def test_the_operator_env_fills_what_compose_requires() -> None:
    """The REQUIRED paragraphs of .env.example name every `${X:?...}` variable it leaves empty."""
    required = set()
    for name in (COMPOSE_FILE, SITE_FILE):
        required |= set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):?\?", (ROOT / name).read_text(encoding="utf-8")))
    example = _example_values()
    marked = set(_required_empty_names(ENV_EXAMPLE.read_text(encoding="utf-8")))
    unmarked = {name for name in required if not example.get(name) and name not in marked}
    assert not unmarked, f"compose requires these, .env.example leaves them empty without saying REQUIRED: {unmarked}"
    assert {"GRAFANA_ADMIN_PASSWORD", "AIOPS_STATE_KEY", "KAFKA_EXTERNAL_BIND", "KAFKA_TLS_PASSWORD"} <= marked
    assert PROFILES, "the compose files declare no profile"


@pytest.mark.parametrize(("files", "profiles"), CASES)
def test_python_reading_equals_compose_go(
    files: tuple[str, ...],
    profiles: tuple[str, ...],
    resolved: Callable[[Sequence[str], Sequence[str]], dict[str, Any]],
) -> None:
    model = resolved(files, profiles)
    python = python_model(files, profiles, _operator_env())
    assert set(model["services"]) == set(python), "the services each reading enables differ"
    ours = _ours(model["services"])
    assert set(ours) == set(_ours(python)) and ours
    for name, service in ours.items():
        go_view, py_view = _view(service), _view(python[name])
        for key in go_view:
            assert go_view[key] == py_view[key], f"{name}.{key}: compose-go {go_view[key]!r} != Python {py_view[key]!r}"


@pytest.mark.parametrize(("files", "profiles"), CASES)
def test_the_deployment_properties_hold_on_compose_gos_model(
    files: tuple[str, ...],
    profiles: tuple[str, ...],
    resolved: Callable[[Sequence[str], Sequence[str]], dict[str, Any]],
) -> None:
    services = resolved(files, profiles)["services"]
    example = _example_values()
    analysers = {"aiops-run", "aiops-detect", "aiops-rca"} & set(services)
    assert "aiops-run" in analysers
    if "split" in profiles:
        assert {"aiops-detect", "aiops-rca"} <= analysers
    for name in analysers:
        env = services[name]["environment"]
        assert env.get("AIOPS_SCRAPE_INTERVAL_S") == example["AIOPS_SCRAPE_INTERVAL_S"], name
        assert float(env["AIOPS_SCRAPE_INTERVAL_S"]) > 0, name
    for name in {"aiops-run", "aiops-rca"} & set(services):
        notify = services[name]["environment"].get("AIOPS_NOTIFY_CONFIG")
        assert notify == "/etc/aiops/notify.yml", f"{name}: notifications on by default, got {notify!r}"
        config_mount = next(v for v in services[name]["volumes"] if v["target"] == "/etc/aiops")
        assert config_mount["source"] == str(ROOT / "config") and config_mount.get("read_only")
        assert (ROOT / "config" / "notify.example.yml").is_file(), "config/notify.yml is made from notify.example.yml"
    for name, service in services.items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                source = Path(volume["source"])
                relative = source.relative_to(ROOT).as_posix()  # inside the repository
                site_file = any(relative == f or relative.startswith(f + "/") for f in SITE_FILES)
                assert source.exists() or site_file, f"{name} mounts {relative}, which does not exist"
        env = service.get("environment") or {}
        if "AIOPS_STATE_DIR" in env:
            assert env["AIOPS_STATE_DIR"] == STATE_DIR, name
            assert re.fullmatch(r"[0-9a-f]{64}", env.get("AIOPS_STATE_KEY") or ""), name
            mount = [v for v in service["volumes"] if v["target"] == STATE_DIR]
            assert mount and mount[0]["type"] == "volume" and mount[0]["source"] == STATE_VOLUME, name
    # every published port is on loopback, except the site file's management-network address
    for name, service in services.items():
        for port in service.get("ports", []):
            allowed = {"127.0.0.1"} | ({TEST_VALUES["KAFKA_EXTERNAL_BIND"]} if SITE_FILE in files else set())
            assert port.get("host_ip") in allowed, f"{name} publishes {port}"


@pytest.mark.parametrize(("files", "profiles"), CASES)
def test_our_services_environment_parses_into_settings(
    files: tuple[str, ...],
    profiles: tuple[str, ...],
    resolved: Callable[[Sequence[str], Sequence[str]], dict[str, Any]],
    clean_env: pytest.MonkeyPatch,
) -> None:
    """What compose-go hands each daemon (empty strings included) is a valid configuration."""
    for name, service in _ours(resolved(files, profiles)["services"]).items():
        env = {k: v for k, v in service["environment"].items() if k.startswith("AIOPS_")}
        unknown = [k for k in env if not _setting_path_exists(k) and k not in OTHER_VARIABLES]
        assert not unknown, f"{name}: AIOPS_* variables that name no setting and nothing reads: {unknown}"
        if "AIOPS_STATE_KEY" in env:
            assert len(env["AIOPS_STATE_KEY"]) >= MIN_KEY_CHARS, name
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            Settings()  # raises on a value the daemon would refuse at start


def test_test_compose_plain_yaml_view_agrees_with_compose_go(
    resolved: Callable[[Sequence[str], Sequence[str]], dict[str, Any]],
) -> None:
    """tests/integration/test_compose.py reads docker-compose.yml as plain YAML: its helpers' view of
    our services' commands (with the variables substituted) and environment keys is compose-go's."""
    plain: dict[str, Any] = yaml.safe_load((ROOT / COMPOSE_FILE).read_text(encoding="utf-8"))
    model = resolved((COMPOSE_FILE,), tuple(PROFILES))["services"]
    env = _operator_env()
    ours = _ours(plain["services"])
    assert set(ours) == set(_ours(model))
    for name in ours:
        service = _service(plain, name)
        assert [_substitute(str(a), env) for a in service["command"]] == model[name]["command"], name
        assert set(_environment(service)) == set(model[name]["environment"]), name


@pytest.mark.parametrize("value", ["", None], ids=["blank", "unset"])
def test_a_missing_bind_address_fails_with_the_site_file_naming_it(
    value: str | None, compose_config: Path, tmp_path: Path
) -> None:
    values = _operator_env()
    if value is None:
        del values["KAFKA_EXTERNAL_BIND"]
    else:
        values["KAFKA_EXTERNAL_BIND"] = value
    env_file = _write_env(tmp_path / ".env", values)
    done = _run_compose_config(compose_config, (COMPOSE_FILE, SITE_FILE), (), env_file)
    assert done.returncode == 1 and not done.stdout
    message = re.search(r"\$\{KAFKA_EXTERNAL_BIND:\?([^}]+)\}", (ROOT / SITE_FILE).read_text(encoding="utf-8"))
    assert message
    assert "required variable KAFKA_EXTERNAL_BIND is missing a value" in done.stderr
    assert message.group(1) in done.stderr
    with pytest.raises(MissingVariableError, match="KAFKA_EXTERNAL_BIND"):
        python_model((COMPOSE_FILE, SITE_FILE), (), values)
    # docker-compose.yml alone publishes on loopback only and needs no bind address
    assert _run_compose_config(compose_config, (COMPOSE_FILE,), (), env_file).returncode == 0


def test_env_example_as_copied_is_refused_naming_a_required_variable(compose_config: Path, tmp_path: Path) -> None:
    """`cp .env.example .env` and nothing else: compose refuses, with .env.example's own message."""
    env_file = tmp_path / ".env"
    shutil.copy(ENV_EXAMPLE, env_file)
    done = _run_compose_config(compose_config, (COMPOSE_FILE,), (), env_file)
    assert done.returncode == 1
    named = set(re.findall(r"required variable ([A-Z_0-9]+) is missing a value", done.stderr))
    # compose-go names every one at once: exactly the REQUIRED ones docker-compose.yml reads
    marked = set(_required_empty_names(ENV_EXAMPLE.read_text(encoding="utf-8")))
    assert named == marked - {"KAFKA_EXTERNAL_BIND"}, done.stderr
    assert "see .env.example" in done.stderr and "set GRAFANA_ADMIN_PASSWORD" in done.stderr

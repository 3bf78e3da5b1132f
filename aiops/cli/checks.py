"""What `aiops` checks about its arguments before a command imports its stage (NumPy, pandas,
scikit-learn, numba: seconds on a busy host): folders and files that must exist, an output folder
that must not be overwritten, the receivers' URLs. Each refusal is one line that says what to
change or which command makes what is missing. Only the standard library and the notification
file's loader are imported here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MAKE_FOLDER = "aiops gen --out DIR makes one: a generated cluster"
NO_SOURCE = "give --input DIR --out DIR (offline) or --kafka HOST:PORT (a daemon)"
GPUS_PER_NODE = 8  # the generator's nodes (telemetry_gen/topology.py; that module imports NumPy)

# The URL schemes a receiver of each kind can be posted to: all of them are HTTP APIs
# (notify/*.py); an Apprise URL names its service in its scheme (tgram://, mailto://, ...),
# which Apprise itself checks.
HTTP_SCHEMES = ("http", "https")


class ArgumentError(Exception):
    """An argument the user can fix, found before any stage is imported."""


def _folder(value: str | None, option: str, needs: tuple[str, ...] = ("telemetry.lp",)) -> None:
    if not value:
        return
    path = Path(value)
    if not path.exists():
        raise ArgumentError(f"{option} {path}: no such folder ({MAKE_FOLDER})")
    if not path.is_dir():
        raise ArgumentError(f"{option} {path}: not a folder ({MAKE_FOLDER})")
    missing = [name for name in needs if not (path / name).is_file()]
    if missing:
        raise ArgumentError(f"{option} {path}: not a recorded cluster, it has no {', '.join(missing)} ({MAKE_FOLDER})")


def _file(value: str | None, option: str, what: str) -> None:
    if value and not Path(value).is_file():
        raise ArgumentError(f"{option} {value}: no such file ({what})")


def receiver_url_problems(config: Any) -> list[str]:
    """One line per receiver whose URL its kind cannot post to (a scheme misspelt, `htp://`, or
    no host): such a receiver would retry for its whole timeout and send nothing."""
    problems = []
    for receiver in config.receivers:
        if receiver.kind == "apprise":
            continue
        url = receiver.url.get_secret_value()
        parts = urlsplit(url)
        if parts.scheme.lower() not in HTTP_SCHEMES or not parts.hostname:
            shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
            problems.append(
                f"receiver {receiver.name!r} ({receiver.kind}): its url has {shown}"
                + ("" if parts.hostname else " and no host")
                + "; it must be an http:// or https:// URL"
            )
    return problems


def _notify_config(value: str | None) -> None:
    if not value:
        return
    _file(value, "--notify-config", "receivers and routes, YAML: see config/notify.example.yml")
    from notify.config import NotifyConfigError, load

    try:
        config = load(Path(value))
    except NotifyConfigError as exc:
        raise ArgumentError(str(exc)) from None
    problems = receiver_url_problems(config)
    if problems:
        raise ArgumentError(f"{value}: " + "; ".join(problems))


def _actions(value: str | None) -> None:
    """An action policy file that would stop the run after its stage is loaded: refused first.
    act.policy needs only YAML and pydantic."""
    if not value:
        return
    _file(value, "--actions", "action policies, YAML: see docs/acting.md")
    from act.policy import PolicyError, load

    try:
        load(Path(value))
    except PolicyError as exc:
        raise ArgumentError(str(exc).splitlines()[0] if str(exc) else "--actions: not a policy file") from None


def _http_url(value: str | None, option: str, example: str) -> None:
    """A service's URL: http(s) with a host (`htp://x` was followed for ever, publishing nothing)."""
    if value is None:
        return
    parts = urlsplit(value)
    if parts.scheme.lower() not in HTTP_SCHEMES or not parts.hostname:
        raise ArgumentError(f"{option} {value}: give an http:// or https:// URL with a host, e.g. {example}")


def _gpus(value: object) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value % GPUS_PER_NODE:
        raise ArgumentError(f"--gpus must be a positive multiple of {GPUS_PER_NODE}, got {value}")


def _out_folder(value: str | None, force: bool) -> None:
    if not value:
        return
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ArgumentError(f"--out {path}: is a file, not a folder")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ArgumentError(f"--out {path}: the folder is not empty; give another folder, or --force to overwrite it")


def listen_address(value: str) -> tuple[str, int]:
    """HOST:PORT (or :PORT, loopback only: another address is said, not defaulted to) for a
    listener; ArgumentError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ArgumentError(f"--remote-write {value}: give HOST:PORT to listen on, e.g. 127.0.0.1:9201")
    return host.strip("[]") or "127.0.0.1", int(port)


def check(args: argparse.Namespace) -> None:
    """Raise ArgumentError for the first argument of `args` that cannot work."""
    command = getattr(args, "command", None)
    kafka = bool(getattr(args, "kafka", None))
    for name in ("gpus", "hours", "speed", "interval"):
        value = getattr(args, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
            raise ArgumentError(f"--{name} takes a positive number, got {value:g}")
    if command in ("run", "detect") and not kafka:
        if not getattr(args, "input", None) or not getattr(args, "out", None):
            missing = " and ".join(o for o in ("--input", "--out") if not getattr(args, o[2:], None))
            raise ArgumentError(f"{missing} missing: {NO_SOURCE}")
        _folder(getattr(args, "input", None), "--input")
    if command == "run" and kafka and not args.topology:
        raise ArgumentError("with --kafka, give --topology FILE (the cluster's topology.json)")
    if command == "run" and kafka and not args.wait_for_topology:
        _file(args.topology, "--topology", "the cluster's topology.json: aiops topology import makes one")
    if command in ("run", "detect") and kafka:
        _file(args.events, "--events", "the scheduler's events, JSON lines: aiops scheduler follow writes them")
    if command in ("run", "detect"):
        _file(getattr(args, "model", None), "--model", "aiops predictor train --out MODEL makes one")
    if command in ("run", "demo"):
        _notify_config(getattr(args, "notify_config", None))
    if command == "run":
        _actions(getattr(args, "actions", None))
    if command == "ingest" and getattr(args, "remote_write", None):
        listen_address(args.remote_write)
        if args.remote_write_max_bytes is not None and args.remote_write_max_bytes <= 0:
            raise ArgumentError(f"--remote-write-max-bytes takes a positive size, got {args.remote_write_max_bytes}")
    if command == "gen":
        if bool(args.out) == bool(args.kafka):
            raise ArgumentError("give exactly one of --out DIR (files) or --kafka HOST:PORT")
        _gpus(args.gpus)
        _out_folder(args.out, args.force)
    if command == "eval" and not (args.run_dirs or args.run):
        raise ArgumentError("give the run to score: aiops eval RUN_DIR --truth FILE (the folder aiops run --out wrote)")
    if command == "scheduler" and getattr(args, "scheduler_command", None) == "follow":
        _http_url(args.slurm, "--slurm", "http://slurm-head:6820")
        _http_url(args.kubernetes, "--kubernetes", "https://10.0.0.1:6443")
    if command == "produce":
        _file(args.file, "file", "line protocol: aiops gen --out DIR writes DIR/telemetry.lp")
    if command == "demo" and not (args.sample or args.input):
        _gpus(args.gpus)
    if command == "demo":
        _file(getattr(args, "input", None), "--input", "line protocol: aiops gen --out DIR writes DIR/telemetry.lp")
        report = getattr(args, "report", None)
        if report:  # a folder a demo wrote before may be written again
            _out_folder(report, force=(Path(report) / "index.html").is_file())


__all__ = ["ArgumentError", "check", "listen_address", "receiver_url_problems"]

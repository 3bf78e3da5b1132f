"""Asking Slurm: slurmrestd over HTTP, or the CLI's JSON for sites without slurmrestd. Each read
gives one `Snapshot` of jobs, nodes and reservations (the parts it could read).

A scheduler that does not answer raises `SchedulerUnavailableError` (the follower waits and asks
again); an answer that is not usable Slurm JSON raises `SlurmFormatError` naming why.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from context.scheduler.slurm import ENDED, KNOWN_VERSIONS, SlurmFormatError, epoch, loads, parse_slurm, states
from context.scheduler.snapshot import Snapshot
from vocab.bounds import MAX_SLURM_BYTES, BoundError, read_bytes

log = logging.getLogger(__name__)

PARTS = ("jobs", "nodes", "reservations")
TIMEOUT_S = 30.0


class SchedulerUnavailableError(RuntimeError):
    """The scheduler did not answer (refused, timed out, a daemon down): asked again later."""


def recorded_time(doc: dict[str, Any], fallback: float) -> float:
    """When a recorded body was taken: its `last_update` (slurmrestd from v0.0.40), else the
    latest time it mentions (a job's start or end, a node's reason), else `fallback`."""
    stamp = epoch(doc.get("last_update"))
    if stamp is not None:
        return stamp
    seen: list[float] = []
    for job in doc.get("jobs") or []:
        if isinstance(job, dict):
            ended = bool(set(states(job.get("job_state"))) & set(ENDED))
            # a running job's end_time is when its time limit runs out, not a time it was seen
            for key in ("start_time", "submit_time", *(("end_time",) if ended else ())):
                t = epoch(job.get(key))
                if t is not None:
                    seen.append(t)
    for node in doc.get("nodes") or []:
        if isinstance(node, dict):
            t = epoch(node.get("reason_changed_at"))
            if t is not None:
                seen.append(t)
    return max(seen) if seen else fallback


def read_recorded(paths: Sequence[Path], at: float | None = None) -> list[Snapshot]:
    """Recorded slurmrestd or CLI bodies (any supported version) as snapshots in time order; a
    body's time is `at` if given, else `recorded_time` (its file's modification time last)."""
    snaps = []
    for path in paths:
        try:
            raw = read_bytes(path, MAX_SLURM_BYTES, "Slurm body")
        except BoundError as exc:
            raise SlurmFormatError(str(exc)) from None
        doc = loads(raw, str(path))
        now = at if at is not None else recorded_time(doc, path.stat().st_mtime)
        try:
            snaps.append(parse_slurm(doc, now))
        except SlurmFormatError as exc:
            raise SlurmFormatError(f"{path}: {exc}") from None
    snaps.sort(key=lambda s: s.time)
    return snaps


class SlurmRest:
    """slurmrestd: GET /slurm/<version>/{jobs,nodes,reservations} with Slurm's JWT headers. The
    version is the newest the server answers /ping for, unless given."""

    def __init__(
        self,
        url: str,
        user: str | None = None,
        token: Callable[[], str | None] | None = None,
        version: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if version is not None and version not in KNOWN_VERSIONS:
            raise SlurmFormatError(
                f"Slurm data_parser {version} is not a version this reader knows ({', '.join(KNOWN_VERSIONS)})"
            )
        self.url = url.rstrip("/")
        self.user, self.token, self.version, self.clock = user, token, version, clock

    def _get(self, path: str) -> bytes:
        headers = {"Accept": "application/json"}
        token = self.token() if self.token is not None else None
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        if token:
            headers["X-SLURM-USER-TOKEN"] = token
        request = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                # one byte past the bound is enough to refuse it (loads says so), never the whole
                return bytes(response.read(MAX_SLURM_BYTES + 1))
        except urllib.error.HTTPError as exc:
            body = exc.read(MAX_SLURM_BYTES + 1)
            try:  # slurmrestd explains itself in an errors body, or in plain text
                parse_slurm(loads(body, f"{path} (HTTP {exc.code})"), self.clock())
            except SlurmFormatError as explained:
                if exc.code in (401, 403):
                    raise SlurmFormatError(
                        f"slurmrestd refused the credentials (HTTP {exc.code}): {explained}"
                    ) from None
                if exc.code >= 500:
                    raise SchedulerUnavailableError(f"slurmrestd {path}: HTTP {exc.code}: {explained}") from None
                raise SlurmFormatError(f"slurmrestd {path}: HTTP {exc.code}: {explained}") from None
            raise SlurmFormatError(f"slurmrestd {path}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SchedulerUnavailableError(f"slurmrestd at {self.url} does not answer: {exc}") from None

    def _version(self) -> str:
        if self.version is None:
            for version in reversed(KNOWN_VERSIONS):
                try:
                    self._get(f"/slurm/{version}/ping")
                except SlurmFormatError:
                    continue  # not a version this server speaks (404), or refused: try older
                self.version = version
                log.info("slurmrestd at %s speaks %s", self.url, version)
                break
            else:
                raise SlurmFormatError(
                    f"slurmrestd at {self.url} answers none of {', '.join(KNOWN_VERSIONS)} (or refuses the credentials)"
                )
        return self.version

    def read(self) -> Snapshot:
        version = self._version()
        now = self.clock()
        snap = Snapshot(now)
        for part in PARTS:
            body = self._get(f"/slurm/{version}/{part}")
            snap = snap.merge(parse_slurm(loads(body, f"slurmrestd /slurm/{version}/{part}"), now))
        return snap


# the CLI's JSON commands, per part (Slurm 21.08 on; `scontrol show reservation --json` from 22.05)
CLI = {
    "jobs": ["squeue", "--all", "--json"],
    "nodes": ["sinfo", "--json"],
    "reservations": ["scontrol", "show", "reservation", "--json"],
}


class SlurmCli:
    """`squeue --json`, `sinfo --json`, `scontrol show reservation --json`, run on a host with the
    Slurm client and a valid munge key; a part whose command is missing or fails is left out."""

    def __init__(
        self,
        commands: dict[str, list[str]] | None = None,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.commands = commands or CLI
        self.env, self.clock = env, clock
        self.unsupported: set[str] = set()  # parts this Slurm's CLI has no JSON for (said once)

    def _run(self, part: str) -> bytes:
        argv = self.commands[part]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, env=self.env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SchedulerUnavailableError(f"{' '.join(argv)}: {exc}") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).decode(errors="replace").strip()[:300]
            # the controller away is waited for; anything else (a bad option) is said once
            if re.search(r"Unable to contact slurm controller|Socket timed out|Connection refused", why):
                raise SchedulerUnavailableError(f"{' '.join(argv)}: {why}")
            raise SlurmFormatError(f"{' '.join(argv)} exited {done.returncode}: {why}")
        return bytes(done.stdout)

    def read(self) -> Snapshot:
        now = self.clock()
        snap = Snapshot(now)
        for part in PARTS:
            if part in self.unsupported:
                continue
            try:
                body = self._run(part)
            except SlurmFormatError as exc:
                if "unrecognized option" in str(exc):  # 22.05's scontrol has no --json: asked no more
                    self.unsupported.add(part)
                log.warning("%s left out: %s", part, exc)
                continue
            snap = snap.merge(parse_slurm(loads(body, " ".join(self.commands[part])), now))
        return snap


def token_from(path: str | None, env_value: str | None) -> Callable[[], str | None]:
    """Slurm's JWT: from a file read on every request (a site rotates it), else a fixed value."""
    if path:
        return lambda: Path(path).read_text().strip().removeprefix("SLURM_JWT=") or None
    return lambda: env_value


__all__ = [
    "CLI",
    "SchedulerUnavailableError",
    "SlurmCli",
    "SlurmRest",
    "read_recorded",
    "recorded_time",
    "token_from",
]

"""The private Slurm cluster `scripts/services up` starts (Debian 12's Slurm 22.05.8 on 127.0.0.1:
slurmctld, one slurmd per node gpu01..gpu04 with eight H100 stand-ins each, slurmrestd with JWT),
as the tests drive it: submit GPU jobs, reserve a node for maintenance, drain one, and read it all
back as the raw JSON slurmrestd (v0.0.38, v0.0.37) and the CLI (`squeue --json`, `sinfo --json`)
write. Slurm 22.05's scontrol has no `--json` (23.02 added it): reservations come as JSON from
slurmrestd only, and `scontrol show` text is kept as the reference the JSON is checked against.

`SlurmSite.find()` skips the calling test, saying what is missing, when the cluster is not up.
`python -m tests.slurm_site record DIR` stages the scenario and writes what each source says."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

REST_VERSIONS = ("v0.0.38", "v0.0.37")
REST_PARTS = ("jobs", "nodes", "reservations")
# what 22.05's CLI writes as JSON: squeue (jobs) and sinfo (nodes); scontrol has no --json
CLI_JSON = {"jobs": ("squeue", "--json"), "nodes": ("sinfo", "--json")}
UNKNOWN_JOB = 999999


def state_dir() -> Path:
    """Where scripts/services keeps its state (its AIOPS_STATE, AIOPS_CACHE defaults)."""
    if os.environ.get("AIOPS_STATE"):
        return Path(os.environ["AIOPS_STATE"])
    return Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops")) / "run"


def read_env(path: Path) -> dict[str, str]:
    """The KEY=value lines (shell-quoted values) scripts/services writes to $STATE/slurm/env."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            words = shlex.split(value)
            out[key.strip()] = words[0] if words else ""
    return out


def _pid_alive(path: Path) -> bool:
    try:
        os.kill(int(path.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def index_list(text: str) -> tuple[int, ...]:
    """`0-1,4` -> (0, 1, 4): the IDX list of a GRES string."""
    out: list[int] = []
    for item in text.split(","):
        lo, _, hi = item.strip().partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return tuple(out)


@dataclass
class SlurmSite:
    conf: Path
    rest: str  # http://127.0.0.1:6920
    user: str
    token_cmd: str
    nodes: str  # host list, gpu[01-04]
    _token: tuple[str, float] | None = field(default=None, repr=False)

    # ------------------------------------------------------------ finding it

    @classmethod
    def find(cls, state: Path | None = None) -> SlurmSite:
        """The running cluster, or pytest.skip saying what is missing."""
        state = state or state_dir()
        env_file = state / "slurm" / "env"
        if not env_file.is_file():
            pytest.skip(f"no Slurm: {env_file} missing (scripts/services up starts Slurm; see {state}/logs)")
        env = read_env(env_file)
        keys = ("SLURM_CONF", "AIOPS_SLURM_REST", "AIOPS_SLURM_USER", "AIOPS_SLURM_TOKEN_CMD", "AIOPS_SLURM_NODES")
        if missing := [k for k in keys if not env.get(k)]:
            pytest.skip(f"{env_file} lacks {', '.join(missing)}: written by an older scripts/services? run it up again")
        site = cls(
            Path(env["SLURM_CONF"]),
            env["AIOPS_SLURM_REST"],
            env["AIOPS_SLURM_USER"],
            env["AIOPS_SLURM_TOKEN_CMD"],
            env["AIOPS_SLURM_NODES"],
        )
        slurmds = sorted(state.glob("slurmd-*.pid")) or [state / "slurmd.pid"]
        daemons = [state / "munged.pid", state / "slurmctld.pid", *slurmds, state / "slurmrestd.pid"]
        down = [p.stem for p in daemons if not _pid_alive(p)]
        if down:
            pytest.skip(f"Slurm not running: {', '.join(down)} down (scripts/services up; logs in {state}/logs)")
        try:
            site.rest_json("ping")
        except (requests.RequestException, subprocess.SubprocessError, ValueError) as exc:
            pytest.skip(f"slurmrestd at {site.rest} does not answer a JWT ping: {exc}")
        return site

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> str:
        """A Slurm command against this cluster; its stdout."""
        done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=60, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def node_names(self) -> list[str]:
        return self.run("scontrol", "show", "hostnames", self.nodes).split()

    # ------------------------------------------------------------ jobs, reservations, nodes

    def sbatch(self, *args: str, wrap: str = "sleep 600") -> str:
        """Submit a batch job (`sbatch ARGS --wrap WRAP`); its job id."""
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", wrap)
        return out.strip().split(";")[0]

    def cancel(self, *jobs: str) -> None:
        if jobs:
            self.run("scancel", *jobs, check=False)

    def job_states(self, jobs: Sequence[str]) -> dict[str, str]:
        """Job id -> state (RUNNING, PENDING, ...), as squeue says; ended jobs stay MinJobAge."""
        out = self.run("squeue", "-h", "-t", "all", "-j", ",".join(jobs), "-o", "%i %T", check=False)
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_for(self, jobs: Sequence[str], states: set[str], timeout: float = 30) -> dict[str, str]:
        """Wait until every job is in one of `states`; their states."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.job_states(jobs)
            if all(seen.get(j) in states for j in jobs):
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs not {sorted(states)} after {timeout}s: {seen}")
            time.sleep(0.3)

    def job_detail(self, job: str) -> str:
        return self.run("scontrol", "show", "job", "-d", job)

    def gpu_indices(self, job: str) -> dict[str, tuple[int, ...]]:
        """Node -> GPU indices the job holds, from `scontrol show job -d`'s per-node lines
        (`Nodes=gpu[02-03] CPU_IDs=0 Mem=0 GRES=gpu:h100:4(IDX:0-3)`), host lists expanded by
        `scontrol show hostnames`: the reference, independent of the project's parsers."""
        out: dict[str, tuple[int, ...]] = {}
        for m in re.finditer(r"^\s+Nodes=(\S+) .*?GRES=(\S*)", self.job_detail(job), re.M):
            indices = tuple(i for g in re.findall(r"gpu[^(,]*\(IDX:([^)]*)\)", m.group(2)) for i in index_list(g))
            for node in self.run("scontrol", "show", "hostnames", m.group(1)).split():
                out[node] = indices
        return out

    def create_reservation(
        self, name: str, nodes: str, start_in: int = 600, minutes: int = 60, flags: str = "MAINT"
    ) -> None:
        """`scontrol create reservation ... StartTime=now+START_IN Duration=MINUTES` for `user`."""
        self.run(
            "scontrol", "create", "reservation", f"ReservationName={name}", *([f"Flags={flags}"] if flags else []),
            f"StartTime=now+{start_in}", f"Duration={minutes}", f"Nodes={nodes}", f"Users={self.user}",
        )  # fmt: skip

    def delete_reservation(self, name: str) -> None:
        self.run("scontrol", "delete", f"ReservationName={name}", check=False)

    def reservation_text(self, name: str = "") -> str:
        return self.run("scontrol", "show", "reservation", *([name] if name else []))

    def drain(self, node: str, reason: str) -> None:
        self.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)

    # ------------------------------------------------------------ JSON

    def token(self) -> str:
        """A JWT for `user` from `scontrol token` (the command in the env file), reused for a while."""
        if self._token is None or self._token[1] < time.monotonic():
            out = self.run(*shlex.split(self.token_cmd))
            token = out.strip().removeprefix("SLURM_JWT=")
            self._token = (token, time.monotonic() + 600)
        return self._token[0]

    def rest_get(self, path: str, version: str = "v0.0.38", token: str | None = None) -> tuple[int, bytes]:
        """GET /slurm/<version>/<path> with the JWT headers: the HTTP status and the body as
        slurmrestd wrote it (an error is a 500 with `errors` in the body)."""
        response = requests.get(
            f"{self.rest}/slurm/{version}/{path}",
            headers={"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token or self.token()},
            timeout=30,
        )
        return response.status_code, response.content

    def rest_raw(self, path: str, version: str = "v0.0.38") -> bytes:
        """The body of a GET that must succeed."""
        status, body = self.rest_get(path, version)
        if status != 200:
            raise requests.HTTPError(f"GET {path} ({version}): HTTP {status}: {body[:300]!r}")
        return body

    def rest_json(self, path: str, version: str = "v0.0.38") -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.rest_raw(path, version))
        return body

    def cli_raw(self, part: str) -> bytes:
        """What 22.05's CLI writes as JSON for `part` (jobs: squeue --json, nodes: sinfo --json)."""
        return self.run(*CLI_JSON[part]).encode()

    def cli_json(self, part: str) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.cli_raw(part))
        return body

    def bodies(self) -> dict[str, bytes]:
        """Every JSON body the cluster gives, by file name: rest-v0.0.38-jobs.json, ...,
        cli-squeue.json, cli-sinfo.json."""
        out = {f"rest-{v}-{p}.json": self.rest_raw(p, v) for v in REST_VERSIONS for p in REST_PARTS}
        out |= {f"cli-{argv[0]}.json": self.cli_raw(part) for part, argv in CLI_JSON.items()}
        return out

    def error_bodies(self) -> dict[str, tuple[int, bytes]]:
        """What slurmrestd answers for an unknown job and for a token it cannot verify."""
        return {
            "rest-v0.0.38-job-unknown.json": self.rest_get(f"job/{UNKNOWN_JOB}"),
            "rest-v0.0.38-jobs-bad-token.json": self.rest_get("jobs", token="not-a-jwt"),
        }


@dataclass
class Scenario:
    """What `stage` set up on the cluster, for the test to check and `teardown` to undo."""

    site: SlurmSite
    tag: str
    jobs: dict[str, str] = field(default_factory=dict)  # role -> job id
    reservation: str = ""
    reserved: str = ""  # node
    drained: str = ""  # node
    reason: str = ""
    begun_at: float = 0.0  # epoch seconds, just before the first job was submitted
    staged_at: float = 0.0  # just before the reservation was made
    done_at: float = 0.0

    def teardown(self) -> None:
        self.site.cancel(*self.jobs.values())
        if self.reservation:
            self.site.delete_reservation(self.reservation)
        if self.drained:
            self.site.resume(self.drained)


def stage(site: SlurmSite, tag: str | None = None, ended: bool = False) -> Scenario:
    """On gpu01..gpu04:
    - gpu01: `one` holds 2 of its 8 GPUs (IDX 0-1), and shares the node with `pair`;
    - gpu01 + gpu02: `pair`, a 2-node job of 4 GPUs per node (gpu01 IDX 2-5, gpu02 IDX 0-3);
    - gpu02: `rest`, 4 GPUs (IDX 4-7), so gpu02 is full;
    - gpu03: a MAINT reservation from now+600 s for 60 minutes;
    - gpu04: drained, "ECC memory error";
    and, if `ended`, a pending job (8 GPUs on the full gpu01) and three ended jobs on gpu03
    (completed, failed, cancelled) that squeue keeps for MinJobAge (300 s).
    Undo with `Scenario.teardown()` (or use `staged`)."""
    tag = tag or uuid.uuid4().hex[:8]
    sc = Scenario(site, tag, begun_at=time.time())
    try:
        sc.jobs["one"] = site.sbatch("-J", f"aiops-{tag}-one", "--gres=gpu:h100:2", "-w", "gpu01", "-t", "60")
        site.wait_for([sc.jobs["one"]], {"RUNNING"})  # first, so it takes IDX 0-1
        sc.jobs["pair"] = site.sbatch("-J", f"aiops-{tag}-pair", "-N", "2", "--gres=gpu:h100:4", "-w", "gpu[01-02]")
        site.wait_for([sc.jobs["pair"]], {"RUNNING"})
        sc.jobs["rest"] = site.sbatch("-J", f"aiops-{tag}-rest", "--gres=gpu:h100:4", "-w", "gpu02", "-t", "30")
        site.wait_for([sc.jobs["rest"]], {"RUNNING"})
        if ended:
            sc.jobs["pending"] = site.sbatch("-J", f"aiops-{tag}-pending", "--gres=gpu:h100:8", "-w", "gpu01")
            on3 = ("--gres=gpu:h100:1", "-w", "gpu03", "-t", "1")
            sc.jobs["completed"] = site.sbatch("-J", f"aiops-{tag}-completed", *on3, wrap="sleep 2")
            sc.jobs["failed"] = site.sbatch("-J", f"aiops-{tag}-failed", *on3, wrap="sleep 2; exit 3")
            sc.jobs["cancelled"] = site.sbatch("-J", f"aiops-{tag}-cancelled", *on3)
            site.wait_for([sc.jobs["cancelled"]], {"RUNNING"})
            time.sleep(2)
            site.cancel(sc.jobs["cancelled"])
            ends = [sc.jobs[r] for r in ("completed", "failed", "cancelled")]
            site.wait_for(ends, {"COMPLETED", "FAILED", "CANCELLED"})
        sc.staged_at = time.time()
        sc.reservation, sc.reserved = f"aiops-maint-{tag}", "gpu03"
        site.create_reservation(sc.reservation, sc.reserved)
        sc.drained, sc.reason = "gpu04", "ECC memory error"
        site.drain(sc.drained, sc.reason)
        sc.done_at = time.time()
    except BaseException:
        sc.teardown()
        raise
    return sc


def staged(site: SlurmSite, ended: bool = False) -> Iterator[Scenario]:
    """`stage`, then `teardown` whatever happens: the body of a pytest fixture."""
    sc = stage(site, ended=ended)
    try:
        yield sc
    finally:
        sc.teardown()


# ---------------------------------------------------------------- recording


def record(out: Path) -> None:
    """Stage the scenario (with the pending and ended jobs), write every body and the `scontrol
    show` text beside it, and a manifest of the ids; then undo it."""
    site = SlurmSite.find()
    out.mkdir(parents=True, exist_ok=True)
    sc = stage(site, tag="rec", ended=True)
    try:
        for name, body in site.bodies().items():
            (out / name).write_bytes(body)
        statuses = {}
        for name, (status, body) in site.error_bodies().items():
            (out / name).write_bytes(body)
            statuses[name] = status
        (out / "scontrol-show-job-d.txt").write_text("".join(site.job_detail(j) for j in sc.jobs.values()))
        (out / "scontrol-show-reservation.txt").write_text(site.reservation_text(sc.reservation))
        (out / "scontrol-show-node.txt").write_text(site.run("scontrol", "show", "node", sc.drained))
        manifest: Mapping[str, Any] = {
            "slurm": site.run("sinfo", "--version").strip(),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(sc.done_at)),
            "recorded_epoch": round(sc.done_at),
            "jobs": sc.jobs,
            "gpu_indices": {role: site.gpu_indices(j) for role, j in sc.jobs.items()},
            "reservation": {"name": sc.reservation, "nodes": sc.reserved, "created_epoch": round(sc.staged_at)},
            "drained": {"node": sc.drained, "reason": sc.reason},
            "http_status_of_error_bodies": statuses,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    finally:
        sc.teardown()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.slurm_site record DIR")
    try:
        record(Path(sys.argv[2]))
    except pytest.skip.Exception as no_slurm:
        sys.exit(str(no_slurm))

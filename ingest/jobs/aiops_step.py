"""aiops_step: tell the AIOps service each training step, from the training loop. Stdlib only:
copy this one file beside a training script (or `from ingest.jobs import aiops_step` where the
service is installed) and call it once per step.

    import aiops_step

    steps = aiops_step.StepWriter()            # ids from the environment (below)
    for step, batch in enumerate(loader):
        t0 = time.perf_counter()
        train_step(batch)
        steps.step(step, time.perf_counter() - t0, phase="train")

Each call appends one line of InfluxDB line protocol to this rank's file, which the node's
Telegraf tails (docs/collectors.md, "The training step"):

    train_step,job=1234,rank=17,node=gpu-node-017,gpu=3 step=1200i,duration_s=0.1824,phase="train" 1796402653306000000

The time is when the step ended (the job's progress). The file is
`<dir>/train_step-<job>-rank<rank>.lp`, one per rank, opened O_APPEND: a line is one write(2),
far under PIPE_BUF, so lines never interleave. Writing never raises into the training loop: a
failed write (disk full, directory gone) is counted in `errors`, said once on stderr, and
retried at the next step.

Settings, each an argument or else from the environment:
- dir: AIOPS_STEP_DIR (default /var/lib/aiops/steps, the directory the node agent tails);
- job: AIOPS_JOB_ID, else SLURM_JOB_ID (a Kubernetes job: set AIOPS_JOB_ID=<namespace>/<name>);
- rank: RANK (torchrun), else SLURM_PROCID, else OMPI_COMM_WORLD_RANK;
- node: AIOPS_NODE_ID (as the node agent's), else the host name;
- gpu: NVML's index of the rank's GPU: taken from CUDA_VISIBLE_DEVICES when it lists indices
  (the LOCAL_RANK-th, or the only one), else left out; the scheduler's allocation then says which.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
from types import TracebackType

MEASUREMENT = "train_step"
DEFAULT_DIR = "/var/lib/aiops/steps"


def _escape_tag(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ").replace("\n", "")


def _escape_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _file_part(value: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in value)[:128] or "_"


def gpu_from_env(env: dict[str, str] | None = None) -> int | None:
    """NVML's index of this rank's GPU, where CUDA_VISIBLE_DEVICES says it (indices, not UUIDs)."""
    env = dict(os.environ) if env is None else env
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return None
    local = env.get("LOCAL_RANK", env.get("SLURM_LOCALID", ""))
    pick = (
        visible[0]
        if len(visible) == 1
        else visible[int(local)]
        if local.isdigit() and int(local) < len(visible)
        else None
    )
    return int(pick) if pick is not None and pick.isdigit() else None


class StepWriter:
    """Appends one train_step line per call to this rank's file."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        job: str | None = None,
        rank: int | None = None,
        node: str | None = None,
        gpu: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        env = dict(os.environ) if env is None else env
        self.job = job or env.get("AIOPS_JOB_ID") or env.get("SLURM_JOB_ID") or ""
        found = env.get("RANK") or env.get("SLURM_PROCID") or env.get("OMPI_COMM_WORLD_RANK") or ""
        self.rank = rank if rank is not None else (int(found) if found.isdigit() else None)
        if self.rank is None:
            raise ValueError("no rank: pass rank= or run under torchrun (RANK) or srun (SLURM_PROCID)")
        self.node = node or env.get("AIOPS_NODE_ID") or socket.gethostname()
        self.gpu = gpu if gpu is not None else gpu_from_env(env)
        folder = directory or env.get("AIOPS_STEP_DIR") or DEFAULT_DIR
        self.path = os.path.join(folder, f"{MEASUREMENT}-{_file_part(self.job or 'nojob')}-rank{self.rank}.lp")
        tags = [("job", self.job), ("rank", str(self.rank)), ("node", self.node)]
        if self.gpu is not None:
            tags.append(("gpu", str(self.gpu)))
        self._head = MEASUREMENT + "".join(f",{k}={_escape_tag(v)}" for k, v in tags if v)
        self._fd: int | None = None
        self.errors = 0
        self.skipped = 0

    def line(self, step: int, duration_s: float, phase: str = "train", end_ns: int | None = None) -> str:
        """The line `step` writes (for a writer of its own, or a test)."""
        end = time.time_ns() if end_ns is None else end_ns
        return (
            f'{self._head} step={int(step)}i,duration_s={float(duration_s)!r},phase="{_escape_string(phase)}" {end}\n'
        )

    def step(self, step: int, duration_s: float, phase: str = "train", end_ns: int | None = None) -> None:
        """Record that step `step` ended now (or at `end_ns`, Unix ns), having taken `duration_s`.
        A duration that is no finite number is not written (counted in `skipped`)."""
        if not math.isfinite(duration_s):
            self.skipped += 1
            return
        data = self.line(step, duration_s, phase, end_ns).encode("utf-8", "replace")
        try:
            if self._fd is None:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, data)
        except OSError as exc:
            self.errors += 1
            if self.errors == 1:
                print(f"aiops_step: cannot write {self.path}: {exc} (training goes on)", file=sys.stderr)
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StepWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

"""The action policies (YAML beside the routing file), validated on load: an unknown key, kind,
severity or action stops the daemon with the line at fault rather than acting on a guess.

    dry_run: true               # the default: plans are logged, shown and audited, never done
    breaker: {max_nodes: 8, max_fraction: 0.02, per: cluster, window_s: 3600}
    attempts: {max: 2, window_s: 86400}
    exclude: ["login*", "n000[0-3]"]
    policies:
      - name: drain-predicted-hbm
        match: {source: prediction, kinds: [gpu_hbm_ecc], min_probability: 0.7}
        action: {type: drain, when: checkpoint}
        execute: true
      - name: drain-failed-gpu
        match: {source: incident, kinds: [gpu_fell_off_bus, gpu_hbm_ecc], severities: [critical]}
        action: {type: drain}
        execute: true
        approval: false

A policy without `execute: true` only plans, whatever the top-level `dry_run` says; a top-level
`dry_run: true` (the default) overrides every policy's `execute`.
"""

from __future__ import annotations

import fnmatch
import string
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vocab import registry
from vocab.ids import node_refusal, shown

ACTIONS = ("drain", "resume", "reset_gpu", "reboot", "ticket", "route_around")


class PolicyError(ValueError):
    """A policy file that cannot be used; the message says where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Strict):
    source: Literal["incident", "prediction", "any"] = "any"
    kinds: tuple[str, ...] = ()  # empty: any kind
    severities: tuple[str, ...] = ()
    min_confidence: float = Field(default=0.0, ge=0.0, le=1.0)  # an incident's root-cause confidence
    min_probability: float = Field(default=0.0, ge=0.0, le=1.0)  # a prediction's
    entity: str | None = None  # a glob on the root (incident) or the entity (prediction)

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        return _known(kinds, tuple(registry.KINDS), "fault kinds")

    @field_validator("severities")
    @classmethod
    def _known_severities(cls, severities: tuple[str, ...]) -> tuple[str, ...]:
        return _known(severities, registry.SEVERITIES, "severities")


def _known(given: tuple[str, ...], known: tuple[str, ...], what: str) -> tuple[str, ...]:
    unknown = [v for v in given if v not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown} (known: {sorted(known)})")
    return given


class Action(_Strict):
    type: Literal["drain", "resume", "reset_gpu", "reboot", "ticket", "route_around"]
    # now: at once (a part that failed); checkpoint: right after the job's next checkpoint, for a
    # failure expected hours ahead (the job loses only its restart, not the steps since the last);
    # job_end: once the node's jobs have ended, for a part that degrades but does not stop its job
    # (NVLink errors, a row remap pending: a reset puts it right, and no job need restart for it).
    # Either way the node is cordoned at once where a cordon executor exists.
    when: Literal["now", "checkpoint", "job_end"] = "now"
    # a job larger than this is not drained without a person's approval: its restart costs more
    # than most faults (a 2,048-GPU job for a warning below its policy's confidence)
    max_job_gpus: int | None = Field(default=None, gt=0)
    # with `when: checkpoint`, how long to wait for the jobs' next checkpoint before acting anyway
    # (an hour: large jobs are told to checkpoint at least that often; a prediction's lead time is
    # hours, so waiting costs little); with `when: job_end`, for the jobs to end
    max_wait_s: float = Field(default=3600.0, gt=0)


class Policy(_Strict):
    name: str = Field(min_length=1)
    match: Match
    action: Action
    execute: bool = False
    approval: bool = False  # a person approves (API or the signed link) before it is done


class Breaker(_Strict):
    """At most `max_nodes` nodes, and at most `max_fraction` of the scope's nodes, taken out of
    service by this service within `window_s`; beyond it, stop acting and page. NVSentinel's
    breaker is a percentage of nodes per window; both bounds hold here, the tighter one wins."""

    max_nodes: int = Field(default=8, ge=0)
    max_fraction: float = Field(default=0.02, ge=0.0, le=1.0)
    per: Literal["cluster", "rack", "pod"] = "cluster"
    window_s: float = Field(default=3600.0, gt=0)


class Attempts(_Strict):
    """A node acted on `max` times within `window_s` goes to a person, not round the loop again."""

    max: int = Field(default=2, ge=1)
    window_s: float = Field(default=86_400.0, gt=0)


class KubernetesApi(_Strict):
    """The API server a Kubernetes site drains through (cordon, taint, evict; act/kubernetes.py):
    in-cluster (the pod's service account), or a server with a token file and a CA file."""

    in_cluster: bool = False
    server: str | None = None
    token_file: str | None = None
    ca_file: str | None = None


# what a site command's argv may name, each filled in whole
COMMAND_FIELDS = ("node", "target", "incident", "reason", "action")


def command_fields(argv: tuple[str, ...] | list[str]) -> set[str]:
    """The fields a site command's argv names; ValueError for anything but a plain `{name}` of
    COMMAND_FIELDS: an index, an attribute, a conversion or a format spec ("{node[0]}",
    "{target.split}", "{node:.3}") would cut an id apart or run a method, not pass it on."""
    named = set()
    for part in argv:
        try:
            fields = list(string.Formatter().parse(part))
        except ValueError as exc:
            raise ValueError(f"site command part {part!r}: {exc}") from None
        for _, field, spec, conversion in fields:
            if field is None:
                continue
            if field not in COMMAND_FIELDS or spec or conversion:
                raise ValueError(
                    f"site command part {part!r}: only {', '.join('{' + f + '}' for f in COMMAND_FIELDS)}"
                    " may be filled in, whole"
                )
            named.add(field)
    return named


class Executors(_Strict):
    """How actions are done here. Slurm through its CLI on this host (`scontrol`, with the env it
    needs, e.g. SLURM_CONF); the rest through site commands: an argv per action type, `{node}`,
    `{target}`, `{incident}`, `{reason}` filled in, run without a shell. An action with no
    executor is planned and audited, and fails with "no executor" when a policy executes it."""

    slurm: bool = False
    scontrol: str = "scontrol"
    kubernetes: KubernetesApi | None = None  # drains and resumes through the API server instead
    slurm_env: dict[str, str] = Field(default_factory=dict)
    # a site may drain and resume through its own tool too (a wrapper round its scheduler)
    commands: dict[Literal["drain", "resume", "reset_gpu", "reboot", "ticket", "route_around"], tuple[str, ...]] = (
        Field(default_factory=dict)
    )
    # or a webhook per action (a ticketing system, a fabric manager's hook): the plan as JSON, POSTed
    webhooks: dict[Literal["drain", "resume", "reset_gpu", "reboot", "ticket", "route_around"], str] = Field(
        default_factory=dict
    )

    @field_validator("commands")
    @classmethod
    def _plain_fields(cls, commands: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for argv in commands.values():
            if not argv:
                raise ValueError("a site command needs at least the program")
            command_fields(argv)
        return commands


class Remediation(_Strict):
    """What happens to a node after the service drained it (act/remediation.py): its kind's
    ladder (a GPU reset, then a reboot, through the executors' `reset_gpu` and `reboot` commands),
    each followed by the site's health checks (every argv must exit 0; `{node}` filled in), then
    the node is resumed or a person paged. A node drained on a prediction is checked at once and
    returned if healthy. Without `execute: true` (or under the file's `dry_run`) nothing is done:
    the node comes back when its incident resolves, as without this block."""

    execute: bool = False
    checks: tuple[tuple[str, ...], ...] = Field(min_length=1)  # e.g. [ssh, "{node}", dcgmi, diag, -r, "2"]
    ladders: dict[str, tuple[Literal["reset_gpu", "reboot"], ...]] = Field(default_factory=dict)
    # operational choices, stated: dcgmi diag -r 2 takes a few minutes on an 8-GPU node (NVIDIA's
    # DCGM guide: level 2 "medium", minutes) and an NCCL all-reduce test under one; a node's
    # reboot (POST, BMC, driver, fabric manager) takes 5 to 10 minutes on an HGX system
    check_timeout_s: float = Field(default=900.0, gt=0)
    reboot_wait_s: float = Field(default=600.0, ge=0)
    # the site's spare nodes, kept out of service (Slurm: State=DRAIN Reason=spare): when a node is
    # drained, the first free one is resumed in its place, so the requeued job finds room at once
    spares: tuple[str, ...] = ()
    # the reason a spare is kept drained with (Slurm's Reason): one drained for anything else (a
    # person repairing it) is not a spare now, and is not resumed
    spare_reason: str = Field(default="spare", min_length=1)

    @field_validator("spares")
    @classmethod
    def _spares(cls, spares: tuple[str, ...]) -> tuple[str, ...]:
        for name in spares:
            if problem := node_refusal(name):
                raise ValueError(f"spares: {shown(name)} is not one node's name: {problem}")
        if len(set(spares)) != len(spares):
            raise ValueError("spares: a node is named twice")
        return spares

    @field_validator("checks")
    @classmethod
    def _checks(cls, checks: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
        for argv in checks:
            if not argv:
                raise ValueError("a health check needs at least the program")
            if command_fields(argv) - {"node"}:
                raise ValueError("a health check may name {node} only")
        return checks

    @field_validator("ladders")
    @classmethod
    def _kinds(cls, ladders: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        _known(tuple(ladders), tuple(registry.KINDS), "fault kinds")
        return ladders


class ActConfig(_Strict):
    dry_run: bool = True
    breaker: Breaker = Field(default_factory=Breaker)
    attempts: Attempts = Field(default_factory=Attempts)
    exclude: tuple[str, ...] = ()  # globs on node (or entity) names never acted on
    policies: tuple[Policy, ...] = ()
    executors: Executors = Field(default_factory=Executors)
    remediation: Remediation | None = None

    def excluded(self, target: str) -> str | None:
        """Why `target` is never acted on, or None."""
        for pattern in self.exclude:
            if fnmatch.fnmatchcase(target, pattern):
                return f"excluded by pattern {pattern!r}"
        return None


def parse(data: object, source: str = "policies") -> ActConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy file is a mapping, got {type(data).__name__}")
    try:
        config = ActConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"{source}: {where}: {first['msg']}") from None
    names = [p.name for p in config.policies]
    if len(names) != len(set(names)):
        raise PolicyError(f"{source}: policy names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    return config


def load(path: Path) -> ActConfig:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(f"no policy file at {path}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not YAML ({exc})") from None
    return parse(data, str(path))


__all__ = [
    "ACTIONS",
    "COMMAND_FIELDS",
    "ActConfig",
    "Action",
    "Attempts",
    "Breaker",
    "Executors",
    "KubernetesApi",
    "Match",
    "Policy",
    "PolicyError",
    "Remediation",
    "command_fields",
    "load",
    "parse",
]

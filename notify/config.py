"""Routing as data: receivers, routes, silences and maintenance windows from YAML
(`--notify-config FILE` / `AIOPS_NOTIFY_CONFIG`), validated on load with errors that say where.

Durations are Alertmanager's (`30s`, `5m`, `4h`, `1d`) or seconds; times are ISO 8601 with a zone
or epoch seconds. URLs and secrets are kept as secrets: they never appear in a log line, an
error message or a repr."""

from __future__ import annotations

import fnmatch
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from notify import apprise_send
from vocab import registry

KINDS = ("feishu", "dingtalk", "wecom", "slack", "teams", "webhook", "alertmanager", "apprise")
# per-minute caps the services document (WeCom and DingTalk: 20 messages a minute per robot;
# Feishu: 100 a minute, 5 a second); others are unlimited unless set
DEFAULT_RATE_PER_MINUTE = {"wecom": 20, "dingtalk": 20, "feishu": 100}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class NotifyConfigError(ValueError):
    """The notification config cannot be used; the message says where and why."""


def duration_s(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", str(value))
    if not m:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 4h, 1d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def epoch_s(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no zone (add Z or +08:00)")
    return parsed.timestamp()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Receiver(_Strict):
    name: str
    kind: Literal["feishu", "dingtalk", "wecom", "slack", "teams", "webhook", "alertmanager", "apprise"]
    url: SecretStr
    secret: SecretStr | None = None
    timeout_s: float = 10.0
    rate_per_minute: int | None = None  # default: what the service documents
    # alertmanager: how often open alerts are posted again (they expire four of these later)
    resend_s: float | None = None

    _resend = field_validator("resend_s", mode="before")(lambda cls, v: None if v is None else duration_s(v))

    @field_validator("kind")
    @classmethod
    def _available(cls, kind: str) -> str:
        if kind == "apprise" and not apprise_send.available():
            raise ValueError("receiver kind 'apprise' needs the Apprise library: pip install 'aiops-gpu[apprise]'")
        return kind

    @property
    def rate(self) -> int | None:
        return self.rate_per_minute if self.rate_per_minute is not None else DEFAULT_RATE_PER_MINUTE.get(self.kind)


# what the service emits, so that a route or silence that names anything else (a severity of
# `info`, a kind misspelt) is refused on load instead of silently matching nothing
EMITTED: dict[str, tuple[str, ...]] = {
    "severity": (*registry.SEVERITIES, "warning"),  # warnings carry their own severity
    "status": ("open", "warning", "resolved"),
    "kind": tuple(sorted({*registry.KINDS, *(sign.kind for sign in registry.EARLY_SIGNS.values()), "unknown"})),
}


class Match(_Strict):
    """Every given field must match (lists: any of them; entity: shell patterns). Severity,
    status and kind must be values the service emits."""

    severity: list[str] | None = None
    kind: list[str] | None = None
    status: list[str] | None = None
    entity: list[str] | None = None
    rack: list[str] | None = None
    pod: list[str] | None = None
    plane: list[str] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [str(x) for x in v] if isinstance(v, list) else None if v is None else [str(v)]

    @model_validator(mode="after")
    def _emitted(self) -> Match:
        for name, allowed in EMITTED.items():
            unknown = [v for v in getattr(self, name) or () if v not in allowed]
            if unknown:
                raise ValueError(
                    f"{name} {', '.join(repr(v) for v in unknown)} is never emitted, so it can match nothing; "
                    f"the {name} values are {', '.join(allowed)}"
                )
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        for name, wanted in self.model_dump(exclude_none=True).items():
            have = labels.get(name)
            if have is None:
                return False
            if name == "entity":
                if not any(fnmatch.fnmatchcase(have, w) for w in wanted):
                    return False
            elif have not in wanted:
                return False
        return True


class Route(_Strict):
    receiver: str
    match: Match = Field(default_factory=Match)
    group_by: list[str] = Field(default_factory=lambda: ["incident_id"])
    group_wait: float = 30.0  # event-time seconds before a new group's first notification
    group_interval: float = 300.0  # between notifications of one group about new changes
    repeat_interval: float = 4 * 3600.0  # re-notify a group still open after this long
    continue_: bool = Field(False, alias="continue")

    _durations = field_validator("group_wait", "group_interval", "repeat_interval", mode="before")(
        lambda cls, v: duration_s(v)
    )


class Silence(_Strict):
    """Notifications matching `match` between `starts` and `ends` (event time) are not sent."""

    match: Match
    starts: float | None = None
    ends: float | None = None
    comment: str = ""

    _times = field_validator("starts", "ends", mode="before")(lambda cls, v: None if v is None else epoch_s(v))

    def active(self, t: float) -> bool:
        return (self.starts is None or t >= self.starts) and (self.ends is None or t < self.ends)


class NotifyConfig(_Strict):
    receivers: list[Receiver]
    routes: list[Route]
    silences: list[Silence] = Field(default_factory=list)
    maintenance: list[Silence] = Field(default_factory=list)  # the same shape: planned work
    # where an incident no route matches goes (Alertmanager's root route); without one it is
    # logged and counted (aiops_notifications_unrouted_total)
    default_receiver: str | None = None
    public_url: str | None = None  # where the incident pages are served: {public_url}/incidents/{id}
    cluster: str | None = None  # the `cluster` label of Alertmanager alerts (sites run several)
    grafana_url: str | None = None

    @model_validator(mode="after")
    def _receivers_exist(self) -> NotifyConfig:
        names = [r.name for r in self.receivers]
        twice = {n for n in names if names.count(n) > 1}
        if twice:
            raise ValueError(f"receiver names must be unique: {sorted(twice)}")
        for i, route in enumerate(self.routes):
            if route.receiver not in names:
                raise ValueError(f"routes[{i}] names receiver {route.receiver!r}, which is not defined")
        if self.default_receiver is not None and self.default_receiver not in names:
            raise ValueError(f"default_receiver {self.default_receiver!r} is not defined")
        return self

    @property
    def all_routes(self) -> list[Route]:
        """The routes in order, then the default receiver's catch-all route if there is one."""
        if self.default_receiver is None:
            return list(self.routes)
        return [*self.routes, Route.model_validate({"receiver": self.default_receiver})]

    def receiver(self, name: str) -> Receiver:
        return next(r for r in self.receivers if r.name == name)

    def secrets(self) -> list[str]:
        """Every URL and secret, for redaction of anything that might echo one."""
        out = []
        for r in self.receivers:
            out.append(r.url.get_secret_value())
            if r.secret is not None:
                out.append(r.secret.get_secret_value())
        return [s for s in out if s]


def load(path: Path) -> NotifyConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NotifyConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise NotifyConfigError(f"{path}: not YAML ({exc})") from None
    return parse(raw, str(path))


def parse(raw: Any, where: str = "notify config") -> NotifyConfig:
    if not isinstance(raw, dict):
        raise NotifyConfigError(f"{where}: expected a mapping with receivers and routes")
    try:
        return NotifyConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors(include_input=False)
        )
        raise NotifyConfigError(f"{where}: {problems}") from None

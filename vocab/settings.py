"""Typed settings in one place: environment variables with prefix AIOPS_, secrets as SecretStr.

Nested groups use a double underscore: AIOPS_KAFKA__BOOTSTRAP=broker:9092,
AIOPS_INFLUX__URL=http://influxdb:8086. Printing settings masks every secret.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from vocab.thresholds import DetectorSettings


class KafkaSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    bootstrap: str = "127.0.0.1:9092"
    telemetry_topic: str = "aiops.telemetry"
    deadletter_topic: str = "aiops.deadletter"
    anomalies_topic: str = "aiops.anomalies"
    predictions_topic: str = "aiops.predictions"
    incidents_topic: str = "aiops.incidents"
    notices_topic: str = "aiops.notices"  # monitoring facts that are not faults (coverage, gaps)
    events_topic: str = "aiops.events"  # the scheduler's events (aiops scheduler follow), keyed by job
    # split detection's members exchange each tick's cohort summaries here (aiops.detect_daemon)
    cohorts_topic: str = "aiops.cohorts"
    # and say, per telemetry partition, which tick they judged: what the root-cause daemon fed by
    # them (aiops run --from-detection) waits for before a tick goes to the engine
    progress_topic: str = "aiops.progress"
    ingest_group: str = "aiops-ingest"
    detect_group: str = "aiops-detect"
    run_group: str = "aiops-run"
    # How long one poll waits and how much it may return; a poll becomes one decoded batch.
    poll_timeout_ms: int = Field(default=500, ge=1)
    max_poll_records: int = Field(default=50_000, ge=1)
    # TLS to the broker (docs/operating.md, "Kafka over TLS"): SSL, SASL_SSL, or PLAINTEXT on a
    # private network. With SSL the broker's certificate is checked against ssl_cafile (the
    # system's CAs when unset) and its name against the bootstrap host; ssl_certfile/ssl_keyfile
    # (PEM) are this client's own, for a broker that asks for one (ssl.client.auth=required).
    # SASL_SSL is the same TLS plus a SCRAM-SHA-512 login (the one SASL mechanism tested against a
    # real broker; PLAIN, GSSAPI and OAUTHBEARER are not offered, nor SASL without TLS).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL"] = "PLAINTEXT"
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: Literal["SCRAM-SHA-512"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None

    @model_validator(mode="after")
    def _sasl_has_a_login(self) -> KafkaSettings:
        if self.security_protocol == "SASL_SSL" and (not self.sasl_username or self.sasl_password is None):
            raise ValueError("security_protocol SASL_SSL needs sasl_username and sasl_password")
        return self

    def client_security(self) -> dict[str, object]:
        """kafka-python's keyword arguments for these settings (none for PLAINTEXT)."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        out: dict[str, object] = {
            "security_protocol": self.security_protocol,
            "ssl_check_hostname": self.ssl_check_hostname,
        }
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, key)
            if value is not None:
                out[key] = str(value)
        if self.security_protocol == "SASL_SSL" and self.sasl_password is not None:  # the validator's
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return out


class InfluxSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str = "http://127.0.0.1:8086"
    # InfluxDB 1.x takes "user:password" as the token (empty user for no auth), org "-", and
    # "database/retention-policy" as the bucket.
    token: SecretStr = SecretStr("aiops:aiops")
    org: str = "-"
    database: str = "aiops"
    retention_policy: str = "autogen"
    batch_lines: int = Field(default=20_000, ge=1)
    max_retries: int = Field(default=5, ge=0)
    retry_initial_s: float = Field(default=0.2, gt=0)
    retry_max_s: float = Field(default=10.0, gt=0)
    timeout_s: float = Field(default=30.0, gt=0)

    @property
    def bucket(self) -> str:
        return f"{self.database}/{self.retention_policy}"


class IngestSettings(BaseModel):
    """What `aiops ingest` stores (docs/ingest.md, "Storage at scale")."""

    model_config = ConfigDict(frozen=True)

    # Raw telemetry to InfluxDB per window of this many seconds of event time (per series the
    # mean, max and min of gauges, the last value of counters and states): 0 = every value as it
    # came. Full resolution always stays in Kafka, for replay. A site past what its InfluxDB
    # takes at full resolution (measured: `aiops bench store`) sets 60; a multiple of the scrape
    # interval, so every window holds the same number of scrapes.
    downsample_s: float = Field(default=0.0, ge=0)
    # How long a window stays open after its end for rows still on their way (a collector's
    # flush interval plus broker delay, as AIOPS_TICK_LATENESS_S for detection); later rows are
    # counted (`late_for_window`) and not written.
    downsample_lateness_s: float = Field(default=60.0, ge=0)


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "aiops"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AIOPS_", env_nested_delimiter="__", frozen=True)

    kafka: KafkaSettings = KafkaSettings()
    influx: InfluxSettings = InfluxSettings()
    ingest: IngestSettings = IngestSettings()
    detectors: DetectorSettings = DetectorSettings()
    # The collectors' scrape interval: ticks are windows of this grid. The daemons refuse to
    # start without it (or --interval); it is never guessed from timestamps.
    scrape_interval_s: float | None = Field(default=None, gt=0)
    # How long the Kafka daemons hold a tick open for samples still on their way (a collector's
    # flush interval plus broker delay); later samples are stored, counted and not analysed.
    tick_lateness_s: float = Field(default=60.0, ge=0)
    # The root-cause daemon's HTTP API (health, /metrics, incidents, silences: aiops/api.py).
    # None: no API. Mutations need `Authorization: Bearer <api_token>`; without a token they are
    # refused. Bind to loopback unless a proxy with TLS is in front (compose: inside the container).
    http_port: int | None = Field(default=None, ge=0, le=65535)
    http_host: str = "127.0.0.1"
    api_token: SecretStr | None = None

    @field_validator("api_token", mode="before")
    @classmethod
    def _no_empty_token(cls, v: object) -> object:
        return None if v == "" else v  # compose passes an unset ${AIOPS_API_TOKEN:-} as ""

    @field_validator("public_url", mode="before")
    @classmethod
    def _no_empty_url(cls, v: object) -> object:
        return None if v == "" else v  # ${AIOPS_PUBLIC_URL:-} unset is ""

    # Where the daemons keep their checkpoints (state with the offsets it belongs to), one file per
    # consumer group. In docker-compose a named volume; it must be writable by the daemon only.
    state_dir: Path = Field(default_factory=_default_state_dir)
    # How often (wall seconds) the root-cause daemon checkpoints; also on SIGTERM. A crash replays
    # at most this much from Kafka, and publishes nothing twice (outputs since are read back).
    checkpoint_every_s: float = Field(default=30.0, gt=0)
    # Receivers and routes for chat notifications (notify/config.py); none: nothing is sent, and a
    # daemon says so at start.
    notify_config: Path | None = None
    # Where people reach the incident pages (a reverse proxy in front of the API): the link in
    # every message, unless the notify config names its own public_url.
    public_url: str | None = None
    # what the service may do about incidents (act/policy.py; config/actions.yml): dry run unless
    # the file says otherwise; none: no acting at all
    actions_config: Path | None = None


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]


# AIOPS_* variables read outside Settings, by what reads them: not settings, but not typos either.
OTHER_VARIABLES = {
    "AIOPS_STATE_KEY": "the checkpoints' signing key (aiops/daemon_state.py)",
    "AIOPS_REMOTE_WRITE_TOKEN": "the remote-write door's token (aiops ingest --remote-write)",
    "AIOPS_CACHE": "the model and demo cache (aiops/default_model.py)",
    "AIOPS_RECORDING": "the GPU recording the generator follows (telemetry_gen/recording.py)",
    # Telegraf's configuration on a GPU host (config/telegraf/): its Kafka login
    "AIOPS_KAFKA_USER": "Telegraf's Kafka login on a GPU host",
    "AIOPS_KAFKA_PASSWORD": "Telegraf's Kafka password on a GPU host",
}
# scripts/services, scripts/test and scripts/container read these (versions, ports, places)
_SCRIPT_PREFIXES = (
    "AIOPS_SLURM",
    "AIOPS_KAFKA_VERSION",
    "AIOPS_KAFKA_PORT",
    "AIOPS_KAFKA_SSL_PORT",
    "AIOPS_KAFKA_SASL_PORT",
    "AIOPS_KAFKA_CONTROLLER_PORT",
    "AIOPS_INFLUX_VERSION",
    "AIOPS_INFLUX_FALLBACK_VERSION",
    "AIOPS_INFLUX_PORT",
    "AIOPS_TELEGRAF_VERSION",
    "AIOPS_ALERTMANAGER_VERSION",
    "AIOPS_LOG4J_VERSION",
    "AIOPS_SLF4J_VERSION",
    "AIOPS_SERVICES_TIMEOUT",
    "AIOPS_DEBIAN_MIRROR",
    "AIOPS_STORAGE_DRIVER",
    "AIOPS_IMAGE",
    "AIOPS_STATE",
    "AIOPS_VENV",
    "AIOPS_TEST_LANES",
)


def setting_variables(model: type[BaseModel] = Settings, prefix: str = "AIOPS_") -> set[str]:
    """Every variable Settings reads: AIOPS_<FIELD>, and AIOPS_<GROUP>__<FIELD> down each group."""
    names = set()
    for name, info in model.model_fields.items():
        variable = f"{prefix}{name.upper()}"
        names.add(variable)
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            names |= setting_variables(kind, f"{variable}__")
    return names


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The AIOPS_* variables in `environ` that nothing reads, each with the nearest known name (a
    misspelt AIOPS_KAFKA_BOOTSTRAP, one underscore, is silently no setting at all to pydantic)."""
    known = setting_variables() | set(OTHER_VARIABLES)
    out = []
    for name in sorted(environ):
        if not name.startswith("AIOPS_") or name in known:
            continue
        if name.startswith(_SCRIPT_PREFIXES):
            continue
        nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        out.append((name, nearest[0] if nearest else None))
    return out

"""The options every daemon between Kafka topics takes (`aiops detect --kafka`, `aiops run
--kafka`): one place, so the two say them alike."""

from __future__ import annotations

from typing import Any


def add_daemon_options(p: Any, reads: str) -> None:
    """--kafka and what goes with it; `reads`: what the daemon turns its input into (for --kafka's help)."""
    p.add_argument("--kafka", metavar="HOST:PORT", help=f"daemon: {reads}")
    p.add_argument("--topic", help="telemetry topic (default aiops.telemetry)")
    p.add_argument("--events", metavar="FILE", help="with --kafka: scheduler events (jobs, maintenance), JSON lines")
    p.add_argument("--group", help="with --kafka: consumer group (default AIOPS_KAFKA__*_GROUP)")
    p.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="the collectors' scrape interval (default: the folder's meta.json, or AIOPS_SCRAPE_INTERVAL_S)",
    )
    p.add_argument("--stop-when-idle", type=float, metavar="SECONDS", help="exit after this long with no input")
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="with --kafka: where checkpoints go (default AIOPS_STATE_DIR, else ~/.local/state/aiops)",
    )
    p.add_argument(
        "--lateness",
        type=float,
        metavar="SECONDS",
        help="with --kafka: how long a tick waits for late samples (default AIOPS_TICK_LATENESS_S, 60)",
    )
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="failure predictor (default: the one the package ships, aiops/models/default-predictor.skops)",
    )
    p.add_argument("--no-predict", action="store_true", help="no failure prediction")


__all__ = ["add_daemon_options"]

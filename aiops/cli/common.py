"""What the subcommands (and the benches, which build on them) share: the settings from the
environment and the command line, the stop flag, the predictor, progress over a folder, the error
a user can fix."""

from __future__ import annotations

import argparse
import json
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from vocab.settings import InfluxSettings, KafkaSettings, Settings

if TYPE_CHECKING:
    from detectors.predict.online import OnlinePredictor


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def stop_on_signals() -> Callable[[], bool]:
    """A daemon's stop flag: SIGTERM (docker stop) or SIGINT asks it to finish its batch and exit."""
    stop = {"now": False}

    def request_stop(signum: int, _frame: object) -> None:
        logging.getLogger("aiops").info("signal %d: finishing the current batch, then stopping", signum)
        stop["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return lambda: stop["now"]


def load_predictor(args: argparse.Namespace) -> OnlinePredictor | None:
    """The failure predictor `--model` names, or the default one (the package's copy), or
    none with `--no-predict`; a model file that cannot be used is a one-line error."""
    from aiops.default_model import load_or_train_default
    from detectors.predict.model import ModelError, load
    from detectors.predict.online import OnlinePredictor

    if args.no_predict:
        return None
    try:
        model = load(Path(args.model)) if args.model else load_or_train_default()
    except ModelError as exc:
        raise CliError(str(exc)) from None
    return OnlinePredictor(model)


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of the environment (AIOPS_*), with what the command line overrides."""
    from pydantic import ValidationError

    try:
        base = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise CliError(f"bad setting {where}: {first['msg']} (check the AIOPS_* environment)") from None
    kafka: KafkaSettings = base.kafka
    influx: InfluxSettings = base.influx
    if getattr(args, "kafka", None):
        kafka = kafka.model_copy(update={"bootstrap": args.kafka})
    if getattr(args, "topic", None):
        kafka = kafka.model_copy(update={"telemetry_topic": args.topic})
    if getattr(args, "group", None):
        kafka = kafka.model_copy(update={"ingest_group": args.group})
    if getattr(args, "influx", None):
        influx = influx.model_copy(update={"url": args.influx})
    if getattr(args, "database", None):
        influx = influx.model_copy(update={"database": args.database})
    return base.model_copy(update={"kafka": kafka, "influx": influx})


def meta_ticks(folder: Path) -> int | None:
    """How many ticks a recorded folder holds, when its meta.json says (aiops gen writes it)."""
    try:
        ticks = json.loads((folder / "meta.json").read_text())["ticks"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(ticks) if isinstance(ticks, int | float) else None


@contextmanager
def folder_progress(folder: Path, what: str, counts_ticks: bool = True) -> Iterator[Callable[[int], None]]:
    """Progress over a recorded folder read in chunks: in ticks when the caller counts them and
    meta.json says how many there are, else in MB of telemetry.lp. The callback is called after
    each chunk, with the ticks done so far (ignored when counting MB)."""
    from aiops.progress_bar import Progress
    from detectors.detect_loop import CHUNK_BYTES

    ticks = meta_ticks(folder) if counts_ticks else None
    try:
        size_mb = (folder / "telemetry.lp").stat().st_size / 1e6
    except OSError:
        size_mb = 0.0
    with Progress(ticks if ticks is not None else size_mb, what, "ticks" if ticks is not None else "MB") as progress:

        def step(done: int) -> None:
            if ticks is not None:
                progress.update(completed=done)
            else:  # one chunk more read
                progress.update(completed=min(progress.done + CHUNK_BYTES / 1e6, size_mb))

        yield step

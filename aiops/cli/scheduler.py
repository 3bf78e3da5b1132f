"""`aiops scheduler import` and `aiops scheduler follow`: the schedule from the site's scheduler.

`import` turns recorded Slurm JSON (slurmrestd or the CLI, any data_parser version from v0.0.37
to v0.0.44) into the events file the offline runs read, so a site can replay a history.
`follow` asks the scheduler (slurmrestd, the Slurm CLI, or the Kubernetes API) every few seconds
and publishes what changed to the events topic the daemons read, keyed by job (by node for a
node's state). A restarted follower reads the topic back first and publishes nothing twice; a
scheduler that is away is waited for, never a reason to exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from context.scheduler.snapshot import Snapshot, Tracker

if TYPE_CHECKING:
    from context.scheduler.kubernetes import KubernetesFollower

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("scheduler", help="jobs, the GPUs they hold, drains and maintenance from the scheduler")
    what = p.add_subparsers(dest="scheduler_command", required=True)
    i = what.add_parser("import", help="recorded Slurm JSON (any version) -> events.jsonl")
    i.add_argument(
        "--slurm-json",
        metavar="FILE",
        nargs="+",
        default=[],
        help="slurmrestd or CLI bodies (jobs, nodes, reservations; squeue/sinfo/sacct --json), one poll each",
    )
    i.add_argument(
        "--kubernetes-json",
        metavar="FILE",
        nargs="+",
        default=[],
        help="PodList or NodeList bodies (`kubectl get pods -A -o json`, `kubectl get nodes -o json`), one poll each",
    )
    i.add_argument("--out", metavar="FILE", required=True, help="the events file to write (JSON lines)")
    i.add_argument(
        "--at", type=float, metavar="EPOCH_S", help="when the bodies were taken (default: what they say, else mtime)"
    )
    i.set_defaults(handler=cmd_import)

    f = what.add_parser("follow", help="publish the scheduler's events live (to Kafka, or to a file)")
    src = f.add_mutually_exclusive_group(required=True)
    src.add_argument("--slurm", metavar="URL", help="slurmrestd, e.g. http://slurm-head:6820")
    src.add_argument("--squeue", action="store_true", help="the Slurm CLI: squeue/sinfo/scontrol --json")
    src.add_argument("--kubernetes", metavar="URL", help="the Kubernetes API server, e.g. https://10.0.0.1:6443")
    f.add_argument("--slurm-user", default=os.environ.get("SLURM_USER", "root"), help="X-SLURM-USER-NAME")
    f.add_argument(
        "--slurm-token-file", metavar="FILE", help="Slurm JWT (`scontrol token`), read per request; else $SLURM_JWT"
    )
    f.add_argument("--slurm-version", metavar="V", help="data_parser version (default: the newest the server speaks)")
    f.add_argument("--kubernetes-token-file", metavar="FILE", help="bearer token (in a pod: the service account's)")
    f.add_argument("--kubernetes-ca", metavar="FILE", help="the API server's CA certificate")
    f.add_argument(
        "--pod-resources", metavar="DIR", help="per-node pod-resources List JSON, for the GPU indices pods hold"
    )
    out = f.add_mutually_exclusive_group(required=True)
    out.add_argument("--kafka", metavar="BOOTSTRAP", help="publish to the events topic (AIOPS_KAFKA__EVENTS_TOPIC)")
    out.add_argument("--out", metavar="FILE", help="append to an events file instead")
    f.add_argument("--every", type=float, default=10.0, metavar="S", help="seconds between polls (default 10)")
    f.add_argument("--polls", type=int, metavar="N", help="stop after N polls (default: run until stopped)")
    f.set_defaults(handler=cmd_follow)


def cmd_import(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError
    from context.scheduler.kubernetes import read_recorded as read_kubernetes
    from context.scheduler.sources import read_recorded

    if bool(args.slurm_json) == bool(args.kubernetes_json):
        raise CliError("give recorded bodies of one scheduler: --slurm-json FILE... or --kubernetes-json FILE...")
    try:
        if args.slurm_json:
            snaps, name = read_recorded([Path(p) for p in args.slurm_json], args.at), "slurm"
        else:
            snaps, name = read_kubernetes([Path(p) for p in args.kubernetes_json], args.at), "kubernetes"
    except (OSError, ValueError) as exc:  # SlurmFormatError and KubernetesFormatError are ValueErrors
        raise CliError(str(exc)) from None
    tracker = Tracker(name)
    events: list[dict[str, Any]] = []
    for snap in snaps:
        events += tracker.update(snap)
    events.sort(key=lambda e: (float(e["time"]), str(e["type"]), str(e.get("job", ""))))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
    print(f"{out}: {summary(events)} from {len(snaps)} {'Slurm' if name == 'slurm' else 'Kubernetes'} bodies")
    return 0


def summary(events: Iterable[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for e in events:
        kind = str(e["type"]) + (f" {e['state']}" if e["type"] == "node_state" else "")
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no events"


class Source(Protocol):
    def read(self) -> Snapshot: ...


class Sink(Protocol):
    def published(self) -> list[dict[str, Any]]: ...
    def publish(self, events: list[dict[str, Any]]) -> None: ...
    def close(self) -> None: ...


class FileSink:
    """An events file, appended to; what it holds is what was published."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def published(self) -> list[dict[str, Any]]:
        from detectors.detect_loop import read_events

        return read_events(self.path)[0]

    def publish(self, events: list[dict[str, Any]]) -> None:
        with self.path.open("a") as f:
            f.writelines(json.dumps(e, sort_keys=True) + "\n" for e in events)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        pass


class KafkaSink:
    """The events topic: one partition, keyed by job (by node for a node's state)."""

    def __init__(self, bootstrap: str, topic: str, should_stop: Callable[[], bool]) -> None:
        from ingest.kafka import TelemetryProducer, ensure_topics, until_reachable

        self.bootstrap, self.topic, self.should_stop = bootstrap, topic, should_stop
        until_reachable(lambda: ensure_topics(bootstrap, [topic], partitions=1), should_stop)
        self.producer = until_reachable(lambda: TelemetryProducer(bootstrap, client_id="aiops-scheduler"), should_stop)

    def published(self) -> list[dict[str, Any]]:
        from aiops.events_feed import decode_events
        from ingest.kafka import TopicReader, until_reachable

        def read_all() -> list[dict[str, Any]]:
            reader = TopicReader(self.bootstrap, self.topic, client_id="aiops-scheduler-replay")
            try:
                records: list[tuple[int, int, bytes]] = []
                at: dict[int, int] = {}
                while True:  # in rounds of a few seconds, until a round brings nothing
                    more, at = reader.read_new(at, wait_s=5.0)
                    if not more:
                        break
                    records += more
                return decode_events(records, self.topic)[0]
            finally:
                reader.close()

        return until_reachable(read_all, self.should_stop)

    def publish(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            key = str(e.get("job") or ",".join(e.get("nodes", [])) or e.get("name", ""))
            self.producer.send_raw(self.topic, json.dumps(e, sort_keys=True).encode(), key=key.encode())
        self.producer.flush(should_stop=self.should_stop)

    def close(self) -> None:
        self.producer.close()


def follow(
    source: Source,
    sink: Sink,
    tracker: Tracker,
    should_stop: Callable[[], bool],
    every_s: float,
    polls: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll, publish what changed, note it as said; until stopped. Returns the events published."""
    from context.scheduler.slurm import SlurmFormatError
    from context.scheduler.sources import SchedulerUnavailableError
    from ingest.kafka import KafkaIOError

    tracker.replay(sink.published())
    log.warning("following the scheduler: %d events published before", len(tracker.said))
    published = done = 0
    delay = every_s
    while not should_stop() and (polls is None or done < polls):
        done += 1
        try:
            snap = source.read()
            events = tracker.update(snap, note=False)
            if events:
                sink.publish(events)
                tracker.note(events)
                published += len(events)
                log.info("published %s", summary(events))
            delay = every_s
        except SchedulerUnavailableError as exc:  # waited for, with backoff
            delay = min(max(delay * 2, every_s), MAX_BACKOFF_S)
            log.warning("%s; asking again in %.0f s", exc, delay)
        except SlurmFormatError as exc:  # credentials expired, a bad answer: said, then asked again
            delay = min(max(delay * 2, every_s), MAX_BACKOFF_S)
            log.error("the scheduler's answer is not usable: %s; asking again in %.0f s", exc, delay)
        except KafkaIOError as exc:  # not noted as said: published again with the next poll
            log.warning("events not published this round: %s", exc)
        if not should_stop() and (polls is None or done < polls):
            sleep(delay)
    return published


def cmd_follow(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError, stop_on_signals
    from context.scheduler.sources import SlurmCli, SlurmRest, token_from
    from vocab.settings import Settings

    should_stop = stop_on_signals()
    source: Source
    if args.slurm:
        source = SlurmRest(
            args.slurm,
            args.slurm_user,
            token_from(args.slurm_token_file, os.environ.get("SLURM_JWT")),
            args.slurm_version,
        )
        name = "slurm"
    elif args.squeue:
        source, name = SlurmCli(), "slurm"
    else:
        source, name = _kubernetes(args), "kubernetes"
    sink: Sink
    if args.kafka:
        settings = Settings()
        sink = KafkaSink(args.kafka, settings.kafka.events_topic, should_stop)
    else:
        sink = FileSink(Path(args.out))
    if args.every <= 0:
        raise CliError("--every must be positive")
    try:
        count = follow(source, sink, Tracker(name), should_stop, args.every, args.polls)
    finally:
        sink.close()
    print(f"published {count} scheduler events")
    return 0


class KubernetesSource:
    """The Kubernetes follower (pods and nodes listed, then watched, in threads of its own), read
    as a snapshot at each poll: what happened between polls is kept by the follower."""

    def __init__(self, follower: KubernetesFollower) -> None:
        self.follower = follower.start()

    def read(self) -> Snapshot:
        from context.scheduler.sources import SchedulerUnavailableError

        snap = self.follower.snapshot()
        if not snap.parts:
            raise SchedulerUnavailableError(f"the API server at {self.follower.api.config.server} has not listed yet")
        return snap


def _kubernetes(args: argparse.Namespace) -> Source:
    from context.scheduler.kubernetes import ApiConfig, KubernetesFollower, PodResourcesFolder

    config = ApiConfig(
        args.kubernetes,
        Path(args.kubernetes_token_file) if args.kubernetes_token_file else None,
        Path(args.kubernetes_ca) if args.kubernetes_ca else None,
    )
    devices = PodResourcesFolder(Path(args.pod_resources)) if args.pod_resources else None
    return KubernetesSource(KubernetesFollower(config, devices=devices))

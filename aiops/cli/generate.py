"""`aiops gen`: a synthetic cluster's telemetry, events and truth, to a folder or to Kafka."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError, settings_from


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("gen", help="generate a synthetic cluster's telemetry, events and truth")
    p.add_argument("--gpus", type=int, default=1024, help="cluster size (a multiple of 8)")
    p.add_argument("--topology", default="fat-tree", choices=["fat-tree", "torus", "dragonfly"])
    p.add_argument("--hours", type=float, default=6.0, help="simulated hours")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between ticks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--start",
        type=float,
        metavar="UNIX_S",
        help="event time of the first tick (default 2026-01-01T00:00:00Z, so runs compare); "
        "e.g. $(( $(date +%%s) - 6*3600 )) for a history that ends now",
    )
    p.add_argument(
        "--faults", metavar="SPEC", help="e.g. gpu_hbm_ecc=3,leaf_down=1 or all=2; default: the published rate"
    )
    p.add_argument(
        "--job-shapes",
        choices=["nodes", "gpus"],
        default="nodes",
        help="jobs hold whole nodes, or any number of GPUs (several jobs sharing a node)",
    )
    p.add_argument(
        "--schedule-nodes-only",
        action="store_true",
        help="events name each job's nodes, not the GPU indices it holds there",
    )
    p.add_argument("--speed", type=float, help="pace: simulated seconds per second (default: as fast as possible)")
    p.add_argument("--out", metavar="DIR", help="write topology.json, telemetry.lp, events.jsonl, truth.jsonl")
    p.add_argument("--force", action="store_true", help="with --out: write into a folder that is not empty")
    p.add_argument("--kafka", metavar="HOST:PORT", help="publish telemetry to Kafka instead")
    p.add_argument("--topic", help="Kafka topic (default aiops.telemetry)")
    p.add_argument("--truth-dir", metavar="DIR", help="with --kafka: where topology, events and truth go")
    p.add_argument(
        "--site-formats",
        action="store_true",
        help="with --out: also the cluster as a site's tools describe it, in site/ (ibnetdiscover, LLDP, inventory)",
    )
    p.add_argument(
        "--realism",
        default="typical",
        choices=["clean", "typical", "harsh"],
        help="a healthy fleet's everyday noise (default typical; clean: none, for exact fault signatures)",
    )
    collector = p.add_argument_group(
        "what real collectors send (the line protocol only, never the physics; default: the realism level's)"
    )
    collector.add_argument("--clock-offset", type=float, metavar="S", help="per-host clocks off by 0..S s")
    collector.add_argument("--jitter", type=float, metavar="S", help="per-host, per-tick jitter 0..S s")
    collector.add_argument(
        "--truncate-seconds", action="store_true", help='timestamps in whole seconds (precision "1s")'
    )
    collector.add_argument(
        "--no-job-tags", action="store_true", help="GPU lines without a job tag (stock dcgm-exporter)"
    )
    collector.add_argument(
        "--one-field-per-line", action="store_true", help="one line per sample, as Telegraf's metric_version = 2"
    )
    p.set_defaults(handler=cmd_gen)


def cmd_gen(args: argparse.Namespace) -> int:
    from aiops.progress_bar import Progress
    from telemetry_gen.emit import EmitStats, to_kafka, write_folder
    from telemetry_gen.faults import FaultSpecError
    from telemetry_gen.generator import GenConfig, Generation, write_jsonl, write_meta
    from telemetry_gen.simulate import T0
    from telemetry_gen.topology import TopologyError

    if bool(args.out) == bool(args.kafka):
        raise CliError("give exactly one of --out DIR or --kafka HOST:PORT")
    config = GenConfig(
        gpus=args.gpus,
        topology=args.topology,
        hours=args.hours,
        interval=args.interval,
        seed=args.seed,
        faults=args.faults,
        realism=args.realism,
        clock_offset_s=args.clock_offset,
        jitter_s=args.jitter,
        truncate_s=True if args.truncate_seconds else None,
        job_tags=False if args.no_job_tags else None,
        single_field=True if args.one_field_per_line else None,
        job_shapes=args.job_shapes,
        schedule_gpu_indices=not args.schedule_nodes_only,
        start=args.start if args.start is not None else T0,
    )
    try:
        gen = Generation(config)
    except FaultSpecError as exc:
        hint = " (a larger --gpus or --hours, or fewer --faults)" if "no free place" in str(exc) else ""
        raise CliError(f"{exc}{hint}") from None
    except (TopologyError, ValueError) as exc:
        raise CliError(str(exc)) from None
    progress = Progress(gen.sim.steps, "aiops gen", "ticks")

    def ticked(_: EmitStats) -> None:
        progress.advance()

    if args.out:
        out = Path(args.out)
        with progress:
            stats = write_folder(gen, out, speed=args.speed, on_tick=ticked)
        where = str(out)
        if args.site_formats:
            from telemetry_gen.site_formats import write_site_formats

            if not write_site_formats(json.loads((out / "topology.json").read_text()), out / "site"):
                print(f"aiops: no site formats for a {args.topology} (fat-trees only)", file=sys.stderr)
    else:
        from ingest.kafka import ensure_topics

        settings = settings_from(args)
        ensure_topics(settings.kafka.bootstrap, [settings.kafka.telemetry_topic])
        folder = Path(args.truth_dir) if args.truth_dir else None
        if folder is not None:  # the topology first: a daemon can start on it meanwhile
            folder.mkdir(parents=True, exist_ok=True)
            gen.topology.write(folder / "topology.json")
            write_meta(folder / "meta.json", gen)
        with progress:
            stats = to_kafka(
                gen, settings.kafka.bootstrap, settings.kafka.telemetry_topic, speed=args.speed, on_tick=ticked
            )
        where = f"{settings.kafka.telemetry_topic} at {settings.kafka.bootstrap}"
        if folder is not None:  # events and truth last: the stream adds events as it goes
            write_jsonl(folder / "events.jsonl", gen.events())
            write_jsonl(folder / "truth.jsonl", gen.truth())
    rate = stats.values / max(stats.seconds, 1e-9)
    print(
        f"generated {config.gpus:,} GPUs ({config.topology}), {stats.ticks} ticks, {stats.values:,} values, "
        f"{len(gen.faults)} faults -> {where} in {stats.seconds:.1f}s ({rate:,.0f} values/s)"
    )
    return 0

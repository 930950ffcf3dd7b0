"""`deltaport emulate`: play a Prostore datamart story into Kafka (signal topic + backups), or with
`--format F --topic T` a change stream of a registered format F (qlik, dataworks, datastream, ...).

Deterministic from --seed. With --faults it injects what real Prostore traffic has: duplicated
messages, a lost chunk, a delta exported twice, a backup lagging its DELTA_CLOSE, malformed
messages. --truth writes the true state of every table after every delta (the oracle) as JSON.
The change streams always carry their format's quirks (duplicates, split updates, heartbeats,
out-of-order backfill, a rolled-back transaction, a DDL change); --truth writes their final state."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from platform_assets.cli.common import Progress, add_bootstrap_option, resolve_bootstrap
from resources.emulator.oracle import truth_document
from resources.emulator.formats import EMULATED
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario, snapshot_export
from resources.kafka.admin import create_topic

FAULT_NAMES = ("duplicates", "lost-chunk", "reexport", "lag", "malformed")


def faults_from(names: str, deltas: int) -> Faults:
    """--faults a,b,c (or "all") -> Faults, placed on early deltas so short runs show them all."""
    chosen = set(FAULT_NAMES) if names == "all" else {n.strip() for n in names.split(",") if n.strip()}
    unknown = chosen - set(FAULT_NAMES)
    if unknown:
        raise SystemExit(f"unknown fault(s) {sorted(unknown)}; choose from {', '.join(FAULT_NAMES)} or 'all'")
    last = max(deltas - 1, 0)
    return Faults(
        duplicate_rate=0.05 if "duplicates" in chosen else 0.0,
        # delta 1 loses a chunk for good; delta 2 loses one and is then re-exported complete
        lost_chunk_deltas=tuple(d for d in (1, 2) if d <= last) if "lost-chunk" in chosen else (),
        reexport_deltas=tuple(d for d in (2,) if d <= last) if "reexport" in chosen else (),
        lagging_deltas=tuple(d for d in (3,) if d <= last) if "lag" in chosen else (),
        malformed="malformed" in chosen,
    )


def register(sub) -> None:
    p = sub.add_parser("emulate", help="write emulated Prostore traffic to Kafka", description=__doc__)
    add_bootstrap_option(p)
    d = EmulatorConfig()
    p.add_argument("--signal-topic", default="prostore.signal")
    p.add_argument("--backup-topic", default="prostore.backup")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--deltas", type=int, default=d.deltas, help="closed deltas per datamart")
    p.add_argument("--datamarts", default=",".join(d.datamarts), help="comma-separated: marketing,sourcedb")
    p.add_argument("--rows-per-delta", type=int, default=d.rows_per_delta)
    p.add_argument("--chunk-size", type=int, default=d.chunk_size, help="rows per backup message")
    p.add_argument("--streams", type=int, default=d.streams, help="writing streams (--threadsCount)")
    p.add_argument("--partitions", type=int, default=d.backup_partitions, help="backup topic partitions")
    p.add_argument("--signal-partitions", type=int, default=d.signal_partitions)
    p.add_argument("--numbering", choices=["stream", "table"], default=d.numbering,
                   help="chunk numbers per stream, or per table within a stream")
    p.add_argument("--no-logical-types", action="store_true", help="write DATE/TIME/TIMESTAMP/UUID as plain Avro")
    p.add_argument("--codec", choices=["null", "deflate", "snappy"], default=d.codec)
    p.add_argument("--faults", default="", help=f"comma-separated of {', '.join(FAULT_NAMES)}, or 'all'")
    p.add_argument("--snapshot-topic", default=None, help="also write a snapshot backup to this new topic")
    p.add_argument("--snapshot-depth", type=int, default=0)
    p.add_argument("--truth", type=Path, default=None, help="write the oracle (true state per delta) here")
    p.add_argument("--pace", type=float, default=0.0, help="seconds to wait after each DELTA_CLOSE")
    p.add_argument("--format", choices=["prostore", *STREAMS], default="prostore",
                   help="prostore (default), or a change stream written to --topic")
    p.add_argument("--topic", default=None, help="the change stream's topic (default: <format>.demo)")
    sizes = ", ".join(f"{h.size_means} ({name})" for name, h in EMULATED.items())
    p.add_argument("--size", type=int, default=None, help=f"change streams: {sizes}")
    wires = sorted({w for h in EMULATED.values() for w in h.wires})
    p.add_argument("--wire", choices=wires, default="json",
                   help="change streams: the wire form (" + ", ".join(
                       f"{name}: {'|'.join(h.wires)}" for name, h in EMULATED.items()) + ")")
    p.set_defaults(run=run)


STREAMS = tuple(EMULATED)  # the change-stream formats that have an emulator (resources/emulator/formats.py)


def stream_story(fmt: str, seed: int, size: int | None, wire: str):
    hooks = EMULATED.get(fmt)
    if hooks is None:
        raise SystemExit(f"format {fmt!r} has no emulator")
    return hooks.story(seed, size, wire)


def run_stream(args, bootstrap: str) -> int:
    from resources.emulator.stream_oracle import final_truth

    story = stream_story(args.format, args.seed, args.size, args.wire)
    topic = args.topic or f"{args.format}.demo"
    create_topic(bootstrap, topic)
    bar = Progress("emulate")
    try:
        sent = publish(story.messages, bootstrap, {args.format: topic},
                       on_progress=lambda i: bar(i, len(story.messages)))
    finally:
        bar.close()
    print(f"wrote {sent.get(topic, 0)} {args.format} messages to {topic}")
    for kind, items in sorted(story.injected.items()):
        print(f"quirk {kind}: {len(items)}")
    if args.truth:
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps({"format": args.format, "final": final_truth(args.format, story)},
                                         ensure_ascii=False, indent=1, default=str))
        print(f"wrote the final state of every table (lake table names) to {args.truth}")
    return 0


def config_from(args) -> EmulatorConfig:
    cfg = EmulatorConfig(
        seed=args.seed, deltas=args.deltas, datamarts=tuple(x for x in args.datamarts.split(",") if x),
        rows_per_delta=args.rows_per_delta, chunk_size=args.chunk_size, streams=args.streams,
        backup_partitions=args.partitions, signal_partitions=args.signal_partitions,
        numbering=args.numbering, logical_types=not args.no_logical_types, codec=args.codec,
    )
    return replace(cfg, faults=faults_from(args.faults, args.deltas)) if args.faults else cfg


def run(args) -> int:
    bootstrap = resolve_bootstrap(args)
    if args.format != "prostore":
        return run_stream(args, bootstrap)
    cfg = config_from(args)
    sc = build_scenario(cfg)
    create_topic(bootstrap, args.signal_topic, partitions=cfg.signal_partitions)
    create_topic(bootstrap, args.backup_topic, partitions=cfg.backup_partitions)
    topics = {SIGNAL: args.signal_topic, BACKUP: args.backup_topic}
    pace = None
    if args.pace > 0:
        pace = lambda m: time.sleep(args.pace) if m.role == SIGNAL and "DELTA_CLOSE" in m.note else None  # noqa: E731
    bar = Progress("emulate")
    try:
        sent = publish(sc.messages, bootstrap, topics, pace=pace, on_progress=lambda i: bar(i, len(sc.messages)))
    finally:
        bar.close()
    for topic, n in sent.items():
        print(f"wrote {n} messages to {topic}")
    for name in cfg.datamarts:
        closed = sorted(sc.truth[name])
        print(f"datamart {name}: deltas closed {closed[0]}..{closed[-1]} ({len(closed)}), "
              f"cancelled {sc.cancelled[name] or 'none'}")
    for kind, items in sorted(sc.injected.items()):
        print(f"fault {kind}: {len(items)}")
    if args.snapshot_topic:
        name = cfg.datamarts[0]
        msgs, mapping = snapshot_export(sc, name, args.snapshot_depth)
        create_topic(bootstrap, args.snapshot_topic, partitions=cfg.backup_partitions)
        publish(msgs, bootstrap, {BACKUP: args.snapshot_topic})
        print(f"wrote a snapshot backup of {name} to {args.snapshot_topic}: snapshot delta -> source delta {mapping}")
    if args.truth:
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth_document(sc), ensure_ascii=False, indent=1))
        print(f"wrote the truth (oracle) to {args.truth}")
    return 0

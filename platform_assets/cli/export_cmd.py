"""`deltaport export SOURCE --topic T`: a source's deltas from the lake back to Kafka, in the
BACKUP_TO_KAFKA format Prostore's RESTORE_FROM_KAFKA reads (and deltaport lands: a backup-only
source on T gives the same tables as of every delta).

Increments keep their numbers: `--from-delta/--to-delta` for a range, else the seed's "all new
deltas" (every delta the lake holds when the topic has none of this datamart's increments, else
only those after the greatest delta the topic has: run it again to append what landed since).
`--snapshot-depth D` writes the state as of delta last - D as delta 0 and the D deltas after it
as 1..D, to a topic of its own (a snapshot into a topic that has messages is refused: the seed
says such a topic cannot be restored reliably). `--chunk-size`, `--streams` and `--partitions`
are BACKUP_TO_KAFKA's own knobs. A change stream (Qlik, DataWorks, Datastream) exports as a
Prostore datamart of the same name (`--as-datamart` to rename): each delta the difference of the
stream's own states, its tables described as Prostore DDL (resources/lake/stream_export.py).
Progress per delta on stderr; the topic is created when missing.
"""

from __future__ import annotations

import sys
import time

from platform_assets.cli.common import add_config_option
from platform_assets.config import load_config
from platform_assets.engine import engine_for
from resources.codecs.backup_writer import BackupWriteOptions
from resources.errors import DeltaportError


def register(sub) -> None:
    p = sub.add_parser("export", help="write a source's deltas from the lake to Kafka as BACKUP_TO_KAFKA",
                       description=__doc__)
    p.add_argument("source", help="a source of the config: a datamart, or a Qlik/DataWorks/Datastream stream")
    p.add_argument("--topic", required=True, help="the Kafka topic to write")
    p.add_argument("--from-delta", type=int, default=None, help="first delta (default: the lake's first)")
    p.add_argument("--to-delta", type=int, default=None, help="last delta (default: the lake's last)")
    p.add_argument("--snapshot-depth", type=int, default=None,
                   help="a snapshot backup: the state as of the last delta minus D, then D deltas, renumbered from 0")
    p.add_argument("--as-datamart", default=None, help="the datamart name written in the keys (default: SOURCE)")
    p.add_argument("--chunk-size", type=int, default=1000, help="rows per message (--chunkSize, default 1000)")
    p.add_argument("--streams", type=int, default=1, help="parallel writing streams (--threadsCount)")
    p.add_argument("--partitions", type=int, default=1,
                   help="partitions of a topic created here (--partitionsCount); stream s writes to (s-1) mod this")
    p.add_argument("--codec", choices=["null", "deflate", "snappy"], default="null", help="Avro container codec")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from platform_assets.definitions import kafka_resource
    from resources.emulator.outgoing import BACKUP, Outgoing
    from resources.kafka.publish import publish
    from resources.kafka.admin import create_topic, watermarks
    from resources.lake.export import choose_deltas, export_increments, export_snapshot, landed_increments
    from resources.lake.layout import LakeLayout

    cfg = load_config(args.config)
    if args.source not in cfg.source_names:
        raise DeltaportError(f"{args.source!r} is not a source of {cfg.source_file} "
                             f"(sources: {', '.join(cfg.source_names)})")
    stream = args.source not in {d.name for d in cfg.datamarts}
    if args.snapshot_depth is not None and args.from_delta is not None:
        raise DeltaportError("--snapshot-depth takes the last delta from --to-delta (or the lake's last), "
                             "not --from-delta")
    options = BackupWriteOptions(chunk_size=args.chunk_size, streams=args.streams, partitions=args.partitions,
                                 codec=args.codec)
    kafka = kafka_resource(cfg)
    bootstrap = kafka.bootstrap()
    spark = engine_for(cfg).session()
    layout = LakeLayout(cfg.lake.catalog)
    if stream:
        from resources.lake.cdc import cdc_landed_deltas
        from resources.lake.stream_export import export_stream

        manifest = cdc_landed_deltas(spark, layout, args.source)
    else:
        manifest = landed_increments(spark, layout, args.source)
    landed = sorted(manifest)
    if not landed:
        raise DeltaportError(f"{args.source!r} has no delta in the lake")
    create_topic(bootstrap, args.topic, partitions=args.partitions, timeout=kafka.timeout_seconds,
                 client_config=kafka.client_config())
    if args.snapshot_depth is None:
        first = args.from_delta
        if first is None and args.to_delta is None:
            present = _deltas_in_topic(bootstrap, args.topic, args.as_datamart or args.source, kafka)
            if present:
                first = present[-1] + 1
                if first > landed[-1]:
                    print(f"nothing to export: {args.topic} has {args.source}'s deltas up to {present[-1]}, "
                          f"the lake's last is {landed[-1]}")
                    return 0
        chosen = choose_deltas(landed, args.source, first, args.to_delta)
        if stream:
            deltas = export_stream(spark, layout, args.source, chosen, options, as_datamart=args.as_datamart,
                                   landed=manifest)
        else:
            deltas = export_increments(spark, layout, args.source, chosen, options, as_datamart=args.as_datamart,
                                       landed=manifest)
        total = len(chosen)
    else:
        last = choose_deltas(landed, args.source, None, args.to_delta)[-1]
        if stream:
            if args.snapshot_depth < 0:
                raise DeltaportError(f"--snapshot-depth must be >= 0, got {args.snapshot_depth}")
            chosen = choose_deltas(landed, args.source, last - args.snapshot_depth, last)
            deltas = export_stream(spark, layout, args.source, chosen, options, as_datamart=args.as_datamart,
                                   snapshot=True, landed=manifest)
        else:
            deltas = export_snapshot(spark, layout, args.source, args.snapshot_depth, last, options,
                                     as_datamart=args.as_datamart, landed=manifest)
        total = args.snapshot_depth + 1
        held = sum(high - low for low, high in watermarks(bootstrap, args.topic, kafka.timeout_seconds,
                                                                  client_config=kafka.client_config()).values())
        if held:
            raise DeltaportError(f"topic {args.topic!r} already holds {held} messages: a snapshot goes to a "
                                 "topic of its own (the seed: a topic with several snapshots is not restorable)")
    started, exported, messages, rows = time.monotonic(), 0, 0, 0
    for d in deltas:
        sent = publish([Outgoing(BACKUP, m.partition, m.key, m.value, m.note) for m in d.messages], bootstrap,
                       {BACKUP: args.topic}, producer_config=kafka.client_config(), timeout=kafka.timeout_seconds)
        exported += 1
        messages += sum(sent.values())
        rows += d.rows
        source = "" if d.source_delta == d.delta_num else f" (lake delta {d.source_delta})"
        print(f"[{exported}/{total}] delta {d.delta_num}{source}: {d.rows} rows, {len(d.messages)} messages",
              file=sys.stderr, flush=True)
    print(f"exported {exported} deltas of {args.source} to {args.topic}: {rows} rows in {messages} messages "
          f"({time.monotonic() - started:.1f} s)")
    return 0


def _deltas_in_topic(bootstrap: str, topic: str, datamart: str, kafka) -> list[int]:
    """The deltas of `datamart` whose messages `topic` holds (keys only; a message that is not a
    backup key belongs to no increment and is counted, not read further)."""
    from resources.codecs.backup import decode_backup_key
    from resources.errors import DecodeError
    from resources.kafka.scan import scan

    found, foreign = set(), 0
    for msg in scan(bootstrap, topic, config=kafka.client_config(), timeout=kafka.timeout_seconds):
        try:
            key = decode_backup_key(msg.key or b"")
        except DecodeError:
            foreign += 1
            continue
        if key.datamart == datamart:
            found.add(key.delta_num)
    if foreign:
        print(f"{topic}: {foreign} messages without a backup key (not an increment; `deltaport inspect` locates them)",
              file=sys.stderr)
    return sorted(found)

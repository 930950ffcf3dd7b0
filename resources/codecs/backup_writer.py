"""Write one BACKUP_TO_KAFKA increment: a changelog and rows in, the Kafka messages out.

What flows through: a datamart's delta (number, close time, the changelog to ship with it and
each table's columns and row changes, every row with `sys_op`) becomes the messages
`BACKUP_TO_KAFKA` would write for it (seed 001; `../shared/spec/prostore-backup-to-kafka.md`):
keys of the seed's key schema in Avro container files, the changelog as the first message of
stream 1, each table's rows in container files of at most `chunk_size` records, the bodies dealt
round-robin over `streams` writers, stream s written to partition (s - 1) mod `partitions`,
chunk numbers from 1 per stream (or per table within a stream, the seed's other reading) and
`isLastChunk` on each stream's last message, the streams interleaved as parallel writers would.

Guarantees: the output is exactly what `resources.prostore.completeness` calls a complete increment, and
`resources.codecs.backup` decodes every message back to the same rows (types by the seed's type
table, `resources.codecs.types`). Deterministic when `sync` (the Avro sync markers) and the
increment id are. Used by the emulator (its traffic) and by `deltaport export` (the lake's
deltas). Nothing here imports Dagster, Kafka or Spark.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resources.codecs.backup import (
    CODECS,
    MESSAGE_TYPE_CHANGELOG,
    MESSAGE_TYPE_DATA,
    BackupKey,
    ChangelogRecord,
    encode_backup_key,
    encode_changelog,
    encode_rows,
)
from resources.codecs.types import Column

NUMBERINGS = ("stream", "table")


@dataclass(frozen=True)
class BackupWriteOptions:
    """BACKUP_TO_KAFKA's knobs: --chunkSize, --threadsCount, --partitionsCount, and how rows are
    encoded (Avro logical-type annotations or the seed's bare primitives; the container codec)."""

    chunk_size: int = 1000
    streams: int = 1
    partitions: int = 1
    numbering: str = "stream"  # chunk numbers per "stream", or per "table" within a stream
    logical_types: bool = True
    codec: str = "null"

    def __post_init__(self) -> None:
        for name in ("chunk_size", "streams", "partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.numbering not in NUMBERINGS:
            raise ValueError(f"numbering must be one of {NUMBERINGS}, got {self.numbering!r}")
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {self.codec!r}")


@dataclass(frozen=True)
class BackupMessage:
    """One message of an increment: where it goes, its bytes, and what it holds."""

    partition: int
    key: bytes
    value: bytes
    table: str | None  # None: the changelog
    note: str  # datamart:delta:incrementId:table:s<stream>c<chunk>, for logs


@dataclass(frozen=True)
class TableChanges:
    """One table's part of an increment: its columns (as the shipped changelog declares them)
    and its row changes, each a {column: canonical value} mapping plus "sys_op"."""

    columns: Sequence[Column]
    rows: Sequence[Mapping[str, Any]]


def _random_sync() -> bytes:
    return os.urandom(16)


def encode_increment(datamart: str, delta_num: int, delta_date_us: int, increment_id: str,
                     changelog: Sequence[ChangelogRecord], tables: Mapping[str, TableChanges],
                     options: BackupWriteOptions = BackupWriteOptions(), *,
                     sync: Callable[[], bytes] = _random_sync) -> list[BackupMessage]:
    """The messages of one increment, in the order parallel writers would produce them.

    A table with no row changes writes no message (as Prostore writes none for it). `sync` gives
    each container's sync marker, called in a fixed order (changelog, data chunks, keys), so a
    seeded caller gets the same bytes every time.
    """
    bodies: list[tuple[str | None, bytes]] = [
        (None, encode_changelog(changelog, codec=options.codec, sync_marker=sync()))]
    for table in sorted(tables):
        part = tables[table]
        rows = part.rows
        for i in range(0, len(rows), options.chunk_size):
            bodies.append((table, encode_rows(part.columns, rows[i : i + options.chunk_size],
                                              logical_types=options.logical_types, codec=options.codec,
                                              sync_marker=sync())))
    return increment_messages(datamart, delta_num, delta_date_us, increment_id, bodies, options, sync=sync)


def increment_messages(datamart: str, delta_num: int, delta_date_us: int, increment_id: str,
                       bodies: Sequence[tuple[str | None, bytes]], options: BackupWriteOptions = BackupWriteOptions(),
                       *, sync: Callable[[], bytes] = _random_sync) -> list[BackupMessage]:
    """Already encoded message values [(table, or None for the changelog; value)], the changelog
    first, laid out as BACKUP_TO_KAFKA writes them: round-robin over the writing streams, keys with
    stream and chunk numbers and isLastChunk, stream s on partition (s - 1) mod partitions, the
    streams interleaved as parallel writers produce them."""
    total = min(options.streams, len(bodies))
    streams: dict[int, list[tuple[str | None, bytes]]] = {}
    for i, body in enumerate(bodies):
        streams.setdefault(i % total + 1, []).append(body)
    per_stream: list[list[BackupMessage]] = []
    for stream, items in streams.items():
        counters: dict[str, int] = {}
        out = []
        for j, (table, body) in enumerate(items):
            group = (table or "<changelog>") if options.numbering == "table" else "*"
            counters[group] = counters.get(group, 0) + 1
            key = BackupKey(
                increment_id=increment_id,
                message_type=MESSAGE_TYPE_CHANGELOG if table is None else MESSAGE_TYPE_DATA,
                datamart=datamart, delta_num=delta_num, delta_date=delta_date_us, table_name=table,
                stream_number=stream, stream_total=total, chunk_number=counters[group],
                is_last_chunk=j == len(items) - 1,
            )
            note = f"{datamart}:{delta_num}:{increment_id}:{table or '<changelog>'}:s{stream}c{counters[group]}"
            out.append(BackupMessage((stream - 1) % options.partitions,
                                     encode_backup_key(key, sync_marker=sync()), body, table, note))
        per_stream.append(out)
    # Interleave the streams as parallel writers would.
    return [msgs[j] for j in range(max(map(len, per_stream))) for msgs in per_stream if j < len(msgs)]


"""A datamart's deltas, read back from the lake as BACKUP_TO_KAFKA increments (`deltaport export`).

What flows through: the lake's record of each landed delta (the manifest: close time and which
tables changed; the changelog the delta landed with; the increment tables' rows of the delta,
with `sys_op`) becomes the messages BACKUP_TO_KAFKA writes for that delta
(`resources.codecs.backup_writer`), one delta at a time, in delta order, for a producer to send.
Two modes, the seed's two (001, "Modes"):
- increments: delta N of the lake is written as delta N, with its own close time;
- snapshot (`depth` D): the state as of delta B = last - D (every row of every table, sys_op 0)
  is written as delta 0, then deltas B+1..last as 1..D (renumbered, as the seed says).

Decisions where the seed is silent (docs/using.md, `export`):
- Each delta ships the changelog it landed with (for a lake landed live: the schema as of that
  delta), and its rows in the columns that changelog declares. Prostore would ship today's
  changelog and today's columns with an old delta; shipping the delta's own keeps every value a
  later DROP or RENAME would otherwise lose, and a reader replays the same schema history.
- A snapshot's deltas keep the source deltas' close times: a time is a time, and the seed only
  says they "do not match" the source (the numbers do not).
- Each exported delta gets a new incrementId (an export run is a new increment for the seed).
Guarantees: rows are read from the increment tables (never recomputed from snapshots), so an
exported increment holds exactly the changes that landed, deletes included; a delta the lake
does not hold raises `ExportError` naming it before anything is produced.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from resources.codecs.backup_writer import BackupMessage, BackupWriteOptions, TableChanges, encode_increment
from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.errors import DeltaportError
from resources.lake.history_read import read_mark
from resources.lake.layout import LakeLayout
from resources.lake.prostore import changelog_history, data_tables
from resources.lake.read import rows_as_of
from resources.spark.iceberg import table_exists

# Increment rows held in the client at once (a window of deltas is read per table per query).
WINDOW_ROWS = 200_000


class ExportError(DeltaportError):
    """The lake cannot give what an export asks for."""


@dataclass(frozen=True)
class ExportedDelta:
    delta_num: int  # the number written in the topic
    source_delta: int  # the lake's delta it holds (delta 0 of a snapshot: the state as of it)
    messages: list[BackupMessage]
    rows: int


@dataclass(frozen=True)
class _Landed:
    delta_num: int
    delta_date_us: int
    rows: dict[str, int]  # {table: row changes} of the tables the delta changed


def landed_increments(spark, layout: LakeLayout, datamart: str) -> dict[int, _Landed]:
    """{delta: what the manifest says of it} for every delta whose increment landed (one read)."""
    ident = layout.meta(datamart, "manifest")
    if not table_exists(spark, ident):
        return {}
    out: dict[int, _Landed] = {}
    for r in spark.table(ident).select("delta_num", "table_name", "rows", "delta_date_us").collect():
        landed = out.setdefault(r.delta_num, _Landed(r.delta_num, r.delta_date_us, {}))
        if r.table_name is not None and r.rows:
            landed.rows[r.table_name] = r.rows
    return dict(sorted(out.items()))


def choose_deltas(landed: Sequence[int], datamart: str, from_delta: int | None, to_delta: int | None) -> list[int]:
    """The deltas of [from_delta, to_delta] (either open), all of which must have landed."""
    if not landed:
        raise ExportError(f"datamart {datamart!r} has no delta in the lake")
    lo = landed[0] if from_delta is None else from_delta
    hi = landed[-1] if to_delta is None else to_delta
    if lo > hi:
        raise ExportError(f"--from-delta {lo} is after --to-delta {hi}")
    have = set(landed)
    missing = [n for n in range(lo, hi + 1) if n not in have]
    if missing:
        raise ExportError(f"datamart {datamart!r}: delta(s) {_short(missing)} are not in the lake "
                          f"(landed: {_short(landed)})")
    return list(range(lo, hi + 1))


def _short(numbers: Sequence[int]) -> str:
    numbers = list(numbers)
    return ", ".join(map(str, numbers)) if len(numbers) <= 8 else f"{numbers[0]}..{numbers[-1]} ({len(numbers)})"


def export_increments(spark, layout: LakeLayout, datamart: str, deltas: Sequence[int],
                      options: BackupWriteOptions = BackupWriteOptions(), *, as_datamart: str | None = None,
                      new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                      landed: Mapping[int, _Landed] | None = None) -> Iterator[ExportedDelta]:
    """Each delta of `deltas` (landed, see `choose_deltas`) as an increment, in order.
    `landed`: `landed_increments` when the caller has read it already."""
    return _increments(spark, layout, datamart, {n: n for n in deltas}, options, as_datamart or datamart, new_id,
                       landed=landed)


def export_snapshot(spark, layout: LakeLayout, datamart: str, depth: int, last: int,
                    options: BackupWriteOptions = BackupWriteOptions(), *, as_datamart: str | None = None,
                    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                    landed: Mapping[int, _Landed] | None = None) -> Iterator[ExportedDelta]:
    """A snapshot backup of depth `depth` ending at the lake's delta `last`: the state as of
    `last - depth` as delta 0, then the increments after it renumbered 1..depth."""
    if depth < 0:
        raise ExportError(f"snapshot depth must be >= 0, got {depth}")
    landed = landed_increments(spark, layout, datamart) if landed is None else landed
    base = last - depth
    chosen = choose_deltas(sorted(landed), datamart, base, last)
    history = changelog_history(spark, layout, datamart)
    name = as_datamart or datamart
    changelog = history[base]
    state = {}
    mark = read_mark(spark, layout, datamart)  # once for every table (a table `base` left alone has no tag)
    for table, entity in _tables(changelog).items():
        rows = rows_as_of(spark, layout, datamart, table, base, mark=mark)
        if rows:
            state[table] = TableChanges(entity.columns, [{**r, "sys_op": 0} for r in rows])
    yield ExportedDelta(0, base, encode_increment(name, 0, landed[base].delta_date_us, new_id(), changelog, state, options),
                        sum(len(p.rows) for p in state.values()))
    yield from _increments(spark, layout, datamart, {n: i for i, n in enumerate(chosen) if i}, options, name, new_id,
                           landed=landed, history=history)


def _increments(spark, layout: LakeLayout, datamart: str, numbers: dict[int, int], options: BackupWriteOptions,
                name: str, new_id: Callable[[], str], *, landed=None, history=None) -> Iterator[ExportedDelta]:
    """The lake's deltas `numbers` ({lake delta: number in the topic}) as increments, in order."""
    landed = landed_increments(spark, layout, datamart) if landed is None else landed
    history = changelog_history(spark, layout, datamart) if history is None else history
    for window in _windows([landed[n] for n in sorted(numbers)]):
        rows = _increment_rows(spark, layout, datamart, window, history)
        for d in window:
            changelog = history[d.delta_num]
            parts = {t: TableChanges(e.columns, rows[(d.delta_num, t)])
                     for t, e in _tables(changelog).items() if rows.get((d.delta_num, t))}
            number = numbers[d.delta_num]
            yield ExportedDelta(number, d.delta_num,
                                encode_increment(name, number, d.delta_date_us, new_id(), changelog, parts, options),
                                sum(len(p.rows) for p in parts.values()))


def _tables(changelog) -> dict[str, EntitySchema]:
    return data_tables(replay_changelog(changelog))


def _windows(deltas: Sequence[_Landed]) -> Iterator[list[_Landed]]:
    """Consecutive deltas in groups of about WINDOW_ROWS row changes (a big delta alone)."""
    window, size = [], 0
    for d in deltas:
        n = sum(d.rows.values())
        if window and size + n > WINDOW_ROWS:
            yield window
            window, size = [], 0
        window.append(d)
        size += n
    if window:
        yield window


def _increment_rows(spark, layout: LakeLayout, datamart: str, window: Sequence[_Landed],
                    history) -> dict[tuple[int, str], list[dict]]:
    """{(delta, table): row changes} of the window's deltas: one query per table, each delta's
    rows in the columns of its own changelog, in the order they were read from Kafka."""
    from pyspark.sql import functions as F

    out: dict[tuple[int, str], list[dict]] = {}
    for table in sorted({t for d in window for t in d.rows}):
        mine = [d.delta_num for d in window if table in d.rows]
        columns: dict[int, list[str]] = {n: [c.name for c in _tables(history[n])[table].columns] for n in mine}
        wanted = list(dict.fromkeys(c for n in mine for c in columns[n]))
        frame = (spark.table(layout.increment(datamart, table)).where(F.col("delta_num").isin(mine))
                 .select("delta_num", "_kafka_partition", "_kafka_offset", "sys_op", *[F.col(f"`{c}`") for c in wanted])
                 .orderBy("delta_num", "_kafka_partition", "_kafka_offset"))
        for row in frame.toArrow().to_pylist():
            n = row["delta_num"]
            out.setdefault((n, table), []).append({**{c: row[c] for c in columns[n]}, "sys_op": row["sys_op"]})
    return out

"""The demo's change-stream sources: one per registered format with a demo source (resources/formats/).

Each has its emulated story (scaled by `--deltas`, with each format's quirks: duplicates, split
updates, heartbeats, out-of-order backfill, a rolled-back transaction, a DDL change), its topic,
and sealing limits small enough that the story makes several deltas. `compare` reads every
landed delta back from Kafka through the ledger and prints the lake's rows beside the story's
truth per delta and table (resources/emulator/stream_oracle.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.emulator.formats import EMULATED


@dataclass(frozen=True)
class DemoStream:
    name: str
    format: str
    topic: str
    story: object
    limits: dict

    def config(self, idle_seconds: float) -> dict:
        return {"name": self.name, "format": self.format, "topic": self.topic, "idle_seconds": idle_seconds,
                **self.limits}


def demo_streams(seed: int, deltas: int) -> list[DemoStream]:
    out = []
    for name, hooks in EMULATED.items():
        if hooks.demo is not None:
            d = hooks.demo(seed, deltas)
            out.append(DemoStream(d.name, name, d.topic, d.story, dict(d.limits)))
    return out


def compare(streams: list[DemoStream], spark, layout, bootstrap: str, ledger, landed: set[tuple[str, int]],
            echo=print) -> tuple[bool, int, int]:
    """Print per stream, landed delta and table the lake's rows beside the truth; returns (all
    equal, deltas compared, deltas landed). A delta whose truth is undefined (a Datastream delta
    before the backfill ended, a Qlik one inside the full load) is shown as such, not compared."""
    from resources.emulator.stream_oracle import same_rows, truth_after
    from resources.errors import DecodeError
    from resources.lake.cdc import cdc_recorded_deltas, cdc_rows_as_of
    from resources.lake.history_read import read_mark
    from resources.lake.side_by_side import side_by_side
    from resources.changestream.sealing import read_delta
    from resources.spark.iceberg import table_exists

    all_equal, compared, total = True, 0, 0
    for s in streams:
        records: list = []
        deltas = [d for d in ledger.sealed_deltas(s.name) if (s.name, d.delta_num) in landed]
        if not deltas:
            echo(f"{s.name:16} no delta landed")
            all_equal = False
        lines: list = []  # (delta, table, truth rows), or (delta, None, None): truth undefined
        for d in deltas:
            total += 1
            records += [r for _, rs in read_delta(bootstrap, ledger, s.name, d.delta_num, s.format)
                        if not isinstance(rs, DecodeError) for r in rs]
            truth = truth_after(s.format, s.story, records, d.watermark_us)
            compared += truth is not None
            lines += [(d.delta_num, None, None)] if truth is None else [(d.delta_num, t, rows) for t, rows in sorted(truth.items())]
        # {table: the deltas it answers as of, from its first to the stream's landed one, those that
        # left it alone too}; none of its changes landed yet: no table. The mark: once per stream.
        mark = read_mark(spark, layout, s.name)
        recorded = {}
        for table in sorted({t for _, t, _ in lines if t is not None}):
            ident = layout.snapshot(s.name, table)
            recorded[table] = cdc_recorded_deltas(spark, ident, mark=mark) if table_exists(spark, ident) else set()
        # Read side by side: each read is a few small Spark queries that mostly wait on the server.
        got = side_by_side(lambda n, t: cdc_rows_as_of(spark, layout, s.name, t, n, mark=mark)
                           if t and n in recorded[t] else [], [(n, t) for n, t, _ in lines])
        for (n, table, rows), lake in zip(lines, got):
            if table is None:
                echo(f"{s.name:16} {n:>5} {'(truth undefined here: ' + _why(s.format) + ')'}")
                continue
            equal = same_rows(lake, rows)
            all_equal &= equal
            echo(f"{s.name:16} {n:>5} {table:18} {len(lake):>9} {len(rows):>10}  {'yes' if equal else 'NO'}")
    return all_equal, compared, total


def _why(fmt: str) -> str:
    return EMULATED[fmt].undefined_because

"""The demo's change-stream sources: one Qlik Replicate, one DataWorks and one Datastream source.

Each has its emulated story (scaled by `--deltas`, with each format's quirks: duplicates, split
updates, heartbeats, out-of-order backfill, a rolled-back transaction, a DDL change), its topic,
and sealing limits small enough that the story makes several deltas. `compare` reads every
landed delta back from Kafka through the ledger and prints the lake's rows beside the story's
truth per delta and table (resources/emulator/stream_oracle.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.emulator.datastream import DATASTREAM, DatastreamConfig, build_datastream_story
from resources.emulator.dataworks import ROLE as DATAWORKS, DataWorksConfig, build_dataworks_story
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story


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
    qlik = build_qlik_story(QlikConfig(seed=seed, transactions=max(6, 3 * deltas),
                                       ddl_at_transaction=max(3, deltas), rollback_at_transaction=2))
    dataworks = build_dataworks_story(DataWorksConfig(seed=seed, transactions=max(8, 4 * deltas),
                                                      alter_at=max(4, 2 * deltas), failover_rate=0.2))
    datastream = build_datastream_story(DatastreamConfig(seed=seed, steps=max(40, 15 * deltas)))
    return [
        DemoStream("sales_qlik", QLIK, "qlik.sales", qlik, {"max_rows": 12, "max_seconds": 3600}),
        DemoStream("shop_dataworks", DATAWORKS, "dataworks.shop", dataworks, {"max_rows": 15, "max_seconds": 120}),
        DemoStream("shop_datastream", DATASTREAM, "datastream.shop", datastream,
                   {"max_rows": 40, "max_seconds": 60, "lateness_seconds": datastream.max_lateness_us / 1e6}),
    ]


def compare(streams: list[DemoStream], spark, layout, bootstrap: str, ledger, landed: set[tuple[str, int]],
            echo=print) -> tuple[bool, int, int]:
    """Print per stream, landed delta and table the lake's rows beside the truth; returns (all
    equal, deltas compared, deltas landed). A delta whose truth is undefined (a Datastream delta
    before the backfill ended, a Qlik one inside the full load) is shown as such, not compared."""
    from resources.emulator.stream_oracle import same_rows, truth_after
    from resources.errors import DecodeError
    from resources.lake.cdc import cdc_recorded_deltas, cdc_rows_as_of
    from resources.changestream.sealing import read_delta
    from resources.spark.iceberg import table_exists

    all_equal, compared, total = True, 0, 0
    for s in streams:
        records: list = []
        deltas = [d for d in ledger.sealed_deltas(s.name) if (s.name, d.delta_num) in landed]
        if not deltas:
            echo(f"{s.name:16} no delta landed")
            all_equal = False
        for d in deltas:
            total += 1
            records += [r for _, rs in read_delta(bootstrap, ledger, s.name, d.delta_num, s.format)
                        if not isinstance(rs, DecodeError) for r in rs]
            truth = truth_after(s.format, s.story, records, d.watermark_us)
            if truth is None:
                echo(f"{s.name:16} {d.delta_num:>5} {'(truth undefined here: ' + _why(s.format) + ')'}")
                continue
            compared += 1
            for table, rows in sorted(truth.items()):
                ident = layout.snapshot(s.name, table)  # none of its changes landed by d: no table or record
                recorded = table_exists(spark, ident) and d.delta_num in cdc_recorded_deltas(spark, ident)
                got = cdc_rows_as_of(spark, layout, s.name, table, d.delta_num) if recorded else []
                equal = same_rows(got, rows)
                all_equal &= equal
                echo(f"{s.name:16} {d.delta_num:>5} {table:18} {len(got):>9} {len(rows):>10}  "
                     f"{'yes' if equal else 'NO'}")
    return all_equal, compared, total


def _why(fmt: str) -> str:
    return "the backfill is still arriving" if fmt == DATASTREAM else "the full load is still arriving"

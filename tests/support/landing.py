"""Landing an emulated Prostore datamart's delta from Kafka with the lake layer alone (no Dagster):
the path the delta step takes (changelog, increment tables from the Spark Kafka reader), for tests
that check what the lake holds after each delta."""

from __future__ import annotations

import uuid
from pathlib import Path

from resources.codecs.backup import iter_changelog
from resources.emulator.outgoing import BACKUP
from resources.kafka.admin import create_topic
from resources.kafka.fetch import fetch_values
from resources.kafka.publish import publish
from resources.prostore.delta_index import DeltaIndex
from resources.prostore.ingest import ingest_topic
from resources.lake.prostore import data_tables, land_changelog, land_increment
from resources.lake.prostore_snapshot import apply_snapshots
from resources.spark.kafka_reader import table_changes


def land_delta(spark, layout, bootstrap: str, topic: str, index, datamart: str, n: int, *, apply: bool = True) -> None:
    """Land delta `n` of `datamart` from the backup `topic` (indexed in `index`): its changelog and
    increment tables, then (with `apply`) the snapshots up to it."""
    report, refs = index.chosen_messages(topic, datamart, n)
    assert report is not None and report.complete, f"delta {n} is not complete in the topic"
    changelog = [r for r in refs if r.table_name is None]
    values = fetch_values(bootstrap, topic, [(r.partition, r.offset) for r in changelog])
    records = [rec for r in changelog for rec in iter_changelog(values[(r.partition, r.offset)])]
    entities = land_changelog(spark, layout, datamart, n, report.chosen, records)
    frames = {}
    for name, entity in data_tables(entities).items():
        mine = [r for r in refs if r.table_name == name]
        if mine:
            frames[name] = table_changes(spark, bootstrap, topic, mine, entity.columns,
                                         value_bytes=sum(r.value_bytes for r in mine))
    land_increment(spark, layout, datamart, n, report.delta_date, report.chosen, entities, frames)
    if apply:
        apply_snapshots(spark, layout, datamart, n)


def published_backup(sc, bootstrap: str, folder: Path, name: str) -> tuple[str, DeltaIndex]:
    """The scenario's backup messages in a new topic, indexed: (topic, index)."""
    topic = f"it.{name}.backup.{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=sc.config.backup_partitions)
    publish([m for m in sc.messages if m.role == BACKUP], bootstrap, {BACKUP: topic})
    index = DeltaIndex(folder / "index.sqlite")
    while ingest_topic(bootstrap, topic, index, BACKUP).remaining:
        pass
    return topic, index

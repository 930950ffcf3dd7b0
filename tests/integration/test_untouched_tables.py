"""A delta commits only to the tables it changes (issue 57, item 1): a table it leaves alone gets
no commit and no tag, the lake's own mark (`deltaport.landed-through` on the source's manifest)
says how far the source has landed, and a run killed after its snapshot commits but before that
mark moves is re-run with nothing lost or doubled.

Real broker, Spark and Iceberg, through `sync` (the sensor's code, then the delta's run, in
process). A Prostore datamart of 8 tables (bench/width_bench.py's `Datamart`): delta 0 loads
every table, each later delta changes two of them, a different pair each time. The same for a
Qlik change stream of 8 tables (bench/width_qlik.py), each later delta changing one or two.
Checked after every steady delta: the untouched tables' `snapshots` and `refs` metadata tables
hold the same rows as before it (no commit, no tag), their last recorded delta did not move, the
manifest carries the mark at the delta, and the changed tables as they are now (`spark.table`:
no as-of resolution needed) equal the generator's truth. Reading an untouched table as of a
delta is the readers' part (resources/lake/as_of.py), tested with them.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from bench.width_bench import Datamart
from bench.width_qlik import QlikStream
from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.qlik import QLIK
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake import landed_mark
from resources.lake.landed_mark import lake_landed_through
from resources.lake.layout import LakeLayout
from resources.spark.iceberg import DELTA_PROPERTY, _quote
from resources.spark.iceberg_reads import last_applied_deltas
from tests.support.killed_between import dies_once_at

pytestmark = pytest.mark.integration

WIDTH = 8
INITIAL, ROWS = 20, 8


def metadata_rows(spark, ident: str) -> tuple[int, int]:
    """(rows of the table's `snapshots`, rows of its `refs`), as committed now."""
    spark.catalog.refreshTable(ident)
    quoted = _quote(ident)
    return tuple(spark.sql(f"SELECT count(*) FROM {quoted}.`{m}`").collect()[0][0] for m in ("snapshots", "refs"))


def commits_of(spark, ident: str, n: int) -> int:
    return spark.sql(f"SELECT count(*) FROM {_quote(ident)}.`snapshots` "
                     f"WHERE summary['{DELTA_PROPERTY}'] = '{n}'").collect()[0][0]


def tags_of(spark, ident: str) -> set[str]:
    return {r[0] for r in spark.sql(f"SELECT name FROM {_quote(ident)}.`refs` WHERE type = 'TAG'").collect()}


class _Story:
    """One source's story and how a delta of it is landed and judged."""

    def __init__(self, cfg, topics, source, idents, changed_at, publish_delta, current, expected):
        self.cfg, self.topics, self.source, self.idents = cfg, topics, source, idents
        self.changed_at, self.publish_delta, self.current, self.expected = changed_at, publish_delta, current, expected


def prostore_story(kafka_bootstrap, tmp_path) -> _Story:
    dm = Datamart("wide8", WIDTH)
    topics = {SIGNAL: f"untouched.signal.{os.getpid()}", BACKUP: f"untouched.backup.{os.getpid()}"}
    for t in topics.values():
        create_topic(kafka_bootstrap, t)
    cfg = parse_config({
        "datamarts": [{"name": dm.name, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
        "sensor": {"max_messages_per_tick": 10**6},  # a delta per sync
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "untouched", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
    }, str(tmp_path / "deltaport.yaml"))
    layout = LakeLayout("untouched")
    names = list(dm.tables)

    def changed_at(n: int) -> list[str]:  # a different pair every delta (the Datamart changes its first two)
        return names if n == 0 else [names[(2 * n - 2) % WIDTH], names[(2 * n - 1) % WIDTH]]

    def publish_delta(n: int) -> None:
        first = changed_at(n)
        dm.tables = first + [t for t in names if t not in first]
        publish(dm.delta(n, initial=INITIAL, rows=ROWS), kafka_bootstrap, topics)

    def current(spark, table: str):
        return sorted((r["id"], r["name"], r["amount"]) for r in
                      spark.table(layout.snapshot(dm.name, table)).select("id", "name", "amount").collect())

    def expected(table: str):
        return sorted((r["id"], r["name"], r["amount"]) for r in dm.expected(table))

    return _Story(cfg, topics, dm.name, {t: layout.snapshot(dm.name, t) for t in names}, changed_at, publish_delta,
                  current, expected)


def qlik_story(kafka_bootstrap, tmp_path) -> _Story:
    stream = QlikStream("wideq8", WIDTH, changed=2)
    topic = f"untouched.qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    cfg = parse_config({
        "sources": [{"name": stream.name, "format": QLIK, "topic": topic, "idle_seconds": 0,
                     "max_rows": 10**9, "max_seconds": 10**6}],
        "sensor": {"max_messages_per_tick": 10**6},
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "untouchedq", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
    }, str(tmp_path / "deltaport.yaml"))
    layout = LakeLayout("untouchedq")
    names = list(stream.names)
    lake = dict(zip(names, stream.tables))

    def changed_at(n: int) -> list[str]:  # one table on odd deltas, two on even ones, moving on
        if n == 0:
            return list(stream.tables)
        return [lake[names[(n + i) % WIDTH]] for i in range(1 if n % 2 else 2)]

    def publish_delta(n: int) -> None:
        want = changed_at(n)
        stream.changed = len(want) if n else WIDTH
        first = [k for k in names if lake[k] in want]
        stream.names = first + [k for k in names if k not in first]
        publish(stream.delta(n, initial=INITIAL, rows=ROWS), kafka_bootstrap, {QLIK: topic})

    def current(spark, table: str):
        return sorted(r[0] for r in spark.table(layout.snapshot(stream.name, table))
                      .where("NOT _tombstone").select("ID").collect())

    qlik_name = {t: k for k, t in lake.items()}

    def expected(table: str):  # the ids of the source table's rows now (as QlikStream.expected)
        return sorted(k[0] for k in stream.task.tables[qlik_name[table]].rows)

    return _Story(cfg, {QLIK: topic}, stream.name, {t: layout.snapshot(stream.name, t) for t in stream.tables},
                  changed_at, publish_delta, current, expected)


@pytest.mark.parametrize("kind", ["prostore", "qlik"])
def test_a_delta_commits_only_to_the_tables_it_changes(spark_remote, kafka_bootstrap, tmp_path, monkeypatch, kind):
    story = (prostore_story if kind == "prostore" else qlik_story)(kafka_bootstrap, tmp_path)
    spark = build_definitions(story.cfg).resources["spark"].get_session()
    layout = LakeLayout(story.cfg.lake.catalog)
    deltas = 5
    with dg.instance_for_test() as instance:
        for n in range(deltas):
            before = {t: metadata_rows(spark, i) for t, i in story.idents.items()} if n else {}
            recorded = last_applied_deltas(spark, list(story.idents.values())) if n else {}
            story.publish_delta(n)
            kill = n == 3  # once, after every snapshot commit of the run, before the lake's mark
            if kill:
                real = dies_once_at(monkeypatch, landed_mark, "lake.landed_mark")
                died = sync(story.cfg, instance, echo=lambda line: None)
                assert not died.ok, n
                assert lake_landed_through(spark, layout, story.source) == n - 1
                monkeypatch.setattr(landed_mark, "failpoint", real)
            result = sync(story.cfg, instance, echo=lambda line: None)
            assert result.ok and (story.source, n) in result.landed(), (n, result)
            assert lake_landed_through(spark, layout, story.source) == n, n
            changed = set(story.changed_at(n))
            for table, ident in story.idents.items():
                if n and table not in changed:  # no commit, no tag: its metadata did not change
                    assert metadata_rows(spark, ident) == before[table], (n, table)
                    assert last_applied_deltas(spark, [ident])[ident] == recorded[ident], (n, table)
                    assert f"delta_{n}" not in tags_of(spark, ident), (n, table)
                else:
                    assert story.current(spark, table) == story.expected(table), (n, table)
                    assert commits_of(spark, ident, n) == 1, (n, table)  # the kill's re-run did not commit again
                    assert f"delta_{n}" in tags_of(spark, ident), (n, table)
    # Every table has its own story: changed by some deltas only, equal to the truth as it is now.
    for table, ident in story.idents.items():
        assert story.current(spark, table) == story.expected(table), table
        assert tags_of(spark, ident) == {f"delta_{n}" for n in range(deltas) if table in story.changed_at(n)}, table

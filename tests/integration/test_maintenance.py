"""Table maintenance between deltas (resources/lake/maintenance.py, inside the delta runs) keeps
every as-of read exact, and it does what it says. With it due after every run, eager to compact
and expiring anything older than now:
- every table as of every delta equals the emulator's truth;
- the snapshot tables end with no delete file, and of the tags their history answers, with
  those from the newest tag at or below the source's landed delta - `keep_tags` on only (a delta
  tags only the tables it changes: resources/lake/as_of.py, `tags_to_expire`), so with few
  snapshots;
- the increment and history tables keep one snapshot;
- each maintenance is an observation on the snapshot asset.

And a pass asks each table only for what is due (resources/lake/maintenance_states.py): it reads
every table's files, tags and old snapshots in one query, with the `files` table's figures, and
calls `expire_snapshots` only on a table that holds an old snapshot no ref names.

Real broker, real Spark, real Iceberg, through `sync`.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.maintenance import file_stats, maintain_source
from resources.lake.maintenance_settings import MaintenanceSettings
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident
from resources.lake.read import rows_as_of
from resources.lake.prostore_history import history_start
from resources.spark.iceberg_reads import delta_tags, last_applied_deltas

pytestmark = pytest.mark.integration

DM = "marketing"
DELTAS = 4


def test_maintenance_between_deltas_keeps_every_as_of_read_exact(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=17, deltas=DELTAS, datamarts=(DM,), streams=1, chunk_size=20,
                                       backup_partitions=1, ddl_at_delta=2, faults=Faults(duplicate_rate=0.0)))
    topic = f"maintenance.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "maint", "warehouse": str(tmp_path / "lake"),
                 "maintenance": {"every_deltas": 1, "delete_files_threshold": 1, "expire_after_seconds": 0,
                                 "keep_tags": 2}},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_deltas_per_run": 1},  # a run, and so a maintenance, per delta
    }, str(tmp_path / "deltaport.yaml"))
    spark = build_definitions(cfg).resources["spark"].get_session()
    layout = LakeLayout("maint")

    with dg.instance_for_test() as instance:
        result = sync(cfg, instance, echo=lambda line: None)
        assert result.ok and result.landed() == [(DM, n) for n in range(DELTAS)]
        observed = [r.asset_observation.metadata for r in instance.fetch_observations(
            dg.AssetKey([DM, "snapshot"]), limit=100).records
            if "maintenance/tables" in r.asset_observation.metadata]
    assert len(observed) == DELTAS - 1  # delta 0 is no multiple of anything
    assert sum(m["maintenance/compacted"].value for m in observed) > 0
    assert all(m["maintenance/delete_files_after"].value == 0 for m in observed)

    for n in range(DELTAS):
        for table, state in sc.truth[DM][n].items():
            key = sc.databases[DM].tables[table].primary_key
            truth = sorted(state.values(), key=lambda r: tuple(r[k] for k in key))
            assert rows_as_of(spark, layout, DM, table, n) == truth, f"{table} as of delta {n}"
    def snapshots(ident: str) -> int:
        return spark.sql(f"SELECT count(*) AS n FROM {ident}.snapshots").collect()[0]["n"]

    last = DELTAS - 1
    judged = 0
    for table in sc.truth[DM][last]:
        ident = layout.snapshot(DM, table)
        assert file_stats(spark, ident)[1] == 0, f"{table} kept delete files"
        for other in (layout.increment(DM, table), history_ident(layout, DM, table)):
            assert snapshots(other) == 1, f"{other} kept {snapshots(other)} snapshots"
        # The last run's maintenance (the lake's mark at `last`, keep_tags 2) kept, of the tags
        # its history answers, only those from m* on: the newest tag at or below last - 2. A
        # delta tags only the tables it changes, so m* is that table's own (as_of.tags_to_expire).
        tags = set(delta_tags(spark, ident))
        start = history_start(spark, ident)  # None: no history-from recorded, no tag dropped
        floor = max((m for m in tags if m <= last - 2), default=None)
        if start is not None and floor is not None:  # m* is never dropped
            assert all(m >= floor or m < start - 1 for m in tags), (table, tags, start)
            judged += 1
        assert max(tags) == last_applied_deltas(spark, [ident])[ident], (table, tags)  # the newest stays
        assert snapshots(ident) <= 4, f"{ident} kept {snapshots(ident)} snapshots"
        newest = max(m for m in tags if m <= last)  # its state as of `last`: the table did not change since
        assert spark.sql(f"SELECT count(*) AS n FROM {ident} VERSION AS OF 'delta_{newest}'").collect()[0]["n"] == \
            len(sc.truth[DM][last][table])
    assert judged, "the story this test relies on: tables whose history answers tags maintenance may drop"


class _Recording:
    """The test's Spark session, keeping the SQL it is sent (to see which calls a pass made)."""

    def __init__(self, spark):
        self._spark, self.sent = spark, []

    def sql(self, text, *args, **kwargs):
        self.sent.append(text)
        return self._spark.sql(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._spark, name)


def test_a_pass_reads_every_table_at_once_and_expires_only_where_something_can_go(spark, lake_ns):
    source = lake_ns.split(".", 1)[1]
    snap, meta, empty = f"lake.{source}.a", f"lake.{source}_meta.m", f"lake.{source}_meta.empty"
    for ident in (snap, meta, empty):
        spark.sql(f"CREATE TABLE {ident} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"ALTER TABLE {snap} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    for n in range(2):
        spark.sql(f"INSERT INTO {snap} SELECT /*+ REPARTITION(1) */ * FROM VALUES ({n}, 'x'), ({n + 10}, 'z') AS v(id, v)")
        spark.sql(f"ALTER TABLE {snap} CREATE TAG `delta_{n}`")
    for n in range(3):
        spark.sql(f"INSERT INTO {meta} VALUES ({n}, 'y')")
    spark.sql(f"DELETE FROM {snap} WHERE id = 0")  # a delete file

    def snapshots(ident):
        return spark.sql(f"SELECT count(*) AS n FROM {ident}.snapshots").collect()[0]["n"]

    rec = _Recording(spark)
    done = {t.ident: t for t in maintain_source(rec, "lake", source, MaintenanceSettings())}
    assert set(done) == {snap, meta, empty}
    for ident, t in done.items():
        assert (t.data_files[0], t.delete_files[0], t.bytes[0]) == file_stats(spark, ident), ident
    assert done[snap].delete_files == (1, 1) and done[snap].tags == (2, 2) and done[empty].data_files == (0, 0)
    assert not [q for q in rec.sent if "expire_snapshots" in q]  # nothing an hour old
    assert len([q for q in rec.sent if ".`files`" in q]) == 0  # the figures came from the one query

    rec = _Recording(spark)
    done = {t.ident: t for t in maintain_source(rec, "lake", source, MaintenanceSettings(expire_after_seconds=0))}
    expired = [q for q in rec.sent if "expire_snapshots" in q]
    # one call, the meta table's (its two older snapshots can go); `a`'s old ones are its tags' and
    # the DELETE its head; the empty table has none
    assert len(expired) == 1 and f"'{meta.split('.', 1)[1]}'" in expired[0], expired
    assert snapshots(meta) == 1 and snapshots(snap) == 3
    assert "expired" in " ".join(done[meta].done) and not done[snap].done

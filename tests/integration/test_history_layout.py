"""The history table's layout (resources/lake/history_layout.py): spans of deltas per partition,
compacted, migrated from a partition per delta, with every as-of read exact.

One synthetic table of four keys, updated, deleted and re-inserted over 12 deltas, landed with the
lake layer (changelog, increments, snapshots; no Dagster):
- deltas 0-3 land with the layout from before (a partition per delta, `history_span=0`);
- from delta 4 the writer has spans of 4 deltas: it evolves the table's spec to truncate(4, delta_num);
- maintenance compacts the history (old files and new) into one file per span of applied deltas;
- delta 6 goes into a span holding compacted deltas 4-5: its run dies between the history commit
  and the MERGE, and its re-run writes the same rows again beside the compacted file;
- a range run of 7-10 dies the same way, leaving files that mix deltas 7-10; its re-run lands only
  7-8 (a smaller range), then 9-10: the overwrite must drop the dead run's files whole
  (`delta_num IN (7, 8)` cannot: Iceberg "Cannot delete file where some, but not all, rows match");
- 11 lands, maintenance compacts again.
Then every form at every delta equals the oracle (test_history_forms.check_every_form: the
library, the docs' SQL, PyIceberg), no version is there twice, and the history holds one file per
span.
"""

from __future__ import annotations

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.lake import prostore_snapshot
from resources.lake.history_layout import partition_fields
from resources.lake.maintenance import MaintenanceSettings, file_stats, maintain_table
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident
from resources.lake.prostore_snapshot import apply_snapshots
from resources.spark.session import CatalogConfig, connect
from tests.integration.test_history_forms import _crash, check_every_form, close_at, land_story_delta, oracle_versions

pytestmark = pytest.mark.integration

DM = "spans"
STORY = [  # each delta's changes: (id, v, sys_op)
    [(1, "a", 0), (2, "b", 0), (3, "c", 0), (4, "d", 0)],
    [(1, "a1", 0), (2, "b", 1)],
    [(2, "b2", 0), (3, "c2", 0)],
    [(4, "d", 1)],
    [(1, "a4", 0), (4, "d4", 0)],
    [(3, "c5", 0)],
    [(1, "a6", 0), (2, "b2", 1)],
    [(2, "b7", 0), (4, "d7", 0)],
    [(1, "a8", 0), (3, "c8", 1)],
    [(3, "c9", 0), (4, "d9", 0)],
    [(1, "a10", 1), (2, "b10", 0)],
    [(1, "a11", 0), (3, "c11", 0)],
]


def test_spans_migration_compaction_and_reruns_keep_every_read_exact(spark_remote, tmp_path, monkeypatch):
    warehouse = tmp_path / "lake"
    session = connect(spark_remote, CatalogConfig(name="spans", warehouse=str(warehouse)))
    before, layout = LakeLayout("spans", history_span=0), LakeLayout("spans", history_span=4)
    closed = history_ident(layout, DM, "t")
    ddl = [ChangelogRecord(0, "t", "CREATE TABLE spans.t (id BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (id)) "
                                   "DISTRIBUTED BY (id)")]
    states = []
    for n, changes in enumerate(STORY):
        states.append(land_story_delta(session, layout, DM, ddl, n, changes, states[-1] if states else {}))

    def maintain():
        done = maintain_table(session, closed, "history", MaintenanceSettings(data_files_threshold=1))
        assert done is not None and "compacted" in done.done, done
        return done

    for n in range(4):
        apply_snapshots(session, before, DM, n)
    assert partition_fields(session, closed) == ["delta_num"]
    for n in (4, 5):
        apply_snapshots(session, layout, DM, n)
    assert partition_fields(session, closed) == ["truncate(4, delta_num)"]
    files = maintain().data_files  # deltas 1-5's (0 closes nothing) -> one per span: 0-3, 4-7
    assert files[0] >= 5 and files[1] == 2, files

    def dies_before_merge(target: int):
        with monkeypatch.context() as m:
            m.setattr(prostore_snapshot, "merge_upserts", _crash)
            with pytest.raises(RuntimeError, match="killed"):
                apply_snapshots(session, layout, DM, target)

    dies_before_merge(6)  # into span 4-7, beside the compacted file of 4-5
    apply_snapshots(session, layout, DM, 6)
    dies_before_merge(10)  # one range: its files hold deltas 7 and 8-10
    assert session.table(closed).where("delta_num >= 7").count() > 0
    apply_snapshots(session, layout, DM, 8)
    apply_snapshots(session, layout, DM, 10)
    apply_snapshots(session, layout, DM, 11)
    maintain()

    deltas = list(range(len(STORY)))
    versions = oracle_versions(deltas, lambda d: [({"id": i, "v": v}, op) for i, v, op in STORY[d]],
                               lambda row: (row["id"],))
    check_every_form(session, layout, warehouse, DM, "t", deltas, versions, lambda n: states[n], close_at)
    assert session.table(closed).count() == sum(v["sys_to"] is not None for v in versions)  # none twice
    session.catalog.refreshTable(closed)
    assert file_stats(session, closed)[0] == 3  # spans 0-3, 4-7, 8-11

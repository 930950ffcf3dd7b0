"""The snapshot's primary-key check and row counts at O(delta) (issue 30, item 3).

A datamart table of 3,000 rows, then a delta of 60 changes (30 updates, 10 deletes, 20 inserts)
through `apply_snapshots`: the check counts the table's rows exactly (deletes applied), checks
the keys of the deltas the commit applied (and says which), finds a key held twice among them,
and shuffles O(delta) rows, not a row per key of the table.

Synthetic Arrow-free DataFrames (no Kafka), real Spark Connect and real Iceberg tables.
"""

from __future__ import annotations

import random

import pytest

from platform_assets.prostore.checks import snapshot_checks
from resources.codecs.backup import ChangelogRecord
from resources.lake.key_check import KeyCheckInput, key_check_frame
from resources.lake.layout import LakeLayout
from resources.lake.prostore import IncrementDelta, land_changelogs, land_increments
from resources.lake.prostore_snapshot import apply_snapshots
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect

pytestmark = pytest.mark.integration

CREATE = "CREATE TABLE dm.t (id BIGINT NOT NULL, a VARCHAR, PRIMARY KEY (id)) DISTRIBUTED BY (id)"
ROWS = 3000


@pytest.fixture()
def lake(spark_remote, tmp_path):
    return connect(spark_remote, CatalogConfig(name="keys", warehouse=str(tmp_path / "lake"))), LakeLayout("keys")


def land(session, layout, deltas: dict[int, list[tuple[int, str | None, int]]]) -> None:
    log = [ChangelogRecord(0, "t", CREATE)]
    entities = land_changelogs(session, layout, "dm", [(n, f"inc-{n}", log) for n in deltas])
    out = []
    for n, changes in deltas.items():
        rows = [(i, a, op, 0, k) for k, (i, a, op) in enumerate(changes)]
        frame = session.createDataFrame(rows, output_spark_schema(entities[n]["t"].columns))
        out.append(IncrementDelta(n, 1_700_000_000_000_000 + n, f"inc-{n}", entities[n], {"t": frame}))
    land_increments(session, layout, "dm", out)


def test_the_key_check_counts_exactly_and_checks_the_keys_of_the_delta(lake):
    session, layout = lake
    rng = random.Random(30)
    picked = rng.sample(range(1, ROWS + 1), 40)
    delta1 = ([(k, "u", 0) for k in picked[:30]] + [(k, None, 1) for k in picked[30:]]
              + [(ROWS + i, "new", 0) for i in range(1, 21)])
    land(session, layout, {0: [(k, "v", 0) for k in range(1, ROWS + 1)], 1: delta1})
    apply_snapshots(session, layout, "dm", 0)
    apply_snapshots(session, layout, "dm", 1)

    counts, (result,) = snapshot_checks(session, layout, "dm", 1)
    assert counts == {"t": ROWS - 10 + 20}
    assert result.passed
    assert result.metadata["keys_of_deltas"].value == {"t": "1"}

    # A second row of a key the delta wrote (a broken writer): found.
    ident = layout.snapshot("dm", "t")
    session.sql(f"INSERT INTO {ident} SELECT * FROM {ident} WHERE id = {picked[0]}")
    counts, (result,) = snapshot_checks(session, layout, "dm", 1)
    assert counts == {"t": ROWS - 10 + 20 + 1}
    assert not result.passed and result.metadata["duplicated_keys"].value == {"t": 1}


def test_the_key_check_shuffles_rows_of_the_touched_keys_not_of_the_table(lake):
    """The aggregation's shuffle carries one row per touched key and one per task for all the
    rest (a group-by of every key of the table shuffled a row per key: 3,000 here)."""
    session, layout = lake
    land(session, layout, {0: [(k, "v", 0) for k in range(1, ROWS + 1)], 1: [(k, "u", 0) for k in range(1, 51)]})
    apply_snapshots(session, layout, "dm", 1)
    table = session.table(layout.snapshot("dm", "t"))
    touched = session.table(layout.increment("dm", "t")).where("delta_num = 1")
    frame = key_check_frame([KeyCheckInput("t", table, touched, ["id"])])
    assert {r["t"]: r["rows"] for r in frame.collect()} == {"t": ROWS}
    shuffled = _shuffled(frame)
    assert 0 < shuffled <= 2 * (50 + 16), shuffled


def _shuffled(frame) -> int:
    """Rows the executed `frame`'s shuffles wrote (its plan's metrics, as Spark Connect returns them)."""
    _, nodes = frame.executionInfo.metrics.extract_graph()
    return sum(int(m.value) for node in nodes.values() for m in node.metrics or []
               if m.name == "shuffleRecordsWritten")

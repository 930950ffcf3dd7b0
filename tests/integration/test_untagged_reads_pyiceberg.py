"""A lake where a delta commits only to the tables it changes (issue 57), read without a JVM:
`deltaport read --engine pyiceberg` and `deltaport sql` (DuckDB over PyIceberg; and Spark, on the
deltas a table has no tag of) answer every table as of every delta exactly, from the source's
landed mark (L) and each table's own newest delta (R), by the rules of resources/lake/as_of.py.

ONE lake (catalog `untag`), built once with the lake layer (no Dagster) from the Prostore
emulator (seed 4: most tables left alone by several deltas, `returns` and `table2_adqm` created
by DDL at delta 3, some tables without rows for their first deltas):
- `marketing` with history, snapshots applied as range runs (folds of two deltas);
- `sourcedb` without history, one run per delta (so only tags answer the past).
The writers land it in the NEW shape (checked against the emulator's increments: a delta that
left a table alone has no tag of it and no change of it, a tag records a change, and the
manifest's `deltaport.landed-through` is the last delta). The old shape (every table tagged every
delta it existed in, but inside its folds, no mark: what deltaport wrote before) is made by hand
with Spark, every table as of every delta is read with `read --engine pyiceberg` (the answers
before issue 57), and the lake is turned back into the new shape (the added tags dropped, the
mark set again with `landed_mark.mark_landed`). The oracle: the emulator's truth (PyIceberg's
rows compared value for value) and, for the printed text, what `read` printed on the old shape.
A delta above L is "not landed", one line, on both commands; with the mark below a table's newest
delta (a run in flight) every delta up to the mark still reads exactly.

Real broker (the backup topic), real Spark, real Iceberg.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import load_config
from platform_assets.engine import pyiceberg_tables
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.lake.as_of import LANDED_PROPERTY
from resources.lake.landed_mark import lake_landed_through, mark_landed
from resources.lake.layout import LakeLayout
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.pyiceberg_read import delta_tags as pyiceberg_tags
from resources.lake.pyiceberg_read import last_delta
from resources.lake.pyiceberg_rows import datamart_rows
from resources.spark.iceberg import _quote
from resources.spark.session import CatalogConfig, connect
from tests.integration.test_untagged_reads import assert_new_shape, back_to_new_shape, to_old_shape
from tests.support.landing import land_delta, published_backup

pytestmark = pytest.mark.integration

CATALOG = "untag"
LAYOUT = LakeLayout(CATALOG)
HISTORY, FLAT = "marketing", "sourcedb"
CONFIG = EmulatorConfig(seed=4, deltas=8, datamarts=(HISTORY, FLAT), ddl_at_delta=3,
                        faults=Faults(duplicate_rate=0.0))


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(text: str) -> list[str]:
    """jsonl rows, sorted, as canonical text (the order is the query's, not read's)."""
    return sorted(json.dumps(json.loads(line, parse_float=Decimal), sort_keys=True, default=str)
                  for line in text.splitlines())


def _csv_records(text: str) -> tuple[list, list]:
    records = list(csv.reader(io.StringIO(text, newline="")))
    return records[0], sorted(records[1:])


def _shape(sc, dm) -> tuple[list[str], object, object]:
    """(tables, exists, changed) of `dm` for `tests/integration/test_untagged_reads.py`'s shape
    helpers: the tables of its last delta, whether one exists as of a delta, whether the
    emulator's increments change it in deltas a..b."""
    def exists(table, n):
        return table in sc.truth[dm].get(n, {})

    def changed(table, a, b):
        return any(c.table == table for n in range(a, b + 1) for c in sc.increments[dm].get(n, ()))

    return sorted(sc.truth[dm][max(sc.truth[dm])]), exists, changed


@pytest.fixture(scope="module")
def lake(spark_remote, kafka_bootstrap, tmp_path_factory):
    folder = tmp_path_factory.mktemp("untagged")
    warehouse = folder / "lake"
    spark = connect(spark_remote, CatalogConfig(name=CATALOG, warehouse=str(warehouse)))
    sc = build_scenario(CONFIG)
    topic, index = published_backup(sc, kafka_bootstrap, folder, "untagged")
    for dm in (HISTORY, FLAT):
        deltas = sorted(sc.truth[dm])
        for i, n in enumerate(deltas):
            if dm == HISTORY:  # folds of two deltas: 0, 1-2, 3-4, 5-6, 7
                land_delta(spark, LAYOUT, kafka_bootstrap, topic, index, dm, n, apply=i % 2 == 0 or n == deltas[-1])
            else:
                land_delta(spark, LAYOUT, kafka_bootstrap, topic, index, dm, n, apply=False)
                apply_snapshots(spark, LAYOUT, dm, n, keep_history=False)
    config = folder / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": dm, "format": "prostore", "signal_topic": f"s-{dm}", "backup_topic": f"b-{dm}"}
                    for dm in (HISTORY, FLAT)],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `read` and `sql` read the lake only
        "lake": {"catalog": CATALOG, "type": "hadoop", "warehouse": str(warehouse)},
        "state_dir": str(folder / "state")}))
    return sc, spark, config


def _pairs(sc, dm):
    """(delta, table) of every table that exists as of every delta of `dm`."""
    return [(n, t) for n, tables in sorted(sc.truth[dm].items()) for t in sorted(tables)]


def _truth(sc, dm, table, n) -> list[dict]:
    key = sc.databases[dm].tables[table].primary_key
    return sorted(sc.truth[dm][n][table].values(), key=lambda r: tuple(r[k] for k in key))


def test_every_table_as_of_every_delta_reads_exactly_once_untouched_tables_lose_their_tags(lake, capsys):
    sc, spark, config = lake
    cfg = load_config(str(config))
    # As the writers land it: the NEW shape.
    untouched = {}
    for dm in (HISTORY, FLAT):
        tables, exists, changed = _shape(sc, dm)
        untouched[dm] = assert_new_shape(spark, LAYOUT, dm, tables, max(sc.truth[dm]), exists, changed)
        assert untouched[dm], f"{dm}: no delta left a table alone"
    dropped = {dm: {t: {n for n, _ in ns} for t, ns in untouched[dm].items()} for dm in (HISTORY, FLAT)}
    # The old shape (every delta tags every table, no mark): what `read` printed before.
    before = {}
    try:
        for dm in (HISTORY, FLAT):
            to_old_shape(spark, LAYOUT, dm, untouched[dm])
        for dm in (HISTORY, FLAT):
            for n, table in _pairs(sc, dm):
                code, out, err = _cli(capsys, "read", f"{dm}.{table}", "--engine", "pyiceberg", "--format", "jsonl",
                                      "--config", str(config), "--as-of-delta", str(n))
                assert code == 0, err
                before[dm, table, n] = out
    finally:  # back to the NEW shape: the added tags dropped, the mark moved forward from none
        moved = {}
        for dm in (HISTORY, FLAT):
            back_to_new_shape(spark, LAYOUT, dm, untouched[dm], None)
            moved[dm] = (lake_landed_through(spark, LAYOUT, dm), mark_landed(spark, LAYOUT, dm, max(sc.truth[dm])))
    for dm in (HISTORY, FLAT):
        last = max(sc.truth[dm])
        assert moved[dm] == (None, True) and lake_landed_through(spark, LAYOUT, dm) == last, moved
        assert not mark_landed(spark, LAYOUT, dm, last - 1)  # forward only
    open_table = pyiceberg_tables(cfg)
    # What the new shape asks of the readers: deltas with no tag of their own, some after the
    # table's own newest delta (rule 3), and, without history, some before it (rule 7).
    untagged: set[tuple[str, str, int]] = set()
    after_newest = between = 0
    for dm in (HISTORY, FLAT):
        for n, table in _pairs(sc, dm):
            lake_table = open_table(f"{dm}.{table}")
            if n in pyiceberg_tags(lake_table):
                continue
            untagged.add((dm, table, n))
            if n > last_delta(lake_table):
                after_newest += 1
            elif dm == FLAT and n in dropped[dm].get(table, ()):
                between += 1
    assert len(untagged) >= 10 and after_newest >= 3 and between >= 2, (len(untagged), after_newest, between)

    for dm in (HISTORY, FLAT):
        for n, table in _pairs(sc, dm):
            what = f"{dm}.{table} as of delta {n}"
            assert datamart_rows(open_table, dm, table, n)[1] == _truth(sc, dm, table, n), what
            code, out, err = _cli(capsys, "read", f"{dm}.{table}", "--engine", "pyiceberg", "--format", "jsonl",
                                  "--config", str(config), "--as-of-delta", str(n))
            assert code == 0 and out == before[dm, table, n], (what, err)
            query = f"SELECT * FROM {dm}.{table} FOR SYSTEM_TIME AS OF DELTA_NUM {n}"
            # Spark's `sql` on the deltas with no tag of their own (the new rules; a tagged delta
            # reads its tag, as on a lake of the old shape: test_sql_corpus.py, test_read_cli.py).
            for engine in ("duckdb", "spark") if (dm, table, n) in untagged else ("duckdb",):
                code, got, err = _cli(capsys, "sql", query, "--engine", engine, "--format", "jsonl",
                                      "--config", str(config))
                assert code == 0 and _records(got) == _records(out), (what, engine, err)
        # No --as-of-delta: L, the source's landed delta, named on stderr, whichever table.
        last = max(sc.truth[dm])
        for table in sc.truth[dm][last]:
            code, out, err = _cli(capsys, "read", f"{dm}.{table}", "--engine", "pyiceberg", "--format", "csv",
                                  "--config", str(config))
            assert code == 0 and f"as of delta {last}, the last delta landed in it" in err, err
            code, sql_out, err = _cli(capsys, "sql", f"SELECT * FROM {dm}.{table}", "--engine", "duckdb",
                                      "--format", "csv", "--config", str(config))
            assert code == 0 and _csv_records(sql_out) == _csv_records(out), err


def test_a_delta_above_the_mark_is_not_landed_and_a_run_in_flight_reads_up_to_the_mark(lake, capsys):
    sc, spark, config = lake
    cfg = load_config(str(config))
    for dm in (HISTORY, FLAT):  # the NEW shape, as the writers land it (and the test above leaves it)
        tables, exists, changed = _shape(sc, dm)
        assert_new_shape(spark, LAYOUT, dm, tables, max(sc.truth[dm]), exists, changed)
    for dm in (HISTORY, FLAT):
        last = max(sc.truth[dm])
        table = sorted(sc.truth[dm][last])[0]
        for argv in (["read", f"{dm}.{table}", "--engine", "pyiceberg", "--as-of-delta", str(last + 1)],
                     ["sql", f"SELECT * FROM {dm}.{table} FOR SYSTEM_TIME AS OF DELTA_NUM {last + 1}",
                      "--engine", "duckdb"],
                     ["sql", f"SELECT * FROM {dm}.{table} FOR SYSTEM_TIME AS OF DELTA_NUM {last + 1}",
                      "--engine", "spark"]):
            code, out, err = _cli(capsys, *argv, "--config", str(config))
            lines = err.strip().splitlines()
            assert code == 2 and not out and len(lines) == 1, (argv, err)
            assert lines[0].startswith(f"deltaport {argv[0]}: error: ") and f"delta {last + 1} has not landed" in err
            assert f"last landed: {last}" in err, err
    # A run in flight: the mark still at the delta before the last, whose commits are in the lake
    # (R > L for the tables the last delta changed). Every delta up to the mark reads exactly; the
    # last is not landed, even for a table it changed.
    open_table = pyiceberg_tables(cfg)
    for dm in (HISTORY, FLAT):
        last = max(sc.truth[dm])
        manifest = _quote(LAYOUT.meta(dm, "manifest"))
        spark.sql(f"ALTER TABLE {manifest} SET TBLPROPERTIES ('{LANDED_PROPERTY}'='{last - 1}')")
        try:
            for n, table in _pairs(sc, dm):
                if n == last:
                    code, _, err = _cli(capsys, "read", f"{dm}.{table}", "--engine", "pyiceberg", "--as-of-delta",
                                        str(n), "--config", str(config))
                    assert code == 2 and f"delta {last} has not landed (last landed: {last - 1})" in err, err
                    continue
                assert datamart_rows(open_table, dm, table, n)[1] == _truth(sc, dm, table, n), (dm, table, n)
                code, got, err = _cli(capsys, "sql", f"SELECT * FROM {dm}.{table} FOR SYSTEM_TIME AS OF DELTA_NUM {n}",
                                      "--engine", "duckdb", "--format", "jsonl", "--config", str(config))
                code2, want, err2 = _cli(capsys, "read", f"{dm}.{table}", "--engine", "pyiceberg", "--format",
                                         "jsonl", "--as-of-delta", str(n), "--config", str(config))
                assert code == code2 == 0 and _records(got) == _records(want), (dm, table, n, err, err2)
        finally:
            spark.sql(f"ALTER TABLE {manifest} SET TBLPROPERTIES ('{LANDED_PROPERTY}'='{last}')")

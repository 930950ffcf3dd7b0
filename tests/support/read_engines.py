"""Both read engines against each other and against the truth, for tests that compare them: what
the PyIceberg engine (no JVM) prints must be what the Spark engine prints, byte for byte, and so
must its comment lines; and every table of a datamart as of every delta, or of a change stream as
of every sealed delta, read by each engine, equals the emulator's truth."""

from __future__ import annotations

from platform_assets.cli import main
from platform_assets.definitions import ledger_resource
from platform_assets.engine import pyiceberg_tables
from resources.changestream.sealing import read_delta
from resources.emulator.stream_oracle import row_diff, truth_after
from resources.errors import DecodeError
from resources.lake.cdc_read import cdc_rows_as_of
from resources.lake.layout import LakeLayout
from resources.lake.pyiceberg_rows import datamart_rows, stream_table
from resources.lake.read import rows_as_of


def read_with_both_engines(config, table: str, flags, capsys) -> str:
    """The Spark engine's stdout of `deltaport read TABLE FLAGS`, once the PyIceberg engine has
    printed the same text and the same `# ` comment lines on stderr (both must succeed)."""
    capsys.readouterr()
    out = {}
    for engine in ("spark", "pyiceberg"):
        code = main(["read", table, "--config", str(config), "--engine", engine, *flags])
        out[engine] = capsys.readouterr()
        assert code == 0, f"--engine {engine} {' '.join(flags)}: {out[engine].err[-2000:]}"
    assert out["pyiceberg"].out == out["spark"].out, f"{table} {' '.join(flags)}: the engines differ"
    comments = {e: [line for line in o.err.splitlines() if line.startswith("# ")] for e, o in out.items()}
    assert comments["pyiceberg"] == comments["spark"], f"{table} {' '.join(flags)}: comment lines"
    return out["spark"].out


def every_delta_equals_the_truth(sc, cfg, spark, datamart: str) -> int:
    """Every table of `datamart` as of every delta of the scenario `sc`, read by Spark and by
    PyIceberg through `cfg`'s lake, equal to the truth; the rows compared."""
    layout, open_table = LakeLayout(cfg.lake.catalog), pyiceberg_tables(cfg)
    compared = 0
    for n, tables in sorted(sc.truth[datamart].items()):
        for table, state in tables.items():
            key = sc.databases[datamart].tables[table].primary_key
            truth = sorted(state.values(), key=lambda r: tuple(r[k] for k in key))
            assert rows_as_of(spark, layout, datamart, table, n) == truth, f"spark: {table} as of delta {n}"
            assert datamart_rows(open_table, datamart, table, n)[1] == truth, f"pyiceberg: {table} as of delta {n}"
            compared += len(truth)
    return compared


def every_sealed_delta_equals_the_truth(story, fmt: str, cfg, spark, source: str, bootstrap: str) -> tuple[int, int]:
    """Every table of the change stream `source` as of every delta its ledger sealed, read by Spark
    and by PyIceberg through `cfg`'s lake, equal to the story's truth after the records sealed so
    far (read back from Kafka, resources/emulator/stream_oracle.py); (deltas compared, rows
    compared). A delta whose truth is undefined (inside Qlik's full load, before Datastream's
    backfill ended) is skipped, as the stream tests skip it."""
    ledger, layout, open_table = ledger_resource(cfg).get(), LakeLayout(cfg.lake.catalog), pyiceberg_tables(cfg)
    records: list = []
    deltas = rows = 0
    for delta in ledger.sealed_deltas(source):
        n = delta.delta_num
        records += [r for _, rs in read_delta(bootstrap, ledger, source, n, fmt, timeout=20)
                    if not isinstance(rs, DecodeError) for r in rs]
        truth = truth_after(fmt, story, records, delta.watermark_us)
        if truth is None:
            continue
        for table, want in truth.items():
            if not want:  # no row of it landed yet: the lake may have no such table as of n
                continue
            spark_diff = row_diff(cdc_rows_as_of(spark, layout, source, table, n), want)
            assert not any(spark_diff.values()), f"spark: {table} as of delta {n}: {spark_diff}"
            pyiceberg_diff = row_diff(stream_table(open_table, source, table, n)[1].to_pylist(), want)
            assert not any(pyiceberg_diff.values()), f"pyiceberg: {table} as of delta {n}: {pyiceberg_diff}"
            rows += len(want)
        deltas += 1
    return deltas, rows

"""Both read engines against each other and against the truth, for tests that compare them: what
the PyIceberg engine (no JVM) prints must be what the Spark engine prints, byte for byte, and so
must its comment lines; and every table of a datamart as of every delta, read by each engine,
equals the emulator's truth."""

from __future__ import annotations

from platform_assets.cli import main
from platform_assets.engine import pyiceberg_tables
from resources.lake.prostore import LakeLayout
from resources.lake.pyiceberg_rows import datamart_rows
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

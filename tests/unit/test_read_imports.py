"""`deltaport read` imports what a read uses and nothing else: a warm read of 100k rows is a second
or two, and the CLI process starts for every read (issue 30). Dagster, the Kafka client, polars and
the emulator (which the other commands bring) cost more than the read itself; `--engine pyiceberg`
imports no pyspark either. Checked in a fresh interpreter: the command's `main` (it fails on a
missing config file, after the command's own imports) and the modules each engine's read imports
when it runs."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEVER = ("dagster", "polars", "confluent_kafka", "resources.emulator", "resources.kafka", "resources.spark.kafka_reader")
ENGINE_MODULES = {
    "spark": ("platform_assets.engine", "resources.lake.arrow_read", "resources.lake.read", "resources.lake.cdc_read",
              "platform_assets.cli.arrow_format"),
    "pyiceberg": ("platform_assets.engine", "resources.lake.pyiceberg_rows", "resources.lake.pyiceberg_history",
                  "platform_assets.cli.arrow_format"),
}


def _imported_by_a_read(engine: str, tmp_path: Path) -> list[str]:
    script = textwrap.dedent(f"""
        import importlib, sys
        from platform_assets.cli import main
        assert main(["read", "dm.t", "--engine", {engine!r}, "--config", {str(tmp_path / "none.yaml")!r}]) == 2
        for name in {ENGINE_MODULES[engine]!r}:
            importlib.import_module(name)
        print(" ".join(sorted(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


@pytest.mark.parametrize("engine", ["spark", "pyiceberg"])
def test_a_read_imports_no_other_commands_libraries(engine, tmp_path):
    modules = _imported_by_a_read(engine, tmp_path)
    never = NEVER + (("pyspark",) if engine == "pyiceberg" else ())
    assert [m for m in modules if m.split(".")[0] in never or m in never or m.startswith(never)] == []


def test_each_command_module_registers_the_command_it_is_imported_for():
    from platform_assets import cli

    for name, module in zip(cli.COMMAND_MODULES, cli.COMMANDS):
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        assert list(sub.choices) == [name], module.__name__



@pytest.mark.parametrize("command", [["sql", "SELECT count(*) FROM dm.t", "--engine", "duckdb"],
                                     ["read", "dm.t", "--engine", "pyiceberg"]])
def test_a_jvm_free_read_imports_neither_pyspark_nor_pandas(command, tmp_path):
    """`deltaport sql --engine duckdb` (issue 41) and `read --engine pyiceberg`: the lake's tables
    through PyIceberg (whose pyarrow.dataset would import pandas, installed for pyspark), DuckDB for
    `sql`, and neither pyspark, pandas nor the other commands' libraries."""
    config = tmp_path / "deltaport.yaml"
    config.write_text("sources: [{name: dm, format: prostore, signal_topic: s, backup_topic: b}]\n"
                      f"lake: {{type: hadoop, warehouse: {tmp_path / 'lake'}}}\n")
    script = textwrap.dedent(f"""
        import sys
        from platform_assets.cli import main
        # no such table: it fails once the lake is opened with PyIceberg (pyarrow.dataset imported)
        assert main({[*command, "--config", str(config)]!r}) == 2
        assert "pyarrow.dataset" in sys.modules
        import resources.lake.sql_engines, duckdb
        print(" ".join(sorted(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    modules = done.stdout.split()
    assert "dm.t" in done.stderr and "pyiceberg.table" in modules
    never = NEVER + ("pyspark", "pandas")
    assert [m for m in modules if m.split(".")[0] in never or m in never or m.startswith(never)] == []
    # nor the Spark side of the lake (the config's maintenance settings once brought it: ~0.07 s),
    # nor the Spark engine's settings (server, session, jars: platform_assets.engine once did, 0.02 s)
    assert {"resources.lake.maintenance", "resources.lake.prostore", "resources.codecs.backup"} & set(modules) == set()
    assert [m for m in modules if m.startswith("resources.spark")] == []

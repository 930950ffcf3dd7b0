"""Prostore's SQL on a deployment's lake, from Python: what `deltaport sql` runs (no Dagster import).

    from platform_assets.config import load_config
    from platform_assets.sql_query import run_sql

    rows = run_sql("SELECT count(*) FROM marketing.sales FOR SYSTEM_TIME AS OF DELTA_NUM 3",
                   load_config("deltaport.yaml"), engine="duckdb")   # a pyarrow.Table

In: a Prostore SELECT (resources/lake/prostore_dialect.py), the config, an engine. Out: a
`SqlAnswer`: the SQL the engine runs (each lake table named as that engine names it), how each
AS OF a time was resolved, and the rows as a `pyarrow.Table`. The query is parsed and rewritten
once (resources/lake/prostore_sql.py) on the lake's metadata as PyIceberg reads it, whichever
engine then runs it, so both engines run the same SQL.

Engines: "duckdb" (no JVM, no pandas: PyIceberg scans to Arrow, DuckDB on top), "spark" (the
deployment's Spark Connect server, started if it is not running), "auto": Spark when a remote
engine is configured or the embedded server is already running, else DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from platform_assets.config import PlatformConfig
from resources.errors import DeltaportError
from resources.lake.prostore_sql import DATAMART, STREAM, Plan, rewrite_sql

if TYPE_CHECKING:
    import pyarrow as pa

ENGINES = ("auto", "duckdb", "spark")


@dataclass
class SqlAnswer:
    engine: str
    sql: str
    notes: list[str] = field(default_factory=list)
    rows: pa.Table | None = None


def plan_sql(query: str, cfg: PlatformConfig):
    """(the plan of `query`, the `SqlLake` it was made on)."""
    from platform_assets.engine import pyiceberg_tables
    from resources.lake.sql_lake import SqlLake

    kinds = {**{d.name: DATAMART for d in cfg.datamarts}, **{s.name: STREAM for s in cfg.streams}}
    lake = SqlLake(pyiceberg_tables(cfg), kinds)
    return rewrite_sql(query, lake), lake


def pick_engine(cfg: PlatformConfig, engine: str = "auto") -> str:
    """`engine`, with "auto" resolved (module docstring)."""
    if engine not in ENGINES:
        raise DeltaportError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "auto":
        return engine
    from platform_assets.engine import engine_for

    settings = engine_for(cfg)
    return "spark" if settings.remote_url() or settings.local_server().status() is not None else "duckdb"


def explain_sql(query: str, cfg: PlatformConfig, *, engine: str = "auto") -> SqlAnswer:
    """The SQL `query` runs as on `engine`, without running it."""
    plan, _ = plan_sql(query, cfg)
    engine = pick_engine(cfg, engine)
    return SqlAnswer(engine, _render(plan, engine, cfg, pretty=True), list(plan.notes))


def run_sql(query: str, cfg: PlatformConfig, *, engine: str = "auto") -> pa.Table:
    """The rows `query` answers on the lake (`answer_sql(...).rows`)."""
    return answer_sql(query, cfg, engine=engine).rows


def answer_sql(query: str, cfg: PlatformConfig, *, engine: str = "auto") -> SqlAnswer:
    from resources.lake import sql_engines

    plan, lake = plan_sql(query, cfg)
    engine = pick_engine(cfg, engine)
    if engine == "duckdb":
        rows = sql_engines.run_duckdb(plan, lake)
    else:
        from platform_assets.engine import engine_for

        rows = sql_engines.run_spark(plan, engine_for(cfg).session(), cfg.lake.catalog)
    return SqlAnswer(engine, _render(plan, engine, cfg), list(plan.notes), rows)


def _render(plan: Plan, engine: str, cfg: PlatformConfig, *, pretty: bool = False) -> str:
    from resources.lake import sql_engines

    if engine == "duckdb":
        scans = "".join(f"-- {s.name}: {', '.join(s.columns) or '*'} FROM {cfg.lake.catalog}.{s.namespace}.{s.table}"
                        f"{'' if s.snapshot_id is None else f' VERSION AS OF {s.snapshot_id}'} "
                        f"WHERE {s.row_filter}\n" for s in plan.scans) if pretty else ""
        return scans + sql_engines.duckdb_sql(plan, pretty=pretty)
    return sql_engines.spark_sql(plan, cfg.lake.catalog, pretty=pretty)

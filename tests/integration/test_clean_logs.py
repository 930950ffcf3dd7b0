"""A clean run logs no ERROR line; a real failure still does (issue 31, defect 6).

The first landing on an empty lake of two datamarts (one backup-only) and of one change stream of
each format (Qlik, DataWorks, Datastream): the session's `deltaport demo --once` (tests/support/
demo_once.py; the UI test looks at the same run), through `sync` as the daemon's sensors and runs
do; then `deltaport read` of a table of each source and of a table that does not exist, in this
process. Each of them asks "does it exist yet" (a table's or a namespace's first write, each
table's progress, a new session's catalog on a fresh warehouse). pyspark's Connect client logs
every failed call at ERROR ("GRPC Error received", with the server's stack trace) before it
raises, so such a question answered by a failing query printed an ERROR line into the CLI's output
and Dagster's run logs: 62 of them in `demo --once`. The client's logger is off unless
$SPARK_CONNECT_LOG_LEVEL is set and on once Dagster has configured logging (the demo's lines began
after its first run); it is switched on from the start (the demo runs with
$SPARK_CONNECT_LOG_LEVEL=error, and here around the reads), so every such call is seen. Then a
query on a missing table, a real failure, is logged at ERROR.
"""

from __future__ import annotations

import importlib
import logging
import re

import pytest

from platform_assets.cli import main
from platform_assets.config import load_config

pytestmark = pytest.mark.integration

CONNECT_LOGGER = "pyspark.sql.connect.logging"


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def connect_errors():
    """The ERROR records of pyspark's Connect client while the test runs (its logger switched on)."""
    # Imported first: its import switches the logger off (no $SPARK_CONNECT_LOG_LEVEL), which would
    # silence it for the whole test if the test's own calls imported it first.
    importlib.import_module(CONNECT_LOGGER)
    logger = logging.getLogger(CONNECT_LOGGER)
    kept, was = _Kept(), (logger.disabled, logger.level)
    logger.disabled = False
    logger.setLevel(logging.ERROR)
    logger.addHandler(kept)
    try:
        yield kept.records
    finally:
        logger.removeHandler(kept)
        logger.disabled, _ = was
        logger.setLevel(was[1])


def _said(records) -> list[str]:
    return [f"{r.getMessage()}: {str(r.exc_info[1])[:300] if r.exc_info else ''}" for r in records]


@pytest.mark.timeout(1200)  # the session's demo --once may start here
def test_a_first_landing_of_every_format_and_reads_log_no_error(spark_remote, demo_once, capfd, connect_errors):
    # The landing: the session's `demo --once`, its client logger on from the start, logged no ERROR.
    assert "all equal to the truth" in demo_once.text()
    errors = demo_once.error_lines()
    assert errors == [], f"{len(errors)} ERROR lines in the demo's output, e.g. {errors[:3]}"
    config = demo_once.config
    cfg = load_config(config)
    landed = demo_once.counted()
    assert set(landed) == set(cfg.source_names) and all(landed.values()), landed
    assert len(landed) == 5  # two datamarts (one backup-only) and a stream of each format

    # The reads, in this process (a process that landed nothing: every table unknown to it yet).
    for source, tables in landed.items():
        assert main(["read", f"{source}.{sorted(tables)[0]}", "--config", str(config)]) == 0, source
    assert main(["read", "marketing.nowhere", "--config", str(config)]) == 2  # a clear error, no trace
    printed = capfd.readouterr()
    assert "no delta of marketing.nowhere has landed yet" in printed.err
    assert _said(connect_errors) == []
    errors = [line for line in (printed.out + printed.err).splitlines() if re.search(r"\bERROR\b", line)]
    assert errors == []

    # A real failure still logs at ERROR: the client's logger was listening all along.
    from pyspark.errors import AnalysisException

    from platform_assets.engine import engine_for

    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        engine_for(cfg).session().table(f"{cfg.lake.catalog}.marketing.nowhere").schema
    assert len(connect_errors) == 1 and "TABLE_OR_VIEW_NOT_FOUND" in _said(connect_errors)[0]


def test_a_table_dropped_under_a_running_process_is_made_again_and_that_surprise_logs(spark, lake_ns,
                                                                                      connect_errors):
    """A table seen to exist is remembered (resources/spark/existence.py); dropped meanwhile, the
    query on it fails (logged: a real surprise), it is forgotten and made again."""
    from pyspark.sql.types import LongType, StructField, StructType

    from resources.spark.iceberg import ensure_table, table_exists

    ident, schema = f"{lake_ns}.t", StructType([StructField("a", LongType())])
    assert ensure_table(spark, ident, schema).created and table_exists(spark, ident) and connect_errors == []
    spark.sql(f"DROP TABLE {ident}")
    assert ensure_table(spark, ident, schema).created
    assert len(connect_errors) == 1 and "TABLE_OR_VIEW_NOT_FOUND" in _said(connect_errors)[0]
    assert not ensure_table(spark, ident, schema).created and len(connect_errors) == 1

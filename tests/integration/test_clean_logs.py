"""A clean run logs no ERROR line; a real failure still does (issue 31, defect 6).

The first landing on an empty lake of a datamart and of one change stream of each format (Qlik,
DataWorks, Datastream: the demo's stories, two deltas), through `sync` (the sensors and runs the
daemon and `deltaport demo --once` run, here in process), then `deltaport read` of a table of each
source and of a table that does not exist. Each of them asks "does it exist yet" (a table's or a
namespace's first write, each table's progress, a new session's catalog on a fresh warehouse).
pyspark's Connect client logs every failed call at ERROR ("GRPC Error received", with the
server's stack trace) before it raises, so such a question answered by a failing query printed
an ERROR line into the CLI's output and Dagster's run logs: 62 of them in `demo --once`. The
client's logger is off unless $SPARK_CONNECT_LOG_LEVEL is set and on once Dagster has configured
logging (the demo's lines began after its first run); it is switched on here from the start, so
every such call is seen. Then a query on a missing table, a real failure, is logged at ERROR.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.cli.demo_streams import demo_streams
from platform_assets.config import load_config
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish

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


def test_a_first_landing_of_every_format_and_reads_log_no_error(spark_remote, kafka_bootstrap, tmp_path, capfd,
                                                              connect_errors):
    run = uuid.uuid4().hex[:8]
    sc = build_scenario(EmulatorConfig(seed=3, deltas=2, datamarts=("marketing",), streams=2, chunk_size=5))
    topics = {SIGNAL: f"clean.signal.{run}", BACKUP: f"clean.backup.{run}"}
    streams = [dataclasses.replace(s, topic=f"{s.topic}.{run}") for s in demo_streams(3, 2)]
    for topic in [*topics.values(), *(s.topic for s in streams)]:
        create_topic(kafka_bootstrap, topic)
    publish(sc.messages, kafka_bootstrap, topics)
    for s in streams:
        publish(s.story.messages, kafka_bootstrap, {s.format: s.topic})
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "marketing", "format": "prostore", "signal_topic": topics[SIGNAL],
                     "backup_topic": topics[BACKUP]}, *(s.config(0) for s in streams)],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "clean", "type": "hadoop", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
    }))
    cfg = load_config(config)

    with dg.instance_for_test() as instance:
        result = sync(cfg, instance)
    assert result.ok, (result.failed, [o.error for o in result.outcomes if not o.success])
    landed: dict[str, list[str]] = {}
    for o in result.outcomes:
        landed[o.datamart] = sorted({*landed.get(o.datamart, ()), *o.snapshot_rows})
    assert set(landed) == {"marketing", *(s.name for s in streams)} and all(landed.values()), landed
    for source, tables in landed.items():
        assert main(["read", f"{source}.{tables[0]}", "--config", str(config)]) == 0, source
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
        engine_for(cfg).session().table("clean.marketing.nowhere").schema
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

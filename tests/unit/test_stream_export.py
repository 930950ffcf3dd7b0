"""The Prostore shape of an exported change stream: types, values, DDL and its growth."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from resources.codecs.ddl import CreateTable, parse_ddl, replay_changelog
from resources.codecs.types import Column
from resources.lake.export import ExportError
from resources.lake.stream_export import StreamChangelog, create_table, prostore_type, prostore_value


def test_types_follow_the_seeds_table_and_values_stay_exact():
    assert [prostore_type(t) for t in (T.LongType(), T.IntegerType(), T.BooleanType(), T.FloatType(), T.DoubleType(),
                                       T.StringType(), T.DateType(), T.TimestampNTZType(), T.TimestampType(),
                                       T.DecimalType(12, 2), T.BinaryType())] == [
        "bigint", "int32", "boolean", "float", "double", "varchar", "date", "timestamp", "timestamp", "varchar",
        "varchar"]
    assert prostore_value(T.DecimalType(12, 2), Decimal("12.50")) == "12.50"
    assert prostore_value(T.DecimalType(38, 0), Decimal("1E+3")) == "1000"
    assert prostore_value(T.BinaryType(), b"\x00\xff") == "00ff"
    aware = dt.datetime(2024, 1, 1, 3, 0, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    assert prostore_value(T.TimestampType(), aware) == dt.datetime(2024, 1, 1)
    with pytest.raises(ExportError, match="no Prostore type"):
        prostore_type(T.ArrayType(T.StringType()))


def test_the_ddl_parses_back_to_the_same_table():
    cols = [Column("id", "bigint", nullable=False), Column("Amount", "varchar"), Column("at", "timestamp")]
    stmt = parse_ddl(create_table("src", "sales_orders", cols, ["id"]))
    assert isinstance(stmt, CreateTable) and stmt.name == "sales_orders"
    assert list(stmt.columns) == cols and list(stmt.primary_key) == ["id"]


def test_the_changelog_grows_by_create_and_add_column_and_refuses_what_ddl_cannot_say():
    log = StreamChangelog("src")
    log.describe("t", [Column("id", "bigint", nullable=False)], ["id"])
    log.describe("t", [Column("id", "bigint", nullable=False)], ["id"])  # nothing new: nothing recorded
    log.describe("t", [Column("id", "bigint", nullable=False), Column("note", "varchar")], ["id"])
    assert [r.change_num for r in log.records] == [0, 1]
    assert [c.name for c in replay_changelog(log.records)["t"].columns] == ["id", "note"]
    with pytest.raises(ExportError, match="type changed from varchar to double"):
        log.describe("t", [Column("id", "bigint", nullable=False), Column("note", "double")], ["id"])
    with pytest.raises(ExportError, match="key changed"):
        log.describe("t", [Column("id", "bigint", nullable=False)], ["id", "note"])

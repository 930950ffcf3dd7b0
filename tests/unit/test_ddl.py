"""Changelog DDL parser and schema replay: the seed's statements verbatim, then variants."""

from __future__ import annotations

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import (
    CreateTable,
    CreateView,
    DropTable,
    DropView,
    EntitySchema,
    OtherStatement,
    parse_ddl,
    replay_changelog,
)
from resources.codecs.types import Column
from resources.errors import DdlParseError

# Seed vectors, verbatim (note the extra ')' at the end of the first one).
SALES_DDL = (
    "CREATE TABLE marketing.sales (id INT NOT NULL, transaction_date TIMESTAMP NOT NULL, "
    "product_code VARCHAR(256) NOT NULL, product_units INT NOT NULL, store_id INT NOT NULL, "
    "description VARCHAR(256), PRIMARY KEY (id)) DISTRIBUTED BY (id))"
)
VIEW_DDL = (
    "CREATE VIEW marketing.stores_by_sold_products AS SELECT store_id, SUM(product_units) AS "
    "product_amount FROM marketing.sales GROUP BY store_id ORDER BY product_amount DESC LIMIT 20"
)
DROP_VIEW_DDL = "DROP VIEW marketing.stores_by_sold_products"
SEED_CHANGELOG = [
    {"changeNum": 0, "entityName": "marketing", "changeQuery": SALES_DDL},
    {"changeNum": 1, "entityName": "stores_by_sold_products", "changeQuery": VIEW_DDL},
    {"changeNum": 2, "entityName": "stores_by_sold_products", "changeQuery": DROP_VIEW_DDL},
]
TABLE1_ADQM_DDL = """CREATE TABLE sourcedb.table1_adqm
(
id bigint not null,
boolean_col boolean,
int32_col int32,
int_col int,
bigint_col bigint,
float_col float,
double_col double,
char_col char(10),
varchar_col varchar,
uuid_col uuid,
link_col link,
date_col date,
time_col time,
timestamp_col timestamp,
PRIMARY KEY (id)
)
DISTRIBUTED BY (id)
DATASOURCE_TYPE ('adqm');"""

SALES_COLUMNS = (
    Column("id", "int", None, False),
    Column("transaction_date", "timestamp", None, False),
    Column("product_code", "varchar", 256, False),
    Column("product_units", "int", None, False),
    Column("store_id", "int", None, False),
    Column("description", "varchar", 256, True),
)


def test_seed_sales_table_with_unbalanced_paren():
    assert parse_ddl(SALES_DDL) == CreateTable(
        "marketing", "sales", SALES_COLUMNS, ("id",), ("id",), ()
    )


def test_seed_table1_adqm_every_type():
    stmt = parse_ddl(TABLE1_ADQM_DDL)
    assert isinstance(stmt, CreateTable)
    assert (stmt.datamart, stmt.name) == ("sourcedb", "table1_adqm")
    assert [(c.name, c.type, c.length, c.nullable) for c in stmt.columns] == [
        ("id", "bigint", None, False),
        ("boolean_col", "boolean", None, True),
        ("int32_col", "int32", None, True),
        ("int_col", "int", None, True),
        ("bigint_col", "bigint", None, True),
        ("float_col", "float", None, True),
        ("double_col", "double", None, True),
        ("char_col", "char", 10, True),
        ("varchar_col", "varchar", None, True),
        ("uuid_col", "uuid", None, True),
        ("link_col", "link", None, True),
        ("date_col", "date", None, True),
        ("time_col", "time", None, True),
        ("timestamp_col", "timestamp", None, True),
    ]
    assert stmt.primary_key == ("id",)
    assert stmt.distributed_by == ("id",)
    assert stmt.datasource_types == ("adqm",)


def test_seed_view_and_drop():
    assert parse_ddl(VIEW_DDL) == CreateView(
        "marketing",
        "stores_by_sold_products",
        "view",
        "SELECT store_id, SUM(product_units) AS product_amount FROM marketing.sales "
        "GROUP BY store_id ORDER BY product_amount DESC LIMIT 20",
    )
    assert parse_ddl(DROP_VIEW_DDL) == DropView("marketing", "stores_by_sold_products", "view")


def test_seed_other_statements_are_kept():
    assert parse_ddl("CREATE DATABASE sourcedb;") == OtherStatement(
        "CREATE DATABASE", "CREATE DATABASE sourcedb;"
    )
    assert parse_ddl("USE sourcedb;").verb == "USE SOURCEDB"
    ext = "CREATE UPLOAD EXTERNAL TABLE sales_ext (id INT) LOCATION 'kafka://host/topic' FORMAT 'AVRO'"
    assert parse_ddl(ext) == OtherStatement("CREATE UPLOAD", ext)
    assert isinstance(parse_ddl("ALTER TABLE t ADD COLUMN x int"), OtherStatement)
    assert isinstance(parse_ddl("DROP DATABASE sourcedb"), OtherStatement)
    assert isinstance(parse_ddl("DROP UPLOAD EXTERNAL TABLE sales_ext"), OtherStatement)
    assert isinstance(parse_ddl(""), OtherStatement)
    # The tokenizer never raises: an unterminated quote runs to the end of the text.
    assert parse_ddl("CREATE DATABASE 'unterminated").verb == "CREATE DATABASE"


def test_lowercase_unqualified_multi_pk_datasource_list():
    stmt = parse_ddl(
        "create table Sales2 (ID bigint NOT null, Region varchar(10) not null, amount double,\n"
        "  primary key (id, region)) distributed by (id) datasource_type (adb, ADQM)"
    )
    assert stmt == CreateTable(
        None,
        "sales2",
        (Column("id", "bigint", None, False), Column("region", "varchar", 10, False),
         Column("amount", "double")),
        ("id", "region"),
        ("id",),
        ("adb", "adqm"),
    )


def test_quoted_identifiers_comments_and_tolerated_tails():
    stmt = parse_ddl(
        '-- created by the demo\nCREATE TABLE IF NOT EXISTS "dm"."Mixed" (\n'
        "  `Key` int32 NOT NULL, /* the key */ v char(3) NULL,\n"
        "  PRIMARY KEY (`Key`)\n) DISTRIBUTED BY (`Key`) LOGICAL_ONLY ;"
    )
    assert stmt == CreateTable(
        "dm", "Mixed", (Column("Key", "int32", None, False), Column("v", "char", 3)),
        ("Key",), ("Key",), (),
    )


def test_inline_primary_key_and_missing_close_paren():
    stmt = parse_ddl("CREATE TABLE t (id bigint PRIMARY KEY, x int DISTRIBUTED BY (id)")
    assert stmt.primary_key == ("id",) and stmt.distributed_by == ("id",)
    assert stmt.columns == (Column("id", "bigint", None, False), Column("x", "int"))


def test_views_of_every_kind():
    assert parse_ddl("CREATE OR REPLACE VIEW v AS SELECT 1;") == CreateView(
        None, "v", "view", "SELECT 1", or_replace=True
    )
    assert parse_ddl("ALTER VIEW dm.v AS SELECT 2") == CreateView(
        "dm", "v", "view", "SELECT 2", or_replace=True
    )
    mv = parse_ddl(
        "CREATE MATERIALIZED VIEW dm.sales_mv (\n id bigint not null, total double,\n"
        " PRIMARY KEY (id)\n) DISTRIBUTED BY (id) DATASOURCE_TYPE (adqm)\n"
        "AS SELECT id, SUM(x) AS total FROM dm.sales GROUP BY id DATASOURCE_TYPE = 'adb'"
    )
    assert mv == CreateView(
        "dm", "sales_mv", "materialized_view",
        "SELECT id, SUM(x) AS total FROM dm.sales GROUP BY id DATASOURCE_TYPE = 'adb'",
        False, (Column("id", "bigint", None, False), Column("total", "double")),
        ("id",), ("id",), ("adqm",),
    )
    assert parse_ddl("DROP MATERIALIZED VIEW IF EXISTS dm.sales_mv") == DropView(
        "dm", "sales_mv", "materialized_view"
    )
    assert parse_ddl("drop table if exists dm.sales;") == DropTable("dm", "sales")


@pytest.mark.parametrize(
    "query, reason",
    [
        ("CREATE TABLE t () DISTRIBUTED BY (id)", "no column definitions"),
        ("CREATE TABLE t DISTRIBUTED BY (id)", "expected '(' and column definitions, found 'DISTRIBUTED'"),
        ("CREATE TABLE t (id money, PRIMARY KEY (id))", "column 'id': unknown Prostore column type 'money'"),
        ("CREATE TABLE t (id bigint) DISTRIBUTED BY (id)", "no PRIMARY KEY"),
        ("CREATE TABLE t (id bigint, PRIMARY KEY (idx))", "primary key column 'idx' is not a declared column"),
        ("CREATE TABLE t (id bigint, PRIMARY KEY (id)) DISTRIBUTED BY (k)", "distribution key column 'k' is not a declared column"),
        ("CREATE TABLE t (id bigint, id int, PRIMARY KEY (id))", "duplicate column 'id'"),
        ("CREATE TABLE (id bigint)", "expected table name, found '('"),
        ("CREATE TABLE t (id, PRIMARY KEY (id))", "expected a type for column 'id', found ','"),
        ("CREATE TABLE t (id bigint UNIQUE, PRIMARY KEY (id))", "unexpected 'UNIQUE' in definition of column 'id'"),
        ("CREATE TABLE t (c varchar(x), PRIMARY KEY (c))", "expected a length in varchar(...) of column 'c'"),
        ("CREATE VIEW v SELECT 1", "expected AS and a query, found 'SELECT'"),
    ],
)
def test_malformed_statements(query, reason):
    with pytest.raises(DdlParseError) as info:
        parse_ddl(query)
    assert info.value.reason.startswith(reason)
    assert info.value.query == query
    assert str(info.value).startswith(f"cannot parse DDL ({info.value.reason}): ")


def test_replay_seed_changelog():
    state = replay_changelog(SEED_CHANGELOG)
    # Keyed by the DDL's name ("sales"), not the record's entityName ("marketing").
    assert state == {
        "sales": EntitySchema(
            "marketing", "sales", "table", SALES_COLUMNS, ("id",), ("id",), (), None, 0
        )
    }
    assert state["sales"].column("description") == SALES_COLUMNS[-1]
    assert state["sales"].column("nope") is None


def test_replay_orders_by_change_num_and_accepts_records():
    records = [ChangelogRecord(r["changeNum"], r["entityName"], r["changeQuery"]) for r in SEED_CHANGELOG]
    assert replay_changelog(reversed(records)) == replay_changelog(SEED_CHANGELOG)
    state = replay_changelog(records[:2])
    view = state["stores_by_sold_products"]
    assert (view.kind, view.datamart, view.change_num, view.columns) == ("view", "marketing", 1, ())
    assert view.query.startswith("SELECT store_id, SUM(product_units)")


def test_replay_replace_drop_and_ignore_others():
    records = [
        ChangelogRecord(0, "sourcedb", "CREATE DATABASE sourcedb"),
        ChangelogRecord(1, "t", "CREATE TABLE sourcedb.t (id bigint, PRIMARY KEY (id)) DISTRIBUTED BY (id)"),
        ChangelogRecord(2, "u", "CREATE TABLE sourcedb.u (id bigint, PRIMARY KEY (id)) DISTRIBUTED BY (id)"),
        ChangelogRecord(3, "t", "DROP TABLE sourcedb.t"),
        ChangelogRecord(4, "t", "CREATE TABLE sourcedb.t (id bigint, v varchar, PRIMARY KEY (id)) DISTRIBUTED BY (id)"),
        ChangelogRecord(5, "u", "CREATE TABLE sourcedb.u (k int32, PRIMARY KEY (k)) DISTRIBUTED BY (k)"),
        ChangelogRecord(6, "gone", "DROP VIEW sourcedb.gone"),
    ]
    state = replay_changelog(records)
    assert sorted(state) == ["t", "u"]
    assert [c.name for c in state["t"].columns] == ["id", "v"] and state["t"].change_num == 4
    assert state["u"].primary_key == ("k",) and state["u"].change_num == 5


def test_replay_error_names_the_change():
    with pytest.raises(DdlParseError) as info:
        replay_changelog([ChangelogRecord(7, "t", "CREATE TABLE t (id blob, PRIMARY KEY (id))")])
    assert info.value.reason.startswith("changeNum 7: column 'id': unknown Prostore column type 'blob'")

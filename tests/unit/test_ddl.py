"""Changelog DDL parser and schema replay: the seed's statements verbatim, then variants."""

from __future__ import annotations

import pytest

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import (
    AddColumn,
    AlterTable,
    ColumnTransition,
    CreateTable,
    CreateView,
    DropColumn,
    DropTable,
    DropView,
    EntitySchema,
    OtherStatement,
    RenameColumn,
    column_transition,
    parse_ddl,
    replay_changelog,
)
from resources.codecs.types import Column
from resources.errors import DdlParseError
from tests.support.seed_vectors import (
    DROP_VIEW_DDL,
    SALES_COLUMNS,
    SALES_DDL,
    TABLE1_ADQM_DDL,
    VIEW_DDL,
)
from tests.support.seed_vectors import SEED_CHANGELOG_RECORDS as SEED_CHANGELOG


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
    assert isinstance(parse_ddl("ALTER TABLE t ADD COLUMN x int"), AlterTable)  # parsed since column changes
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


def test_a_list_replayed_again_gives_a_fresh_copy_and_its_changes_are_seen():
    """A caller's list replays once (issue 57: a step asks a dozen times); every call gets its own
    dict, and a list changed in place (a record replaced or added) or a mapping record changed
    is replayed again, never answered from the cache."""
    t = "CREATE TABLE dm.{} (id bigint, PRIMARY KEY (id)) DISTRIBUTED BY (id)"
    records = [ChangelogRecord(0, "a", t.format("a")), ChangelogRecord(1, "b", t.format("b"))]
    first = replay_changelog(records)
    first.pop("a")  # the caller's to change
    assert sorted(replay_changelog(records)) == ["a", "b"]
    assert replay_changelog(records) is not replay_changelog(records)
    records[1] = ChangelogRecord(1, "c", t.format("c"))
    assert sorted(replay_changelog(records)) == ["a", "c"]
    records.append(ChangelogRecord(2, "a", "DROP TABLE dm.a"))
    assert sorted(replay_changelog(records)) == ["c"]
    as_tuple = tuple(records[:1])
    assert sorted(replay_changelog(as_tuple)) == sorted(replay_changelog(as_tuple)) == ["a"]
    mappings = [{"changeNum": 0, "entityName": "a", "changeQuery": t.format("a")}]
    assert sorted(replay_changelog(mappings)) == ["a"]
    mappings[0]["changeQuery"] = t.format("d")
    assert sorted(replay_changelog(mappings)) == ["d"]


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


# ---------------------------------------------------------------- ALTER TABLE (column changes)

STORES_DDL = ("CREATE TABLE dm.stores (id BIGINT NOT NULL, name VARCHAR(100) NOT NULL, city VARCHAR, "
              "region_code CHAR(3), PRIMARY KEY (id)) DISTRIBUTED BY (id)")


def stores_log(*alters: str, first: int = 0) -> list[ChangelogRecord]:
    return [ChangelogRecord(first + i, "stores", q) for i, q in enumerate((STORES_DDL, *alters))]


@pytest.mark.parametrize("query, expected", [
    ("ALTER TABLE dm.stores ADD COLUMN manager VARCHAR",
     AlterTable("dm", "stores", (AddColumn(Column("manager", "varchar")),))),
    ("alter table stores add manager varchar(20) not null;",
     AlterTable(None, "stores", (AddColumn(Column("manager", "varchar", 20, False)),))),
    ("ALTER TABLE dm.stores ADD COLUMN IF NOT EXISTS opened DATE NULL",
     AlterTable("dm", "stores", (AddColumn(Column("opened", "date"), if_not_exists=True),))),
    ("ALTER TABLE dm.stores DROP COLUMN region_code", AlterTable("dm", "stores", (DropColumn("region_code"),))),
    ("Alter Table STORES Drop Region_Code", AlterTable(None, "stores", (DropColumn("region_code"),))),
    ("ALTER TABLE IF EXISTS dm.stores DROP COLUMN IF EXISTS x",
     AlterTable("dm", "stores", (DropColumn("x", if_exists=True),), if_exists=True)),
    ("ALTER TABLE dm.stores RENAME COLUMN city TO town", AlterTable("dm", "stores", (RenameColumn("city", "town"),))),
    ('ALTER TABLE dm.stores RENAME COLUMN city TO "Town"', AlterTable("dm", "stores", (RenameColumn("city", "Town"),))),
    ("ALTER TABLE dm.stores ADD COLUMN a int, DROP COLUMN city, RENAME COLUMN name TO title",
     AlterTable("dm", "stores", (AddColumn(Column("a", "int")), DropColumn("city"), RenameColumn("name", "title")))),
], ids=["add", "add-lowercase-bare-notnull", "add-if-not-exists", "drop", "drop-bare-mixed-case",
        "if-exists", "rename", "rename-quoted", "several-actions"])
def test_parse_alter_table(query, expected):
    assert parse_ddl(query) == expected


@pytest.mark.parametrize("query, reason", [
    ("ALTER TABLE t ADD COLUMN x blob", "column 'x': unknown Prostore column type 'blob'"),
    ("ALTER TABLE t ADD COLUMN x", "expected a type for column 'x', found end of statement"),
    ("ALTER TABLE t ADD COLUMN x int PRIMARY KEY", "cannot add primary key column 'x'"),
    ("ALTER TABLE t ADD PRIMARY KEY (x)", "ALTER TABLE ... ADD of a key or constraint is not supported"),
    ("ALTER TABLE t RENAME COLUMN a b", "expected TO after RENAME COLUMN a, found 'b'"),
    ("ALTER TABLE t RENAME TO u", "unsupported ALTER TABLE action 'RENAME'"),
    ("ALTER TABLE t", "expected an ALTER TABLE action, found end of statement"),
    ("ALTER TABLE t ALTER COLUMN a TYPE bigint", "unsupported ALTER TABLE action 'ALTER'"),
    ("ALTER TABLE t DROP COLUMN a b", "expected ',' or the end after an ALTER TABLE action, found 'b'"),
    ("ALTER TABLE t DROP COLUMN a,", "expected an ALTER TABLE action, found end of statement"),
])
def test_parse_alter_table_errors(query, reason):
    with pytest.raises(DdlParseError) as info:
        parse_ddl(query)
    assert info.value.reason.startswith(reason), info.value.reason


def test_replay_alter_add_drop_rename():
    state = replay_changelog(stores_log(
        "ALTER TABLE dm.stores ADD COLUMN manager VARCHAR",
        "ALTER TABLE dm.stores RENAME COLUMN city TO town",
        "alter table STORES drop column REGION_CODE",
    ))
    stores = state["stores"]
    assert [c.name for c in stores.columns] == ["id", "name", "town", "manager"]
    assert stores.column("town") == Column("town", "varchar")  # type and nullability kept
    assert (stores.primary_key, stores.distributed_by, stores.change_num) == (("id",), ("id",), 0)
    assert stores.column_ids == ("0.0", "0.1", "0.2", "1.0")  # a rename keeps the column's identity
    # The same result from several actions in one statement, in order.
    one = replay_changelog(stores_log("ALTER TABLE stores ADD manager varchar, RENAME COLUMN city TO town, "
                                      "DROP COLUMN region_code"))["stores"]
    assert one == stores


def test_replay_alter_if_exists_and_if_not_exists_skip():
    state = replay_changelog(stores_log(
        "ALTER TABLE IF EXISTS dm.nope ADD COLUMN x int",
        "ALTER TABLE dm.stores ADD COLUMN IF NOT EXISTS city int",  # exists: kept as varchar
        "ALTER TABLE dm.stores DROP COLUMN IF EXISTS nope",
    ))
    assert [c.name for c in state["stores"].columns] == ["id", "name", "city", "region_code"]
    assert state["stores"].column("city").type == "varchar"


@pytest.mark.parametrize("alter, reason", [
    ("ALTER TABLE dm.stores RENAME COLUMN id TO store_id", "cannot rename primary key column 'id'"),
    ("ALTER TABLE dm.stores DROP COLUMN id", "cannot drop primary key column 'id'"),
    ("ALTER TABLE dm.stores DROP COLUMN nope", "no column 'nope' to drop"),
    ("ALTER TABLE dm.stores RENAME COLUMN nope TO x", "no column 'nope' to rename"),
    ("ALTER TABLE dm.stores RENAME COLUMN city TO name", "cannot rename 'city' to 'name': that column exists"),
    ("ALTER TABLE dm.stores ADD COLUMN city varchar", "column 'city' already exists"),
])
def test_replay_alter_errors_name_the_change(alter, reason):
    with pytest.raises(DdlParseError) as info:
        replay_changelog(stores_log(alter, first=40))
    assert info.value.reason == f"changeNum 41: ALTER TABLE stores: {reason}"
    assert info.value.query == alter


def test_replay_alter_of_no_table_or_a_view():
    with pytest.raises(DdlParseError) as info:
        replay_changelog([ChangelogRecord(3, "t", "ALTER TABLE dm.t ADD COLUMN x int")])
    assert info.value.reason == "changeNum 3: ALTER TABLE 't', which is no table"
    records = [ChangelogRecord(0, "v", "CREATE VIEW dm.v AS SELECT 1"),
               ChangelogRecord(1, "v", "ALTER TABLE dm.v ADD COLUMN x int")]
    with pytest.raises(DdlParseError, match=r"changeNum 1: ALTER TABLE 'v', which is a view"):
        replay_changelog(records)


def test_distribution_key_column_cannot_be_dropped_or_renamed():
    create = ChangelogRecord(0, "t", "CREATE TABLE t (a int, b int, PRIMARY KEY (a)) DISTRIBUTED BY (b)")
    for verb, alter in (("drop", "DROP COLUMN b"), ("rename", "RENAME COLUMN b TO c")):
        with pytest.raises(DdlParseError) as info:
            replay_changelog([create, ChangelogRecord(1, "t", f"ALTER TABLE t {alter}")])
        assert info.value.reason == f"changeNum 1: ALTER TABLE t: cannot {verb} distribution key column 'b'"


def test_recreate_after_drop_replaces_the_table_and_its_alters():
    records = stores_log(
        "ALTER TABLE dm.stores ADD COLUMN manager VARCHAR",
        "DROP TABLE dm.stores",
        "CREATE TABLE dm.stores (id BIGINT NOT NULL, city INT, PRIMARY KEY (id)) DISTRIBUTED BY (id)",
        "ALTER TABLE dm.stores RENAME COLUMN city TO town",
    )
    stores = replay_changelog(records)["stores"]
    assert [(c.name, c.type) for c in stores.columns] == [("id", "bigint"), ("town", "int")]
    assert stores.change_num == 3 and stores.column_ids == ("3.0", "3.1")
    # ALTER of the dropped table, before it is created again: an error, not a silent no-op.
    with pytest.raises(DdlParseError, match=r"changeNum 2: ALTER TABLE 'stores', which is no table"):
        replay_changelog(stores_log("DROP TABLE dm.stores", "ALTER TABLE dm.stores ADD COLUMN x int"))


def test_column_transition_between_versions():
    log = stores_log(
        "ALTER TABLE dm.stores ADD COLUMN manager VARCHAR",
        "ALTER TABLE dm.stores RENAME COLUMN city TO town",
        "ALTER TABLE dm.stores DROP COLUMN region_code",
        "ALTER TABLE dm.stores RENAME COLUMN town TO place",
        "ALTER TABLE dm.stores ADD COLUMN region_code CHAR(3)",  # back, as a new column
    )
    v = [replay_changelog(log[: i + 1])["stores"] for i in range(len(log))]
    assert column_transition(v[0], v[0]).unchanged
    t = column_transition(v[0], v[5])
    assert t == ColumnTransition({"id": "id", "name": "name", "place": "city", "manager": None,
                                  "region_code": None}, dropped=("region_code",))  # city lives on as place
    assert (t.renamed, t.added, t.recreated, t.unchanged) == ({"place": "city"}, ("manager", "region_code"),
                                                               False, False)
    assert column_transition(v[2], v[3]).dropped == ("region_code",)
    assert column_transition(v[3], v[4]).renamed == {"place": "town"}
    # Built by hand (no column ids): matched by name.
    hand = EntitySchema("dm", "stores", "table", v[1].columns, ("id",), ("id",), (), None, 0)
    assert column_transition(hand, v[1]).unchanged
    # Dropped and created again: a new table, nothing carries over.
    again = replay_changelog([*log, ChangelogRecord(9, "stores", "DROP TABLE dm.stores"),
                              ChangelogRecord(10, "stores", STORES_DDL)])["stores"]
    assert again.columns == v[0].columns  # the same columns ...
    recreated = column_transition(v[0], again)  # ... but another table
    assert recreated.recreated and recreated.sources == dict.fromkeys(["id", "name", "city", "region_code"])


def test_emulated_column_changes_replay_to_the_truths_columns():
    """The emulator's opt-in column story: the changelog shipped with each increment describes
    exactly the columns of that delta's true rows."""
    from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, decode_backup_key, iter_changelog
    from resources.emulator.outgoing import BACKUP
    from resources.emulator.scenario import EmulatorConfig, build_scenario

    sc = build_scenario(EmulatorConfig(seed=11, deltas=6, datamarts=("marketing",), column_changes_at_delta=2,
                                       ddl_at_delta=None))

    seen = set()
    for m in sc.messages:
        key = decode_backup_key(m.key) if m.role == BACKUP else None
        if key is None or key.message_type != MESSAGE_TYPE_CHANGELOG:
            continue
        stores = replay_changelog(list(iter_changelog(m.value)))["stores"]
        rows = sc.truth["marketing"][key.delta_num]["stores"].values()
        assert all(list(r) and set(r) == {c.name for c in stores.columns} for r in rows), key.delta_num
        seen.add(tuple(c.name for c in stores.columns))
    assert seen == {("id", "name", "city", "opened", "region_code"),
                    ("id", "name", "city", "opened", "region_code", "manager"),
                    ("id", "name", "town", "opened", "manager")}  # renamed in place
    rows = sc.truth["marketing"]
    assert any(r["manager"] is None for r in rows[2]["stores"].values())  # old rows: NULL until written
    assert any(r["manager"] is not None for r in rows[2]["stores"].values())
    written = {(c.row["id"],) for c in sc.increments["marketing"][4] if c.table == "stores"}
    kept = [k for k in rows[3]["stores"] if k not in written]
    assert kept and all(rows[4]["stores"][k]["town"] == rows[3]["stores"][k]["city"] for k in kept)


def test_a_proxy_table_is_a_table_for_the_lake():
    # Prostore's CREATE PROXY TABLE: in a snapshot backup's changelog its data follows (seed 001 line 32).
    query = ("CREATE PROXY TABLE IF NOT EXISTS marketing.visits (id BIGINT NOT NULL, page VARCHAR(100), "
             "PRIMARY KEY (id)) DISTRIBUTED BY (id) DATASOURCE_TYPE ('adp') LOGICAL_ONLY")
    stmt = parse_ddl(query)
    assert isinstance(stmt, CreateTable) and stmt.name == "visits" and stmt.primary_key == ("id",)
    entity = replay_changelog([ChangelogRecord(0, "visits", query)])["visits"]
    assert entity.kind == "table" and [c.name for c in entity.columns] == ["id", "page"]

"""The versions view's SQL (resources/lake/versions_view.py): pure, no engine."""

from sqlglot import exp, parse_one

from resources.lake.versions_view import catalog_keeps_views, versions_view_sql, view_ident

SNAPSHOT = [("id", "bigint"), ("v", "string"), ("w", "decimal(10,2)"), ("sys_from", "bigint"),
            ("sys_from_date", "timestamp_ntz")]
HISTORY = ["id", "v", "sys_from", "sys_from_date", "sys_to", "sys_op", "sys_close_date", "delta_num"]
VIEW = ["id", "v", "w", "sys_from", "sys_from_date", "sys_to", "sys_op", "sys_close_date", "delta_num"]


def sides(sql: str) -> tuple[exp.Select, exp.Select]:
    union = parse_one(sql, dialect="spark")
    assert isinstance(union, exp.Union) and not union.args.get("distinct")
    return union.this, union.expression


def test_both_sides_give_the_views_columns_in_order_and_a_missing_one_reads_a_typed_null():
    current, closed = sides(versions_view_sql("lake.dm.t", "lake.dm_history.t", SNAPSHOT, HISTORY))
    assert current.named_selects == closed.named_selects == VIEW
    assert current.find(exp.Table).sql(dialect="spark") == "`lake`.`dm`.`t`"
    assert closed.find(exp.Table).sql(dialect="spark") == "`lake`.`dm_history`.`t`"
    w = closed.selects[2]
    assert isinstance(w.this, exp.Cast) and w.this.to.sql(dialect="spark") == "DECIMAL(10, 2)"
    assert current.selects[6].this.sql() == "0" and current.args.get("where") is None  # sys_op of a current version


def test_a_streams_tombstones_and_own_columns_stay_out():
    snapshot = [("id", "bigint"), ("a", "string"), ("_order", "bigint"), ("_tombstone", "boolean"),
                ("_event_time_us", "bigint"), ("sys_from", "bigint"), ("sys_from_date", "timestamp_ntz")]
    current, closed = sides(versions_view_sql("l.s.t", "l.s_history.t", snapshot, [c for c, _ in snapshot],
                                              stream=True))
    assert current.named_selects == closed.named_selects == ["id", "a", *VIEW[3:]]
    assert "_tombstone" in current.args["where"].sql() and closed.args.get("where") is None


def test_only_catalogs_with_views_get_them():
    assert catalog_keeps_views("jdbc") and catalog_keeps_views("rest")
    assert not catalog_keeps_views("hadoop") and not catalog_keeps_views("hive")
    assert view_ident("lake", "marketing", "sales") == "lake.marketing_versions.sales"

"""Prostore's SELECT parsed by deltaport's sqlglot dialect: every FOR SYSTEM_TIME form it answers,
the forms it refuses (one line naming the form and why), syntax errors with line and column."""

from __future__ import annotations

import pytest
from sqlglot import exp

from resources.lake.prostore_dialect import RefusedFormError, SqlSyntaxError, parse_query


def versions(sql: str) -> list[tuple[str, str, str, str | None, object]]:
    """(db, table, alias, kind, value) of every table reference."""
    out = []
    for table in parse_query(sql).find_all(exp.Table):
        version = table.args.get("version")
        value = None
        if version is not None:
            e = version.expression
            value = tuple(int(v.name) for v in e.expressions) if isinstance(e, exp.Tuple) else e.name
        out.append((table.db, table.name, table.alias, version and version.args["kind"], value))
    return out


@pytest.mark.parametrize("clause, kind, value", [
    ("FOR SYSTEM_TIME AS OF DELTA_NUM 7", "AS OF DELTA_NUM", "7"),
    ("for system_time as of delta_num 0", "AS OF DELTA_NUM", "0"),
    ("FOR SYSTEM_TIME AS OF '2026-11-01 12:00:00'", "AS OF", "2026-11-01 12:00:00"),
    ("FOR SYSTEM_TIME STARTED IN (3, 5)", "STARTED IN", (3, 5)),
    ("FOR SYSTEM_TIME STARTED IN(0,7)", "STARTED IN", (0, 7)),
    ("FOR SYSTEM_TIME FINISHED IN (2, 4)", "FINISHED IN", (2, 4)),
])
@pytest.mark.parametrize("alias", ["", " s", " AS s"])
def test_every_form_with_and_without_alias(clause, kind, value, alias):
    got = versions(f"SELECT * FROM marketing.sales {clause}{alias} WHERE id > 1")
    assert got == [("marketing", "sales", alias.split()[-1] if alias else "", kind, value)]


def test_each_table_its_own_clause_and_none():
    sql = """SELECT s.store_id, sum(s.product_units)
             FROM marketing.sales FOR SYSTEM_TIME AS OF DELTA_NUM 7 s
             JOIN marketing.stores FOR SYSTEM_TIME STARTED IN (1, 2) AS st ON st.id = s.store_id
             LEFT JOIN marketing.clients c ON c.id = s.client_id
             WHERE s.id IN (SELECT id FROM marketing.sales FOR SYSTEM_TIME FINISHED IN (3, 3))
             GROUP BY s.store_id ORDER BY 2 DESC LIMIT 5"""
    assert sorted(versions(sql), key=str) == sorted([
        ("marketing", "sales", "s", "AS OF DELTA_NUM", "7"),
        ("marketing", "stores", "st", "STARTED IN", (1, 2)),
        ("marketing", "clients", "c", None, None),
        ("marketing", "sales", "", "FINISHED IN", (3, 3)),
    ], key=str)


@pytest.mark.parametrize("sql, form, column", [
    ("SELECT * FROM m.t FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA", "AS OF LATEST_UNCOMMITTED_DELTA", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME AS OF CN 12", "AS OF CN", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME STARTED CN (1, 2)", "STARTED CN", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME FINISHED CN (1, 2)", "FINISHED CN", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME STARTED TS (1, 2)", "STARTED TS", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME FINISHED TS (1, 2)", "FINISHED TS", 35),
    ("SELECT * FROM m.t FOR SYSTEM_TIME RAW", "RAW", 35),
    ("SELECT * FROM m.t DATASOURCE_TYPE = 'ADB'", "DATASOURCE_TYPE", 19),
    ("SELECT * FROM m.t WHERE id = 1 datasource_type = 'ADQM'", "DATASOURCE_TYPE", 32),
    ("SELECT id FROM m.t ESTIMATE_ONLY", "ESTIMATE_ONLY", 20),
    ("SELECT id FROM m.t ORDER BY id LIMIT 3 ESTIMATE_ONLY", "ESTIMATE_ONLY", 40),
])
def test_refused_forms_name_the_form_and_why(sql, form, column):
    with pytest.raises(RefusedFormError) as err:
        parse_query(sql)
    text = str(err.value)
    assert err.value.form == form and form in text and f"line 1, column {column}" in text
    assert "\n" not in text and "not supported: " in text and len(text.split("not supported: ")[1]) > 20


@pytest.mark.parametrize("sql, line, column, says", [
    ("SELECT id\nFROM m.t\nWHERE name = 'north", 3, 14, "never closed"),
    ("SELECT id FROM m.t WHERE id IN (1, 2", 1, 36, "Expecting )"),
    ("SELECT id\n  FROM m.t FOR SYSTEM_TIME AS OF DELTA_NUM seven", 2, 44, "delta number"),
    ("SELECT id FROM m.t FOR SYSTEM_TIME AS OF DELTA_NUM -1", 1, 52, "delta number"),
    ("SELECT id FROM m.t FOR SYSTEM_TIME STARTED IN (1)", 1, 49, "two delta numbers"),
    ("SELECT id FROM m.t FOR SYSTEM_TIME FINISHED (1, 2)", 1, 45, "IN (delta_num1, delta_num2)"),
    ("SELECT id FROM m.t FOR SYSTEM_TIME AS OF 7", 1, 42, "DELTA_NUM n or a"),
    ("SELECT id FROM m.t FOR SYSTEM_TIME BETWEEN 1 AND 2", 1, 36, "STARTED IN (a, b)"),
    ("SELECT 1; SELECT 2", 1, 1, "one query expected"),
    ("DELETE FROM m.t WHERE id = 1", 1, 1, "a SELECT query expected"),
])
def test_syntax_errors_give_line_and_column(sql, line, column, says):
    with pytest.raises(SqlSyntaxError) as err:
        parse_query(sql)
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    assert says in str(err.value) and str(err.value).startswith(f"syntax error at line {line}, column {column}: ")


def test_with_and_set_operations_parse():
    sql = ("WITH recent AS (SELECT id FROM m.t FOR SYSTEM_TIME STARTED IN (1, 2)) "
           "SELECT id FROM recent UNION ALL SELECT id FROM m.t FOR SYSTEM_TIME AS OF DELTA_NUM 0")
    assert sorted(str(v[3]) for v in versions(sql)) == ["AS OF DELTA_NUM", "None", "STARTED IN"]

"""The changelog of a change-stream delta (pure part): lake table names, schema / DDL / key entries."""

from __future__ import annotations

from resources.codecs.cdc import UPSERT, Change, SchemaChange, TableSchema
from resources.lake.stream_changelog import DDL, KEYS, SCHEMA, changelog_entries, changes_by_table, lake_table


def change(table, keys, types, ns="SALES"):
    return Change("qlik", ns, table, UPSERT, keys, {k: 1 for k in keys}, (1,), column_types=types)


def test_lake_table_names_are_lower_case_identifiers():
    assert lake_table("SALES", "ORDER_LINES") == "sales_order_lines"
    assert lake_table(None, "orders") == "orders"
    assert lake_table("my-db", "Ünits 2") == "my_db__nits_2"


def test_entries_per_message_and_one_keys_entry_per_table():
    schema = TableSchema("qlik", "SALES", "CUSTOMERS", (("ID", "INT4"), ("NAME", "STRING")), ("ID",), 2)
    ddl = SchemaChange("dataworks", "shop", "orders", "ALTER", "ALTER TABLE orders ADD note")
    messages = [
        (0, 5, [schema]),
        (0, 6, [change("CUSTOMERS", ("ID",), {"ID": "INT4"})]),
        (0, 7, [ddl, change("CUSTOMERS", ("ID",), {"NAME": "STRING"})]),
        (1, 3, [change("ORDER_LINES", ("ORDER_ID", "LINE_NO"), {})]),
    ]
    entries = changelog_entries(messages)
    assert [(e.kind, e.table, e.partition, e.offset) for e in entries] == [
        (SCHEMA, "sales_customers", 0, 5), (DDL, "shop_orders", 0, 7),
        (KEYS, "sales_customers", 0, 7), (KEYS, "sales_order_lines", 1, 3)]
    assert entries[0].columns == (("ID", "INT4"), ("NAME", "STRING")) and entries[0].version == "2"
    assert entries[1].text == "ALTER: ALTER TABLE orders ADD note"
    # The keys entry keeps the latest key columns and every source type seen in the delta.
    assert entries[2].key_columns == ("ID",) and dict(entries[2].columns) == {"ID": "INT4", "NAME": "STRING"}
    assert entries[3].key_columns == ("ORDER_ID", "LINE_NO")
    assert sorted(changes_by_table(r for _, _, rs in messages for r in rs)) == ["sales_customers", "sales_order_lines"]

"""The seeds' own examples, verbatim (../shared/seeds/001_3ae3a3b592190e45.txt): one copy for every test"""

from __future__ import annotations

import datetime as dt

from resources.codecs.types import Column

# ---- the backup topic's key (Avro) and the example key record

SEED_KEY_SCHEMA = {
    "name": "topicA",
    "type": "record",
    "fields": [
        {"name": "incrementId", "type": "string"},
        {"name": "messageType", "type": "long"},
        {"name": "datamart", "type": "string"},
        {"name": "deltaNum", "type": "long"},
        {"name": "deltaDate", "type": "long", "logicalType": "timestamp-micros"},
        {"name": "tableName", "type": ["null", "string"]},
        {"name": "streamNumber", "type": "long"},
        {"name": "streamTotal", "type": "long"},
        {"name": "chunkNumber", "type": "long"},
        {"name": "isLastChunk", "type": "boolean"},
    ],
}
SEED_KEY_RECORD = {
    "incrementId": "f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
    "messageType": 0,
    "datamart": "marketing",
    "deltaNum": 55,
    "deltaDate": 1638360336000000,
    "tableName": "stores",
    "streamNumber": 1,
    "streamTotal": 2,
    "chunkNumber": 4,
    "isLastChunk": False,
}

# ---- the changelog: schema, DDL statements and records (note the extra ')' at the end of
# the sales table's statement)

SEED_CHANGELOG_SCHEMA = {
    "type": "record",
    "name": "changeLog",
    "fields": [
        {"name": "changeNum", "type": "long"},
        {"name": "entityName", "type": "string"},
        {"name": "changeQuery", "type": "string"},
    ],
}
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
SEED_CHANGELOG_RECORDS = [
    {"changeNum": 0, "entityName": "marketing", "changeQuery": SALES_DDL},
    {"changeNum": 1, "entityName": "stores_by_sold_products", "changeQuery": VIEW_DDL},
    {"changeNum": 2, "entityName": "stores_by_sold_products", "changeQuery": DROP_VIEW_DDL},
]

# The columns SALES_DDL declares.
SALES_COLUMNS = (
    Column("id", "int", nullable=False),
    Column("transaction_date", "timestamp", nullable=False),
    Column("product_code", "varchar", 256, nullable=False),
    Column("product_units", "int", nullable=False),
    Column("store_id", "int", nullable=False),
    Column("description", "varchar", 256),
)

# ---- table data: marketing.sales in the seed's `row` schema (TIMESTAMP as a plain long)

SEED_ROW_SCHEMA = {
    "type": "record",
    "name": "row",
    "fields": [
        {"name": "id", "type": ["null", "long"], "doc": ""},
        {"name": "transaction_date", "type": ["null", "long"], "doc": ""},
        {"name": "product_code", "type": ["null", "string"], "doc": ""},
        {"name": "product_units", "type": ["null", "long"], "doc": ""},
        {"name": "store_id", "type": ["null", "long"], "doc": ""},
        {"name": "description", "type": ["null", "string"], "doc": ""},
        {"name": "sys_op", "type": ["null", "int"], "doc": ""},
    ],
}
SEED_ROW_RECORDS = [
    {
        "id": 1000111,
        "transaction_date": 1614269474000000,
        "product_code": "ABC102101",
        "product_units": 2,
        "store_id": 1000012345,
        "description": "Покупка по акции 1+1",
        "sys_op": 0,
    },
    {
        "id": 1000112,
        "transaction_date": 1614334214000000,
        "product_code": "ABC102001",
        "product_units": 1,
        "store_id": 1000000123,
        "description": "Покупка без акций",
        "sys_op": 1,
    },
]
# The same rows as canonical Python values, by SALES_COLUMNS: the TIMESTAMP a naive UTC datetime.
SEED_ROWS_CANONICAL = [
    {"id": 1000111, "transaction_date": dt.datetime(2021, 2, 25, 16, 11, 14),
     "product_code": "ABC102101", "product_units": 2, "store_id": 1000012345,
     "description": "Покупка по акции 1+1", "sys_op": 0},
    {"id": 1000112, "transaction_date": dt.datetime(2021, 2, 26, 10, 10, 14),
     "product_code": "ABC102001", "product_units": 1, "store_id": 1000000123,
     "description": "Покупка без акций", "sys_op": 1},
]

# ---- every Prostore type: sourcedb.table1_adqm

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

"""The emulated datamarts' DDL: the seeds' own examples, plus later schema changes (opt-in column changes too).

Each entry is (entityName, entityDefinition of DATAMART_SCHEMA_CHANGED, changeQuery).
The marketing.sales statement is the seed's verbatim, unbalanced parentheses and all, so the
DDL parser meets it exactly as Prostore's changelog ships it.
"""

DATAMART_DDL: dict[str, list[tuple[str, str, str]]] = {
    "marketing": [
        ("sales", "TABLE.DEFAULT",
         "CREATE TABLE marketing.sales (id INT NOT NULL, transaction_date TIMESTAMP NOT NULL, "
         "product_code VARCHAR(256) NOT NULL, product_units INT NOT NULL, store_id INT NOT NULL, "
         "description VARCHAR(256), PRIMARY KEY (id)) DISTRIBUTED BY (id))"),
        ("stores", "TABLE.DEFAULT",
         "CREATE TABLE marketing.stores (id BIGINT NOT NULL, name VARCHAR(100) NOT NULL, city VARCHAR, "
         "opened DATE, region_code CHAR(3), PRIMARY KEY (id)) DISTRIBUTED BY (id) DATASOURCE_TYPE (adb, adqm)"),
        ("stores_by_sold_products", "VIEW.DEFAULT",
         "CREATE VIEW marketing.stores_by_sold_products AS SELECT store_id, SUM(product_units) AS product_amount "
         "FROM marketing.sales GROUP BY store_id ORDER BY product_amount DESC LIMIT 20"),
    ],
    "sourcedb": [
        ("table1_adqm", "TABLE.DEFAULT",
         """CREATE TABLE sourcedb.table1_adqm
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
DATASOURCE_TYPE ('adqm');"""),
    ],
}

# Run before delta `EmulatorConfig.ddl_at_delta`: a new table (composite key), a view, a dropped view.
LATER_DDL: dict[str, list[tuple[str, str, str]]] = {
    "marketing": [
        ("returns", "TABLE.DEFAULT",
         "CREATE TABLE marketing.returns (id BIGINT NOT NULL, sale_id BIGINT NOT NULL, returned_at TIMESTAMP, "
         "reason VARCHAR, PRIMARY KEY (id, sale_id)) DISTRIBUTED BY (id)"),
        ("returns_by_store", "VIEW.DEFAULT",
         "CREATE VIEW marketing.returns_by_store AS SELECT s.store_id, COUNT(*) AS returned "
         "FROM marketing.returns r JOIN marketing.sales s ON r.sale_id = s.id GROUP BY s.store_id"),
        ("stores_by_sold_products", "VIEW.DEFAULT", "DROP VIEW marketing.stores_by_sold_products"),
    ],
    "sourcedb": [
        ("table2_adqm", "TABLE.DEFAULT",
         "CREATE TABLE sourcedb.table2_adqm (id bigint not null, note varchar, at_time time, "
         "PRIMARY KEY (id)) DISTRIBUTED BY (id) DATASOURCE_TYPE ('adqm')"),
    ],
}

# Opt-in (`EmulatorConfig.column_changes_at_delta` = N): column changes of one table, run before
# delta N + offset. {datamart: {offset: [(entityName, entityDefinition, changeQuery)]}}.
# A column is added; two deltas later another is renamed and a third dropped (neither is a key).
COLUMN_DDL: dict[str, dict[int, list[tuple[str, str, str]]]] = {
    "marketing": {
        0: [("stores", "TABLE.DEFAULT", "ALTER TABLE marketing.stores ADD COLUMN manager VARCHAR")],
        2: [("stores", "TABLE.DEFAULT", "ALTER TABLE marketing.stores RENAME COLUMN city TO town"),
            ("stores", "TABLE.DEFAULT", "ALTER TABLE marketing.stores DROP COLUMN region_code")],
    },
}

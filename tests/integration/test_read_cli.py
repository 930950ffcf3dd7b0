"""`deltaport read` of every column type of every format, in both output formats (issue 31).

A lake of its own (catalog `readcli`) holds a Prostore datamart `typed` whose table has a column of
every Prostore type, landed as the platform lands a delta (changelog, increment, snapshot), and one
change-stream source per format (Qlik, DataWorks, Datastream) whose table has a column of every lake
type that format lands: each column named by the format's own type name (Qlik NUMERIC(38,10) and
BYTES, DataWorks BYTES and DATE, Datastream decimal(10,2) and bytes, ...), so `infer_columns` gives it
the Spark type the platform gives it, with the values that format's decoder yields. Two deltas of the
datamart and of Qlik, one of the others.

`deltaport read` (the CLI's own `main`) prints every table in jsonl and csv; the output, parsed back,
equals the lake's rows as the library reads them (`rows_as_of`, `cdc_rows_as_of`), value for value:
decimals as JSON numbers with their exact digits (`12.50`, 28 digits before the point) and as the
same text in CSV, binary as lower-case hex in both. Without `--as-of-delta` the read is of the last
delta landed, named on stderr in a `#` comment line (run as a user runs it, a subprocess).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from platform_assets.cli import main
from resources.codecs.backup import ChangelogRecord
from resources.codecs.cdc import UPSERT, Change
from resources.lake.cdc import (
    apply_cdc_through,
    cdc_rows_as_of,
    changes_frame,
    increment_columns,
    infer_columns,
    land_cdc_increment,
)
from resources.lake.layout import LakeLayout
from resources.lake.prostore import land_changelog, land_increment
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of
from resources.spark.kafka_reader import output_spark_schema
from resources.spark.session import CatalogConfig, connect

pytestmark = pytest.mark.integration

CATALOG = "readcli"
LAYOUT = LakeLayout(CATALOG)
DM = "typed"
DDL = ("CREATE TABLE typed.every (id BIGINT NOT NULL, i INT, i32 INT32, flag BOOLEAN, f FLOAT, d DOUBLE, "
       "c CHAR(5), v VARCHAR(40), l LINK, u UUID, day DATE, tod TIME, at TIMESTAMP, PRIMARY KEY (id)) "
       "DISTRIBUTED BY (id)")
TEXT = 'Zürich, 東京 "q" \'s\'\nline'  # a comma, quotes and a newline: CSV must quote it
AT = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)

# Per change-stream format: the source's type name of each column and two deltas of rows. Values are
# what that format's decoder yields (Qlik NUMERIC a Decimal, DataWorks DATE a datetime, BYTES bytes).
STREAMS = {
    "qlik": ({"ID": "INT4", "QTY": "INT8", "PRICE": "REAL8", "PAID": "BOOLEAN", "DAY": "DATE", "TOD": "TIME",
              "UPDATED": "DATETIME", "NAME": "WSTRING", "BLOB": "BYTES", "BALANCE": "NUMERIC(12,2)",
              "BIG": "NUMERIC(38,10)"},
             [[{"ID": 1, "QTY": -(2**62), "PRICE": 0.1, "PAID": True, "DAY": dt.date(1999, 12, 31),
                "TOD": dt.time(13, 10, 30, 5), "UPDATED": AT, "NAME": TEXT, "BLOB": b"\x00\x01\xfe\xff",
                "BALANCE": Decimal("12.50"), "BIG": Decimal("1234567890123456789012345678.0123456789")},
               {"ID": 2, "QTY": None, "PRICE": None, "PAID": None, "DAY": None, "TOD": None, "UPDATED": None,
                "NAME": None, "BLOB": None, "BALANCE": None, "BIG": None}],
              [{"ID": 3, "QTY": 0, "PRICE": -2.5e-300, "PAID": False, "DAY": dt.date(1970, 1, 1),
                "TOD": dt.time(0, 0), "UPDATED": dt.datetime(1970, 1, 1), "NAME": "x", "BLOB": bytes(range(256)),
                "BALANCE": Decimal("-0.05"), "BIG": Decimal("0E-10")}]]),
    "dataworks": ({"id": "LONG", "amount": "DOUBLE", "paid": "BOOLEAN", "created": "DATE", "receipt": "BYTES",
                   "note": "STRING"},
                  [[{"id": 1, "amount": 1e16 + 2, "paid": True, "created": AT.replace(microsecond=123000),
                     "receipt": b"\x00\x01", "note": TEXT},
                    {"id": 2, "amount": None, "paid": None, "created": None, "receipt": None, "note": None},
                    {"id": 3, "amount": -0.0, "paid": False, "created": dt.datetime(2000, 1, 1), "receipt": b"\xff",
                     "note": "y"}]]),
    "datastream": ({"id": "long", "n": "int", "ratio": "double", "ok": "boolean", "name": "string", "raw": "bytes",
                    "day": "date", "at": "timestamp-micros", "tod": "time-micros", "price": "decimal(10,2)",
                    "ref": "uuid"},
                   [[{"id": 1, "n": 7, "ratio": 1 / 3, "ok": True, "name": TEXT, "raw": b"\xde\xad\xbe\xef",
                      "day": dt.date(2024, 2, 29), "at": AT, "tod": dt.time(23, 59, 59, 999999),
                      "price": Decimal("99999999.99"), "ref": "0b5f3c1e-4a7d-4c1b-9e2f-123456789abc"},
                     {"id": 2, "n": None, "ratio": None, "ok": None, "name": None, "raw": None, "day": None,
                      "at": None, "tod": None, "price": None, "ref": None},
                     {"id": 3, "n": -1, "ratio": 1e300, "ok": False, "name": "z", "raw": b"\x00",
                      "day": dt.date(1, 1, 1), "at": dt.datetime(2038, 1, 19, 3, 14, 8), "tod": dt.time(0, 0, 0, 1),
                      "price": Decimal("0.10"), "ref": "ffffffff-ffff-ffff-ffff-ffffffffffff"}]]),
}
KEY = {"qlik": ("ID",), "dataworks": ("id",), "datastream": ("id",)}


def _land_datamart(spark) -> None:
    log = [ChangelogRecord(0, "every", DDL)]
    rows = [
        [{"id": 1, "i": -(2**63), "i32": 2**31 - 1, "flag": True, "f": 1.1, "d": 0.1, "c": "abcde", "v": TEXT,
          "l": "link://x", "u": "0b5f3c1e-4a7d-4c1b-9e2f-123456789abc", "day": dt.date(1999, 12, 31),
          "tod": 13 * 3_600_000_000 + 5, "at": AT},
         {"id": 2}],
        [{"id": 3, "i": 0, "i32": -1, "flag": False, "f": -0.0, "d": 1e-300, "c": "a", "v": "x", "l": "l",
          "u": "ffffffff-ffff-ffff-ffff-ffffffffffff", "day": dt.date(1970, 1, 1), "tod": 0,
          "at": dt.datetime(1970, 1, 1)}],
    ]
    for n, changes in enumerate(rows):
        entities = land_changelog(spark, LAYOUT, DM, n, f"inc-{n}", log)
        columns = entities["every"].columns
        data = [tuple(c.get(col.name) for col in columns) + (0, 0, i) for i, c in enumerate(changes)]
        frames = {"every": spark.createDataFrame(data, output_spark_schema(columns))}
        land_increment(spark, LAYOUT, DM, n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, frames)
        apply_snapshots(spark, LAYOUT, DM, n)


def _land_stream(spark, fmt: str) -> None:
    types, deltas = STREAMS[fmt]
    source, order = f"typed_{fmt}", 0
    for n, rows in enumerate(deltas):
        changes = []
        for row in rows:
            order += 1
            changes.append(Change(fmt, None, "every", UPSERT, KEY[fmt], row, (order,), column_types=types))
        columns = infer_columns(changes, increment_columns(spark, LAYOUT, source, "every"))
        land_cdc_increment(spark, LAYOUT, source, n, {"every": changes_frame(spark, changes, columns)})
        apply_cdc_through(spark, LAYOUT, source, n, {"every": KEY[fmt]})


@pytest.fixture(scope="module")
def lake(spark_remote, tmp_path_factory):
    """(session, config file) of a lake holding the typed datamart and one source per stream format."""
    root = tmp_path_factory.mktemp("readcli")
    config = root / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": "s", "backup_topic": "b"},
                    *({"name": f"typed_{fmt}", "format": fmt, "topic": fmt} for fmt in STREAMS)],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `read` reads the lake only
        "lake": {"catalog": CATALOG, "type": "hadoop", "warehouse": str(root / "lake")},
        "state_dir": str(root / "state"),
    }))
    spark = connect(spark_remote, CatalogConfig(name=CATALOG, warehouse=str(root / "lake")))
    _land_datamart(spark)
    for fmt in STREAMS:
        _land_stream(spark, fmt)
    return spark, config


def _read(capsys, config: Path, table: str, fmt: str, *more: str) -> str:
    code = main(["read", table, "--format", fmt, "--config", str(config), *more])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    return out.out


def _back(text, like):
    """A value as `read` printed it (a JSON value, or a CSV field's text), parsed back by the
    documented rules into the Python type the lake's own read gives (`like`)."""
    if isinstance(like, bool):
        return text if isinstance(text, bool) else {"true": True, "false": False}[text]
    if isinstance(like, bytes):
        assert text == text.lower(), "binary is lower-case hex"
        return bytes.fromhex(text)
    if isinstance(like, Decimal):
        return Decimal(str(text))  # a JSON number read with parse_float=Decimal, or CSV text
    if isinstance(like, dt.datetime):
        assert text.endswith("Z") and len(text) == 27, text
        return dt.datetime.fromisoformat(text[:-1])
    if isinstance(like, dt.time):
        return dt.time.fromisoformat(text)
    if isinstance(like, dt.date):
        return dt.date.fromisoformat(text)
    if isinstance(like, float):
        return float(text)
    if isinstance(like, int):
        return int(text)
    return text


def _same(got: dict, want: dict) -> bool:
    # Decimals compare by their digits too: 12.50 is not 12.5 here.
    return got.keys() == want.keys() and all(
        g == w and (not isinstance(w, Decimal) or str(g) == str(w)) and type(g) is type(w) for g, w in
        ((got[k], want[k]) for k in want))


def _lake_rows(spark, source: str) -> tuple[int, list[dict]]:
    """(the source's last delta, the table's rows as of it, as the library reads them)."""
    if source == DM:
        return 1, rows_as_of(spark, LAYOUT, DM, "every", 1)
    last = len(STREAMS[source.removeprefix("typed_")][1]) - 1
    return last, cdc_rows_as_of(spark, LAYOUT, source, "every", last)


@pytest.mark.parametrize("source", [DM, *(f"typed_{fmt}" for fmt in STREAMS)])
def test_every_column_type_reads_back_exactly_in_jsonl_and_csv(lake, capsys, source):
    spark, config = lake
    last, want = _lake_rows(spark, source)
    key = next(iter(want[0]))
    assert [r[key] for r in want] == [1, 2, 3]
    likes = {c: next((r[c] for r in want if r[c] is not None), None) for c in want[0]}

    lines = _read(capsys, config, f"{source}.every", "jsonl", "--as-of-delta", str(last)).splitlines()
    assert all(json.loads(line) for line in lines)  # standard JSON, whatever the reader
    parsed = [json.loads(line, parse_float=Decimal) for line in lines]
    got = [{c: None if v is None else _back(v, likes[c]) for c, v in row.items()} for row in parsed]
    got = sorted(got, key=lambda r: r[key])
    want = sorted(want, key=lambda r: r[key])
    assert all(_same(g, w) for g, w in zip(got, want)) and len(got) == len(want), (got, want)
    for row in parsed:  # decimals are JSON numbers with the lake's digits, never strings
        assert all(not isinstance(v, str) for c, v in row.items() if isinstance(likes[c], Decimal))

    text = _read(capsys, config, f"{source}.every", "csv", "--as-of-delta", str(last))
    records = list(csv.reader(io.StringIO(text)))
    assert records[0] == list(want[0])
    got = [{c: None if v == "" else _back(v, likes[c]) for c, v in zip(records[0], r)} for r in records[1:]]
    got = sorted(got, key=lambda r: r[key])
    assert all(_same(g, w) for g, w in zip(got, want)) and len(got) == len(want), (got, want)
    assert not any(field.startswith(("b'", 'b"', "bytearray(")) for r in records for field in r)


def test_the_exact_text_of_decimals_and_binary(lake, capsys):
    """The documented encodings, literally: JSON numbers with the column's scale, lower-case hex."""
    _, config = lake
    line = _read(capsys, config, "typed_qlik.every", "jsonl", "--as-of-delta", "0").splitlines()[0]
    assert '"BALANCE": 12.50' in line and '"BIG": 1234567890123456789012345678.0123456789' in line
    assert '"BLOB": "0001feff"' in line
    text = _read(capsys, config, "typed_qlik.every", "csv", "--as-of-delta", "1")
    assert ",-0.05," in text and ",0E-10" not in text and ",0.0000000000" in text
    assert "," + bytes(range(256)).hex() + "," in text


def test_read_without_as_of_delta_reads_the_last_landed_delta_and_says_which(lake, capsys):
    _, config = lake
    env = {k: v for k, v in os.environ.items() if k not in ("DELTAPORT_CONFIG", "DAGSTER_HOME")}
    for source in (DM, "typed_qlik"):  # as a newcomer types it
        res = subprocess.run([sys.executable, "-m", "platform_assets.cli", "read", f"{source}.every",
                              "--config", str(config)], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        comments = [line for line in res.stderr.splitlines() if line.startswith("# ")]
        assert len(comments) == 1 and f"{source}.every as of delta 1," in comments[0], res.stderr
        assert res.stdout == _read(capsys, config, f"{source}.every", "jsonl", "--as-of-delta", "1")
        assert len(res.stdout.splitlines()) == 3  # rows 1 and 2 of delta 0, row 3 of delta 1
    # An older delta still reads as it was, and no comment then: the user said which.
    assert main(["read", f"{DM}.every", "--as-of-delta", "0", "--config", str(config)]) == 0
    out = capsys.readouterr()
    assert [json.loads(line)["id"] for line in out.out.splitlines()] == [1, 2] and "#" not in out.err
    # A table nothing has landed in: a clear error, not a stack trace.
    assert main(["read", f"{DM}.nowhere", "--config", str(config)]) == 2
    assert "no delta of typed.nowhere has landed yet" in capsys.readouterr().err


@pytest.mark.parametrize("source", [DM, *(f"typed_{fmt}" for fmt in STREAMS)])
def test_the_pyiceberg_engine_prints_what_the_spark_engine_prints(lake, capsys, source):
    """`--engine pyiceberg` (no JVM: resources/lake/pyiceberg_rows.py) on every type of every format."""
    _, config = lake
    last = 1 if source == DM else len(STREAMS[source.removeprefix("typed_")][1]) - 1
    for fmt in ("jsonl", "csv"):
        for delta in range(last + 1):
            args = (f"{source}.every", fmt, "--as-of-delta", str(delta))
            spark_out = _read(capsys, config, *args)
            assert _read(capsys, config, *args, "--engine", "pyiceberg") == spark_out and spark_out



def test_a_read_as_of_delta_n_reads_the_changelog_of_n_only(spark_remote, tmp_path, capsys):
    """The schema of a read as of delta N comes from delta N's changelog partition, not from every
    delta's (the changelog table grows a partition per delta: 20,000 at issue 30's age). Proof: the
    files of the older deltas' changelog partitions are gone from disk, and the read still works."""
    import pyarrow as pa

    dm, ddl = "aging", "CREATE TABLE aging.t (id BIGINT NOT NULL, v VARCHAR(9), PRIMARY KEY (id)) DISTRIBUTED BY (id)"
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": dm, "format": "prostore", "signal_topic": "s", "backup_topic": "b"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"}, "state_dir": str(tmp_path / "state"),
        "lake": {"catalog": CATALOG, "type": "hadoop", "warehouse": str(tmp_path / "lake")}}))
    spark = connect(spark_remote, CatalogConfig(name=CATALOG, warehouse=str(tmp_path / "lake")))
    for n in range(3):
        entities = land_changelog(spark, LAYOUT, dm, n, f"inc-{n}", [ChangelogRecord(0, "t", ddl)])
        rows = pa.table({"id": pa.array([n], pa.int64()), "v": [f"v{n}"], "sys_op": pa.array([0], pa.int32()),
                         "_kafka_partition": pa.array([0], pa.int32()), "_kafka_offset": pa.array([n], pa.int64())})
        land_increment(spark, LAYOUT, dm, n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, {"t": rows})
        apply_snapshots(spark, LAYOUT, dm, n)
    old = [Path(r.file_path.removeprefix("file:")) for r in spark.sql(
        f"SELECT file_path FROM {LAYOUT.meta(dm, 'changelog')}.files WHERE partition.delta_num < 2").collect()]
    assert len(old) == 2
    for path in old:
        path.unlink()
    lines = _read(capsys, config, f"{dm}.t", "jsonl", "--as-of-delta", "2").splitlines()
    assert [json.loads(line) for line in lines] == [{"id": n, "v": f"v{n}"} for n in range(3)]


@pytest.mark.parametrize("source", [DM, "typed_qlik"])
def test_a_read_of_the_current_state_reads_the_last_delta_once(lake, capsys, source):
    """Which delta is current is read once (it names the delta on stderr); the state as of it is
    then the table as it is, with no second read of the table's commits nor of its history's
    start: each is a Spark job, 0.1-0.5 s of a warm read. Counted, not timed."""
    from bench.round_trips import counting_round_trips

    _, config = lake
    with counting_round_trips() as trips:
        text = _read(capsys, config, f"{source}.every", "jsonl")
    assert text == _read(capsys, config, f"{source}.every", "jsonl", "--as-of-delta", "1")
    sites = {site: calls for site, (calls, _) in trips.sites.items()}
    assert sum(n for s, n in sites.items() if s.startswith("execute ") and s.endswith(" last_applied_deltas")) == 1, sites
    assert not any(s.endswith(" history_start") for s in sites), sites


# --- `deltaport sql` prints what `read` prints (issue 56) ------------------------------------------

def _sql(capsys, config: Path, query: str, fmt: str, engine: str) -> str:
    code = main(["sql", query, "--format", fmt, "--engine", engine, "--config", str(config)])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    return out.out


def _records(text: str, fmt: str) -> tuple[list, list]:
    """(header, rows sorted) of jsonl or csv text: the rows' order is the query's, not read's."""
    if fmt == "jsonl":
        rows = [json.loads(line, parse_float=Decimal) for line in text.splitlines()]
        return [list(rows[0]) if rows else []], sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    records = list(csv.reader(io.StringIO(text, newline="")))
    return records[0], sorted(records[1:])


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
@pytest.mark.parametrize("source", [DM, *(f"typed_{fmt}" for fmt in STREAMS)])
def test_sql_prints_every_type_as_read_prints_it(lake, capsys, source, engine):
    """Every Prostore type (TIME, DATE, TIMESTAMP among them) and every stream format's types
    (DECIMAL, BYTES), through `sql` on both engines, in both formats: the text `read` prints."""
    _, config = lake
    for fmt in ("jsonl", "csv"):
        want = _read(capsys, config, f"{source}.every", fmt)
        got = _sql(capsys, config, f"SELECT * FROM {source}.every", fmt, engine)
        assert _records(got, fmt) == _records(want, fmt) and len(_records(want, fmt)[1]) == 3


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_sql_compares_and_aggregates_times_dates_timestamps_decimals_as_prostore(lake, capsys, engine):
    """TIME is kept as microseconds in the lake; a query sees a TIME: WHERE on a time literal,
    MIN/MAX, printed as read prints a time. DATE, TIMESTAMP, DECIMAL alike."""
    _, config = lake

    def rows(query: str) -> list[dict]:
        return [json.loads(line, parse_float=Decimal) for line in _sql(capsys, config, query, "jsonl", engine).splitlines()]

    assert rows(f"SELECT id, tod FROM {DM}.every WHERE tod > '12:00:00'") == [{"id": 1, "tod": "13:00:00.000005"}]
    assert rows(f"SELECT id FROM {DM}.every WHERE tod = '00:00:00' ORDER BY id") == [{"id": 3}]
    assert rows(f"SELECT MIN(tod) AS lo, MAX(tod) AS hi, COUNT(tod) AS n FROM {DM}.every") == [
        {"lo": "00:00:00.000000", "hi": "13:00:00.000005", "n": 2}]
    assert rows(f"SELECT id FROM {DM}.every WHERE day > '1980-01-01' AND at >= '2024-02-29 23:59:58'") == [
        {"id": 1}]
    assert rows(f"SELECT MAX(at) AS latest, MIN(day) AS first FROM {DM}.every") == [
        {"latest": "2024-02-29T23:59:58.123456Z", "first": "1970-01-01"}]
    assert rows("SELECT ID FROM typed_qlik.every WHERE BALANCE > 0 AND BIG > 1000 ORDER BY ID") == [{"ID": 1}]
    assert rows("SELECT SUM(BALANCE) AS total FROM typed_qlik.every") == [{"total": Decimal("12.45")}]


# Each run in one fresh process (the CLI's own), its stdout and stderr taken at the descriptors:
# what a user's terminal gets, pyspark's loggers included.
_ONE_PROCESS = """
import json, os, sys, tempfile
from platform_assets.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            code = main(argv)
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        out.seek(0); err.seek(0)
        results.append([code, out.read().decode(), err.read().decode()])
print(json.dumps(results))
"""


def test_every_refusal_and_error_of_sql_and_read_is_one_line_on_both_engines(lake):
    _, config = lake
    refused = [
        f"SELECT sys_from FROM {DM}.every FOR SYSTEM_TIME STARTED IN (0, 1)",  # Prostore returns no sys_*
        f"SELECT nope FROM {DM}.every",
        f"SELECT tod FROM {DM}.every WHERE tod > 'not a time'",
        f"SELECT * FROM {DM}.nowhere",
        f"SELECT * FROM {DM}.every FOR SYSTEM_TIME AS OF DELTA_NUM 99",
        f"SELECT * FROM {DM}.every FOR SYSTEM_TIME AS OF LATEST_UNCOMMITTED_DELTA",
        "SELEC id FROM typed.every",
        "SELECT ID FROM typed_qlik.every FOR SYSTEM_TIME STARTED IN (1, 0)",
    ]
    runs = [["sql", q, "--engine", engine, "--config", str(config)] for engine in ("duckdb", "spark") for q in refused]
    runs += [["read", table, *more, "--engine", engine, "--config", str(config)] for engine in ("spark", "pyiceberg")
             for table, more in ((f"{DM}.nowhere", ()), (f"{DM}.every", ("--as-of-delta", "99")),
                                 ("nodm.every", ()))]
    env = {k: v for k, v in os.environ.items() if k not in ("DELTAPORT_CONFIG", "DAGSTER_HOME")}
    res = subprocess.run([sys.executable, "-c", _ONE_PROCESS, json.dumps(runs)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    for argv, (code, out, err) in zip(runs, json.loads(res.stdout)):
        lines = err.splitlines()
        assert code == 2 and out == "", (argv, code, out[-500:], err[-2000:])
        assert len(lines) == 1 and lines[0].startswith(f"deltaport {argv[0]}: error: "), (argv, err[-3000:])

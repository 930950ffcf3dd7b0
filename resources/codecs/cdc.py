"""The normalized change: what every non-Prostore CDC decoder (Qlik, DataWorks, Datastream) yields.

A decoder turns one Kafka message (key, value bytes) into a list of `Record`s:
- `Change`: one row change of one table, in the source's own total order (`order_key`);
- `Heartbeat`: a watermark (DataWorks MHEARTBEAT): the source has progressed to `event_time_us`;
- `TableSchema`: the structure of a table as the source declares it (Qlik metadata message,
  DataWorks schema/DDL): columns with source types, key columns, a version;
- `SchemaChange`: a DDL event (DataWorks CREATE/ALTER/..., kept as text for the changelog);
- `TransactionMark`: a transaction boundary with no row (DataWorks TRANSACTION_BEGIN/END).

Rules every decoder keeps (from ../shared/spec/other-cdc-formats.md): what a format lacks stays
None, nothing is invented; `values` hold typed Python values (int, float, bool, str, bytes,
datetime.date, naive UTC datetime.datetime, ...); `captured` says which columns the message
really carries values for (Qlik's columnMask): a column not captured must never overwrite a
stored value, None means "every column in `values` is authoritative"; a DELETE carries at least
the key columns; `order_key` is a tuple comparable within one source (and one table where the
format only orders per table) and is the only order the lake may use.
Pure: no Dagster, no Kafka client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UPSERT, DELETE, BEFORE_IMAGE = "upsert", "delete", "before_image"


@dataclass(frozen=True)
class Change:
    source: str  # "qlik" | "dataworks" | "datastream"
    namespace: str | None  # database / schema
    table: str
    operation: str  # UPSERT | DELETE | BEFORE_IMAGE (an update's old row: never applied)
    key_columns: tuple[str, ...]
    values: dict[str, Any]
    order_key: tuple  # total order inside the source
    captured: frozenset[str] | None = None  # None: every column in values is authoritative
    column_types: dict[str, str] = field(default_factory=dict)  # source type names
    transaction_id: str | None = None
    last_in_transaction: bool | None = None
    event_time_us: int | None = None
    event_id: str | None = None  # de-duplication id (Datastream uuid; else derived from the order key)
    is_backfill: bool = False  # full-load / backfill row (Qlik REFRESH, Datastream *-backfill-*)
    source_op: str | None = None  # the format's own operation code, for audit


@dataclass(frozen=True)
class Heartbeat:
    source: str
    event_time_us: int
    order_key: tuple | None = None


@dataclass(frozen=True)
class TableSchema:
    source: str
    namespace: str | None
    table: str
    columns: tuple[tuple[str, str], ...]  # (name, source type) in ordinal order
    key_columns: tuple[str, ...]
    version: int | str | None = None
    raw: dict | None = None  # the format's own description (Qlik dataSchema, ...)


@dataclass(frozen=True)
class SchemaChange:
    source: str
    namespace: str | None
    table: str | None
    kind: str  # the format's op: CREATE, ALTER, ERASE, RENAME, TRUNCATE, ...
    text: str | None
    order_key: tuple | None = None
    event_time_us: int | None = None


@dataclass(frozen=True)
class TransactionMark:
    source: str
    transaction_id: str | None
    kind: str  # "begin" | "end" | "rollback" (never a commit point)
    order_key: tuple | None = None
    event_time_us: int | None = None


Record = Change | Heartbeat | TableSchema | SchemaChange | TransactionMark

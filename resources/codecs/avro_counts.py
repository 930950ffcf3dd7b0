"""Counts an Avro message carries, held to the bytes that back them.

An Avro container's blocks and an array's blocks each begin with a count the writer claims. A
reader that trusts it allocates or loops by it: polars reserves room for a block's records
(a 119-byte value claiming 10^12 records asked for 8 TB and aborted the process), and fastavro
yields a zero-byte record, or appends a zero-byte array item, once per claimed element (a record
of no fields claimed 10^12 times: days of CPU; an array of nulls: all the memory there is).
Every record and item takes at least one byte when its type does, so two rules make a count cost
what its bytes cost:
- `zero_size_repeat(schema)`: a writer schema whose container records or array items can be
  encoded in zero bytes is refused before any record is read (`check_counts`, `open_container`:
  no Prostore, Qlik or Datastream message needs one: a row has `sys_op`, a Qlik or Datastream
  record named fields of data);
- `block_holds(codec, data, count)`: a block may claim no more records than its uncompressed
  bytes (read from a snappy block's header, counted while inflating a deflate block in 1 MiB
  steps, never held whole).
Pure: no Dagster, no Kafka. `UnboundedCounts` is a ValueError, which every codec already
translates into its own typed error for unreadable Avro.
"""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import fastavro

_ONE_BYTE_AT_LEAST = frozenset({"boolean", "int", "long", "float", "double", "bytes", "string"})
_STEP = 1 << 20  # bytes inflated at a time while counting a deflate block


class UnboundedCounts(ValueError):
    """A writer schema lets records or array items take zero bytes: nothing bounds their counts."""


def open_container(data: bytes) -> Any:
    """A fastavro reader over container `data`, its header read and its writer schema checked
    (`check_counts`). fastavro's own errors on bad bytes pass through."""
    reader = fastavro.reader(io.BytesIO(data))
    check_counts(json.loads(reader.metadata["avro.schema"]))
    return reader


def check_counts(schema: Any) -> None:
    """Raise UnboundedCounts when `zero_size_repeat(schema)` finds a zero-byte repeated element."""
    zero = zero_size_repeat(schema)
    if zero:
        raise UnboundedCounts(f"writer schema lets {zero} take zero bytes")


def zero_size_repeat(schema: Any) -> str | None:
    """Where `schema` (parsed JSON of a container's record type, or any Avro type) lets a
    repeated element take zero bytes: "the records" or "array <path>"; None when it cannot."""
    named: dict[str, Any] = {}
    found: list[str] = []
    if _min_bytes(schema, named, "", found) == 0:
        return "the records"
    return f"array {found[0]}" if found else None


def _min_bytes(t: Any, named: dict[str, Any], path: str, found: list[str], space: str = "") -> int:
    """The fewest bytes a value of type `t` takes; arrays of zero-byte items go to `found`.
    `space`: the enclosing namespace, which named types without their own inherit."""
    if isinstance(t, list):  # a union writes its branch index: one byte at least
        for branch in t:
            _min_bytes(branch, named, path, found, space)
        return 1
    if isinstance(t, str):
        if t == "null":
            return 0
        if t in _ONE_BYTE_AT_LEAST:
            return 1
        # A named type used again (recursion included) is sized as it was defined; unknown: 1.
        return named.get(t, named.get(f"{space}.{t}", 1))
    if not isinstance(t, dict):
        return 1
    kind = t.get("type")
    names, inner = _names(t, space)
    if kind in ("record", "error"):
        named.update(dict.fromkeys(names, 1))  # while its fields are sized: a recursive reference is not zero
        size = sum(_min_bytes(f.get("type"), named, f"{path}.{f.get('name')}", found, inner)
                   for f in t.get("fields", []) if isinstance(f, dict))
        named.update(dict.fromkeys(names, size))
        return size
    if kind == "array":
        if _min_bytes(t.get("items"), named, f"{path}[]", found, space) == 0:
            found.append(path or "(top)")
        return 1  # its closing count
    if kind == "map":
        _min_bytes(t.get("values"), named, f"{path}{{}}", found, space)
        return 1  # entries carry a string key: one byte at least
    if kind == "fixed":
        size = t.get("size") if isinstance(t.get("size"), int) else 1
        named.update(dict.fromkeys(names, size))
        return size
    if kind == "enum":
        named.update(dict.fromkeys(names, 1))
        return 1
    return _min_bytes(kind, named, path, found, space)  # {"type": "long", "logicalType": ...}


def _names(t: dict, space: str) -> tuple[list[str], str]:
    """A named type's names (bare and full: a later reference may use either) and its namespace."""
    name = t.get("name")
    if not isinstance(name, str):
        return [], space
    if "." in name:
        return [name, name.rsplit(".", 1)[1]], name.rsplit(".", 1)[0]
    own = t.get("namespace") if isinstance(t.get("namespace"), str) else space
    return ([name, f"{own}.{name}"] if own else [name]), own


def block_holds(codec: str, data: memoryview | bytes, count: int) -> bool:
    """Whether a block whose stored bytes are `data` can hold `count` records of one byte or
    more: `count` <= its uncompressed size. Unknown codecs: True (their reader decides)."""
    if count <= len(data):
        return True
    if codec == "snappy":  # the raw snappy stream starts with the uncompressed length (a varint)
        length = shift = 0
        for byte in bytes(data[:10]):
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return count <= length
            shift += 7
        return False
    if codec == "deflate":
        inflater, rest, total = zlib.decompressobj(-15), bytes(data), 0
        try:
            while total < count:
                out = inflater.decompress(rest, _STEP)
                total += len(out)
                rest = inflater.unconsumed_tail
                if len(out) < _STEP and not rest:
                    break
        except zlib.error:
            return True  # corrupt: the reader's own error says so
        return total >= count
    return codec != "null"

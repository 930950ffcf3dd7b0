"""`deltaport read`'s text made from Arrow columns: the bytes `read_format.py` makes value by value
(jsonl lines, CSV records of Python's `csv` module), made a column at a time.

In: a `pyarrow.Table` of the canonical lake types (what both read engines return: TIME as
time64[us], timestamps naive UTC or zoned, decimals with their scale, binary, strings, numbers,
booleans; a column of nulls as Arrow's null type). Out: UTF-8 bytes, written batch by batch to a
binary stream, so a big table's text is never held whole (only the batches being formatted, two
at a time on two threads, and the one being written), and no Python object is made per row.

What it guarantees: the output is byte for byte what `read_format.jsonl_line` and `csv.writer`
over `read_format.csv_value` give for the same rows (tests/unit/test_arrow_format.py compares
them on every type and its edge values). Per type:
- integers, booleans, dates, times, timestamps, and decimals without an exponent: Arrow's casts
  and `strftime` give Python's text already (`str`, ISO 8601 with microseconds, `format(d, "f")`);
  the few decimals Arrow writes with an exponent (0E-10) are rewritten by Python's `Decimal`;
- floats: Python's own `repr` (shortest round trip, `1.0`, `1e-300`, and JSON's Infinity/NaN):
  Arrow's shortest digits where both write them plainly, `.0` added (`_float_text`);
- strings: JSON-quoted by Arrow when they hold nothing to escape, by `json`'s own encoder when
  they do; in CSV quoted (quotes doubled) when they hold a comma, a quote, CR or LF, as `csv`
  quotes them, and a record of one empty field is `""`, as `csv` writes it;
- binary as lower-case hex (Python's `bytes.hex`);
- any other Arrow type is a `DeltaportError` naming its column.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from json.encoder import encode_basestring

from resources.errors import DeltaportError

BATCH_ROWS = 32_768  # rows formatted at a time: the text of a few batches is all that is held
THREADS = 2  # batches formatted at once (the machine's cores, at least 2: `_in_order`)
_CSV_SPECIAL = b',"\r\n'  # csv quotes a field holding one (its delimiter, quote, line end)
_JSON_SPECIAL = b'"\\' + bytes(range(0x20))  # what `json` escapes in a string


def write_jsonl(table, out) -> None:
    """Every row of `table` as a JSON object on one line (`read_format.jsonl_line`'s text)."""
    import pyarrow as pa

    keys = [json.dumps(name, ensure_ascii=False) for name in table.column_names]

    def text(batch):
        if not keys:
            return b"{}\n" * batch.num_rows
        parts: list = []
        for i, (key, column) in enumerate(zip(keys, batch.columns)):
            parts.append(pa.scalar(("{" if i == 0 else ", ") + key + ": "))
            parts.append(_fill(_json_text(batch.schema.names[i], column), "null"))
        parts.append(pa.scalar("}\n"))
        return _join(parts)

    for lines in _in_order(text, table):
        _write_strings(lines, out)


def write_csv(table, out) -> None:
    """The header, then every row of `table` as a CSV record (`csv.writer` of `read_format.csv_value`)."""
    import pyarrow as pa

    header = io.StringIO()
    csv.writer(header).writerow(table.column_names)
    out.write(header.getvalue().encode("utf-8"))

    def text(batch):
        if batch.num_columns == 0:
            return b"\r\n" * batch.num_rows
        fields = [_fill(_csv_text(name, column), "") for name, column in zip(batch.schema.names, batch.columns)]
        if len(fields) == 1:  # csv writes a record of one empty field as "" (else it reads as no field)
            fields = [_pc().if_else(_pc().equal(fields[0], ""), '""', fields[0])]
        parts: list = []
        for i, field in enumerate(fields):
            parts += [pa.scalar(","), field] if i else [field]
        parts.append(pa.scalar("\r\n"))
        return _join(parts)

    for lines in _in_order(text, table):
        _write_strings(lines, out)


def _in_order(text, table):
    """`text(batch)` of each non-empty batch of `table`, in order, made by two threads at once:
    Arrow's kernels and numpy release the GIL, so a second core formats the next batch while this
    one is made and written (at most `THREADS` + 1 batches' text held at a time)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    batches = (b for b in table.to_batches(max_chunksize=BATCH_ROWS) if b.num_rows)
    with ThreadPoolExecutor(THREADS) as pool:
        ahead: deque = deque()
        for batch in batches:
            ahead.append(pool.submit(text, batch))
            if len(ahead) > THREADS:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def _pc():
    import pyarrow.compute as pc

    return pc


def _json_text(name: str, column):
    """The column's values as JSON text (null where null)."""
    import pyarrow as pa

    column = _decoded(column)
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _quoted(column)
    if pa.types.is_floating(t):
        return _float_text(column, json_form=True)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _quoted(_hex(column))
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_timestamp(t):
        return _quoted(_common_text(name, column, "JSON"))
    return _common_text(name, column, "JSON")


def _csv_text(name: str, column):
    """The column's values as CSV fields, quoted where `csv` quotes them (null where null)."""
    import pyarrow as pa

    column = _decoded(column)
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        column = column.cast(pa.string())
        pc = _pc()
        special = _holding(column, _CSV_SPECIAL)
        quoted = _join([pa.scalar('"'), pc.replace_substring(column, '"', '""'), pa.scalar('"')])
        return pc.if_else(special, quoted, column)
    if pa.types.is_floating(t):
        return _float_text(column, json_form=False)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _hex(column)
    return _common_text(name, column, "CSV")


def _decoded(column):
    """A dictionary-encoded column as its values."""
    import pyarrow as pa

    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _common_text(name: str, column, form: str):
    """Integers, booleans, decimals, dates, times, timestamps: the same text in both forms
    (unquoted); nulls; any other type an error naming the column."""
    import pyarrow as pa

    pc, t = _pc(), column.type
    if pa.types.is_null(t):
        return pa.nulls(len(column), pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(column, "true", "false")
    if pa.types.is_integer(t):
        return column.cast(pa.string())
    if pa.types.is_decimal(t):
        text = column.cast(pa.string())
        exponent = pc.fill_null(pc.match_substring(text, "E"), False)
        if pc.any(exponent).as_py():  # Arrow's 0E-10, 5.00E-8: Python's digits instead
            fixed = [format(Decimal(v), "f") for v in text.filter(exponent).to_pylist()]
            text = _replace_where(text, exponent, fixed)
        return text
    if pa.types.is_date(t) or pa.types.is_time(t):
        return column.cast(pa.string())
    if pa.types.is_timestamp(t):
        return _timestamp_text(column)
    raise DeltaportError(f"column {name!r}: no {form} form for the Arrow type {t}")


def _timestamp_text(column):
    """ISO 8601 with microseconds and Z: the date and the time of day cast apart (Arrow's own
    `strftime` gives the same text, ten times slower). A zoned column's UTC instants are kept."""
    import numpy as np
    import pyarrow as pa

    day_us = 86_400_000_000
    naive = column.view(pa.timestamp(column.type.unit)) if column.type.tz else column
    us = _pc().fill_null(naive.cast(pa.timestamp("us")).cast(pa.int64()), 0).to_numpy()
    days = us // day_us  # floor: before 1970 the time of day is still from midnight
    text = _join([pa.array(days.astype(np.int32), pa.date32()).cast(pa.string()), pa.scalar("T"),
                  pa.array(us - days * day_us, pa.int64()).view(pa.time64("us")).cast(pa.string()), pa.scalar("Z")])
    return _with_nulls(column, text)


def _float_text(column, json_form: bool):
    """Python's repr of each float (`json`'s Infinity, -Infinity, NaN in JSON). Arrow's cast gives
    the same shortest round-trip digits, five times faster, in its own notation: no `.0` (`1`),
    exponents by other bounds (`1e+15`, `0.00001`) and of one digit (`1e-7`). Python writes plain
    digits for 0 and 1e-4 <= |x| < 1e16, else an exponent of two digits or more; where Arrow wrote
    the same notation (plain, `.0` added where it has no point; or an exponent, which has two
    digits for |x| >= 1e16 or < 1e-9), its text is Python's. The rest (1e-9 <= |x| < 1e-4,
    whole numbers Arrow writes with an exponent, infinities, NaN) take `float.__repr__` itself."""
    import numpy as np
    import pyarrow as pa

    pc = _pc()
    values = pc.fill_null(column.cast(pa.float64()), 0.0)
    text = values.cast(pa.string())
    size, exponent = pc.abs(values), pc.match_substring(text, "e")
    plain = pc.and_(pc.or_(pc.equal(size, 0.0), pc.and_(pc.greater_equal(size, 1e-4), pc.less(size, 1e16))),
                    pc.invert(exponent))
    wide = pc.and_(exponent, pc.or_(pc.greater_equal(size, 1e16), pc.less(size, 1e-9)))
    text = pc.if_else(pc.or_(exponent, pc.match_substring(text, ".")), text, _join([text, pa.scalar(".0")]))
    other = pc.invert(pc.or_(plain, wide))
    if other.true_count:
        numbers = values.filter(other).to_numpy(zero_copy_only=False)
        fixed = list(map(float.__repr__, numbers.tolist()))
        if json_form:
            for i in np.flatnonzero(~np.isfinite(numbers)).tolist():
                fixed[i] = "NaN" if fixed[i] == "nan" else ("Infinity" if fixed[i] == "inf" else "-Infinity")
        text = _replace_where(text, other, fixed)
    return _with_nulls(column, text)


def _with_nulls(column, text):
    """`text` with nulls where `column` has them."""
    import pyarrow as pa

    return _pc().if_else(column.is_null(), pa.scalar(None, pa.string()), text) if column.null_count else text


def _hex(column):
    import pyarrow as pa

    return pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())


def _quoted(column):
    """JSON strings: Arrow adds the quotes where nothing needs escaping, `json` encodes the rest."""
    import pyarrow as pa

    column = column.cast(pa.string())
    quoted = _join([pa.scalar('"'), column, pa.scalar('"')])
    special = _holding(column, _JSON_SPECIAL)
    if not special.true_count:
        return quoted
    encoded = list(map(encode_basestring, column.filter(special).to_pylist()))  # = json.dumps(v, ensure_ascii=False)
    return _replace_where(quoted, special, encoded)


def _holding(column, chars: bytes):
    """Which of the (non-null) strings hold one of the ASCII `chars`: one pass over the column's
    UTF-8 bytes (an ASCII byte is never part of another character's encoding). Arrow's regex
    match costs a third of a second on its first call in a process."""
    import numpy as np
    import pyarrow as pa

    wanted = np.zeros(256, dtype=bool)
    wanted[list(chars)] = True
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32, count=len(column) + 1, offset=4 * column.offset)
    data = column.buffers()[2]
    found = np.zeros(len(column), dtype=bool)
    if data is not None and offsets[-1] > offsets[0]:
        at = np.flatnonzero(wanted[np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]]]) + offsets[0]
        found[np.searchsorted(offsets, at, side="right") - 1] = True
    return _pc().and_(pa.array(found), column.is_valid())  # a null's slot may hold any bytes


def _replace_where(column, mask, values: list[str]):
    import pyarrow as pa

    return _pc().replace_with_mask(column, mask, pa.array(values, pa.string()))


def _fill(column, text: str):
    return _pc().fill_null(column, text)


def _join(parts):
    """Element-wise concatenation of string arrays and scalars."""
    return _pc().binary_join_element_wise(*parts, "")


def _write_strings(lines, out) -> None:
    """The text of a string array, as one write (its values are contiguous in one buffer)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(lines, bytes):
        out.write(lines)
        return
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=4 * lines.offset)
    data = lines.buffers()[2]
    if data is not None:
        out.write(memoryview(data)[int(offsets[0]):int(offsets[-1])])

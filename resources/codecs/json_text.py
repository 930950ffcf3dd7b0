"""Naming and showing parsed JSON values in error messages, and what json.loads refuses beyond
syntax, shared by the JSON codecs."""

from __future__ import annotations

import json
from typing import Any


def json_type(value: Any) -> str:
    """Name a parsed JSON value by its JSON type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def show(value: Any) -> str:
    """A parsed JSON value as JSON text, shortened to 80 characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


# What json.loads raises, besides JSONDecodeError, on text it will not read: ValueError for an
# integer of more than 4300 digits (sys.get_int_max_str_digits), RecursionError for arrays or
# objects nested deeper than the interpreter's recursion limit. Both are bad input, not bugs.
BEYOND_LIMITS = (ValueError, RecursionError)


def beyond_limits(exc: BaseException) -> str:
    """The reason for a bad-JSON error when json.loads refused with one of `BEYOND_LIMITS`."""
    return f"JSON that Python will not read: {type(exc).__name__}: {str(exc)[:200]}"

"""Naming and showing parsed JSON values in error messages, shared by the JSON codecs."""

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

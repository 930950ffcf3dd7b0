"""`deltaport read --engine pyiceberg` on a store that fails: pyarrow's I/O error becomes the
typed error the CLI prints as one line, naming the table (platform_assets/cli/read_engines.py)."""

from __future__ import annotations

import pytest

from platform_assets.cli.read_engines import PyIcebergReader
from platform_assets.config import parse_config
from resources.lake.pyiceberg_read import PyIcebergReadError


def _reader(error: Exception) -> PyIcebergReader:
    reader = PyIcebergReader(parse_config({"datamarts": [{"name": "marketing", "backup_topic": "b"}]}))

    def fail(ident):
        raise error

    reader.open_table = fail
    return reader


def test_an_unreachable_store_is_a_typed_error_naming_the_table():
    down = OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: Failed to connect to 127.0.0.1:9")
    with pytest.raises(PyIcebergReadError) as err:
        _reader(down).last_landed("marketing", "stores")
    assert str(err.value).startswith("reading marketing.stores from the lake's files failed: AWS Error")
    assert err.value.__cause__ is down


def test_a_closed_stdout_is_not_taken_for_the_store():
    with pytest.raises(BrokenPipeError):
        _reader(BrokenPipeError()).last_landed("marketing", "stores")

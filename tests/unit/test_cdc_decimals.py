"""Change-stream decimals fit their column by their digits: Spark's 38, not Python's default 28."""

from __future__ import annotations

from decimal import Decimal

import pytest

from resources.codecs.cdc import UPSERT, Change
from resources.lake.cdc import CdcTypeError, check_landable


def _numeric(value, type_name="NUMERIC(38,10)"):
    return [Change("qlik", None, "t", UPSERT, ("id",), {"id": 1, "n": value}, (1,), column_types={"n": type_name})]


def test_a_decimal_of_38_digits_lands_in_its_declared_column():
    columns = dict(check_landable(_numeric(Decimal("1234567890123456789012345678.0123456789"))))
    assert columns["n"].simpleString() == "decimal(38,10)"
    assert dict(check_landable(_numeric(Decimal("0E-10"))))["n"].simpleString() == "decimal(38,10)"


@pytest.mark.parametrize("value", [Decimal("1" * 30 + "." + "5" * 10), Decimal("1E+100"), Decimal("1" * 200)])
def test_a_decimal_too_wide_for_its_column_is_a_typed_error(value):
    # Not fitting the declared type, the values' own type is tried: too wide for any Spark decimal.
    with pytest.raises(CdcTypeError):
        check_landable(_numeric(value))

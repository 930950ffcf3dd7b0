"""resources/spark/unions.py: many frames unioned as a balanced tree (a 500-table source's plan
nested 1,000 deep overflowed the Connect client's recursion)."""

import pytest

from resources.spark.unions import union_all


class Frame:
    def __init__(self, rows, depth=0):
        self.rows, self.depth = rows, depth

    def unionAll(self, other):
        return Frame(self.rows + other.rows, max(self.depth, other.depth) + 1)

    def unionByName(self, other):
        return self.unionAll(other)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_every_row_in_order_at_log_depth(n):
    out = union_all([Frame([i]) for i in range(n)])
    assert out.rows == list(range(n))
    assert out.depth <= max(1, (n - 1).bit_length())
    assert union_all([Frame([i]) for i in range(n)], by_name=True).rows == list(range(n))


def test_no_frame_is_an_error():
    with pytest.raises(ValueError):
        union_all([])

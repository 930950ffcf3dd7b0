"""`order_key_text`: the text of an order key sorts exactly as the tuples compare.

Property tests with a seeded `random.Random` (no hypothesis): random tuples of one shape (where
Python itself can compare them) are checked against Python's tuple order; random tuples of
mixed types against a reference comparator with the documented type order; and the real order
keys of the Qlik, DataWorks and Datastream emulators' stories sort the same both ways.
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from resources.lake.cdc import CdcTypeError, order_key_text

SEED = 20240601


def sign(x: int) -> int:
    return (x > 0) - (x < 0)


def py_cmp(a, b) -> int:
    return sign((a > b) - (a < b))


def text_cmp(a, b) -> int:
    ta, tb = order_key_text(a), order_key_text(b)
    by_code_point = sign((ta > tb) - (ta < tb))
    ba, bb = ta.encode("utf-8"), tb.encode("utf-8")  # Spark compares strings as UTF-8 bytes
    assert by_code_point == sign((ba > bb) - (ba < bb))
    return by_code_point


# ---- random values ---------------------------------------------------------------------------

_CHARS = ["\x00", "\x01", " ", "!", '"', "#", "$", ")", "0", "9", "A", "P", "S", "T", "a", "z", "~", "\x7f",
          "é", "ß", "я", "東", "\uffff", "😀", "\U0010ffff"]


def rand_int(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.3:
        return rng.randint(-12, 12)
    if kind < 0.6:
        return rng.choice([-1, 1]) * rng.choice([9, 10, 99, 100, 999, 1000, 2**31, 2**63 - 1, 2**63, 2**64])
    if kind < 0.8:
        return rng.randint(-(10**40), 10**40)
    return rng.choice([-1, 1]) * (10 ** rng.randint(0, 120) + rng.randint(-3, 3))


def rand_str(rng: random.Random) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 5)))


def rand_bytes(rng: random.Random) -> bytes:
    return bytes(rng.choice([0, 1, 0x21, 0x7F, 0x80, 0xFF]) for _ in range(rng.randint(0, 4)))


def rand_shape(rng: random.Random, depth: int = 0) -> list:
    """A template: per position a type ('int', 'str', 'bytes') or a nested template."""
    kinds = ["int", "str", "bytes"] + (["tuple"] if depth < 2 else [])
    shape = []
    for _ in range(rng.randint(0, 4)):
        k = rng.choice(kinds)
        shape.append(rand_shape(rng, depth + 1) if k == "tuple" else k)
    return shape


def from_shape(rng: random.Random, shape: list, small: bool) -> tuple:
    """A tuple following `shape`, possibly cut short (a prefix still compares in Python)."""
    out = []
    for k in shape[: rng.randint(0, len(shape))] if rng.random() < 0.2 else shape:
        if isinstance(k, list):
            out.append(from_shape(rng, k, small))
        elif k == "int":
            out.append(rng.randint(-3, 3) if small else rand_int(rng))
        elif k == "str":
            out.append(rng.choice(["", "a", "ab", "b", "a\x00"]) if small else rand_str(rng))
        else:
            out.append(rng.choice([b"", b"\x00", b"\x01", b"\x00\x01"]) if small else rand_bytes(rng))
    return tuple(out)


_RANK = {type(None): 0, bool: 1, int: 1, str: 2, tuple: 3, bytes: 4}


def ref_cmp(a, b) -> int:
    """Python's order where Python has one; else the documented type order."""
    ra, rb = _RANK[type(a)], _RANK[type(b)]
    if ra != rb:
        return sign(ra - rb)
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            c = ref_cmp(x, y)
            if c:
                return c
        return sign(len(a) - len(b))
    if a is None:
        return 0
    return py_cmp(a, b)


def rand_any(rng: random.Random, depth: int = 0):
    k = rng.choice(["none", "int", "int", "str", "str", "bytes", "bool"] + (["tuple"] * 2 if depth < 3 else []))
    if k == "none":
        return None
    if k == "int":
        return rng.randint(-3, 3) if rng.random() < 0.5 else rand_int(rng)
    if k == "bool":
        return rng.random() < 0.5
    if k == "str":
        return rand_str(rng)
    if k == "bytes":
        return rand_bytes(rng)
    return tuple(rand_any(rng, depth + 1) for _ in range(rng.randint(0, 3)))


# ---- properties ------------------------------------------------------------------------------


def test_same_shape_tuples_sort_as_python_compares_them():
    rng = random.Random(SEED)
    checked = 0
    for _ in range(150):
        shape = rand_shape(rng)
        small = rng.random() < 0.5  # small domains: many ties and equal prefixes
        keys = [from_shape(rng, shape, small) for _ in range(25)]
        for a, b in itertools.combinations(keys, 2):
            assert text_cmp(a, b) == py_cmp(a, b), (a, b, order_key_text(a), order_key_text(b))
            checked += 1
        assert sorted(keys, key=order_key_text) == sorted(keys)
    assert checked > 40_000


def test_mixed_type_tuples_follow_the_documented_total_order():
    rng = random.Random(SEED + 1)
    keys = [tuple(rand_any(rng, 1) for _ in range(rng.randint(0, 4))) for _ in range(400)]
    for a, b in itertools.combinations(keys, 2):
        assert text_cmp(a, b) == ref_cmp(a, b), (a, b)
    ordered = sorted(keys, key=functools.cmp_to_key(ref_cmp))
    assert sorted(keys, key=order_key_text) == ordered


def test_equal_text_exactly_for_equal_tuples():
    rng = random.Random(SEED + 2)
    keys = {tuple(rand_any(rng, 1) for _ in range(rng.randint(0, 3))) for _ in range(2000)}
    texts: dict[str, tuple] = {}
    for k in keys:
        t = order_key_text(k)
        assert t not in texts or texts[t] == k, (k, texts.get(t))
        texts[t] = k
    assert order_key_text((True, (False,))) == order_key_text((1, (0,)))


@pytest.mark.parametrize("ints", [
    [-(10**100), -(2**64), -(2**63), -1001, -1000, -999, -100, -99, -11, -10, -9, -2, -1, 0, 1, 2, 9, 10, 11,
     99, 100, 999, 1000, 2**63 - 1, 2**63, 10**34, 20240301090000051234567890123456789, 10**100],
])
def test_integers_of_any_size_and_sign(ints):
    texts = [order_key_text((n,)) for n in ints]
    assert texts == sorted(texts)
    assert len(set(texts)) == len(ints)


def test_strings_with_marks_escapes_and_unicode():
    words = ["", "\x00", "\x00\x00", "\x01", " ", "!", "!!", '"', "#", "$", "a", "a\x00", "a ", "a!", 'a"', "a#",
             "a$", "ab", "b", "é", "\uffff", "😀", "\U0010ffff"]
    assert sorted(words, key=lambda w: order_key_text((w, 0))) == sorted(words)
    # A string that is a prefix of another sorts first, whatever follows it in the tuple.
    assert order_key_text(("a", "zzz")) < order_key_text(("a\x00", ""))
    assert order_key_text(("a", 10**9)) < order_key_text(("a!", -5))


def test_prefix_tuples_and_nesting():
    assert order_key_text(()) == ""
    chain = [(), (0,), (0, ()), (0, (), ""), (0, (), "a"), (0, ((),)), (0, ((), ())), (0, (((),),)), (1,),
             (1, ("",)), (1, ("", ""))]
    assert sorted(chain) == chain
    assert sorted(chain, key=order_key_text) == chain
    assert order_key_text((2, "a")) == "P112Sa!"


def test_bytes_sort_as_python_bytes():
    values = [b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\x01", b"!", b"\x7f", b"\x80", b"\xff", b"\xff\x00"]
    assert sorted(values, key=lambda v: order_key_text((v,))) == sorted(values)
    assert order_key_text((bytearray(b"\x01"),)) == order_key_text((b"\x01",))


@pytest.mark.parametrize("bad", [(1.5,), ([1],), ({"a": 1},), (1, (2, 0.1))])
def test_unsupported_elements_are_refused(bad):
    with pytest.raises(CdcTypeError, match="order key element"):
        order_key_text(bad)


def test_only_tuples_are_order_keys():
    with pytest.raises(CdcTypeError, match="is a tuple"):
        order_key_text([1, 2])  # type: ignore[arg-type]


# ---- the decoders' real order keys -----------------------------------------------------------


def _decoded(messages, decode):
    keys = []
    for m in messages:
        for rec in decode(m.key, m.value):
            if getattr(rec, "order_key", None) is not None:
                keys.append(rec.order_key)
    return keys


def _check_real(keys):
    rng = random.Random(SEED + 3)
    shuffled = list(keys)
    rng.shuffle(shuffled)
    assert sorted(shuffled, key=order_key_text) == sorted(shuffled)
    for a, b in zip(shuffled, shuffled[1:]):
        assert text_cmp(a, b) == py_cmp(a, b)


def test_qlik_story_order_keys():
    from resources.codecs.qlik import QlikDecoder
    from resources.codecs.qlik_values import order_key
    from resources.emulator.qlik import QlikConfig, build_qlik_story

    story = build_qlik_story(QlikConfig(seed=7, transactions=30))
    decoder = QlikDecoder()
    keys = _decoded(story.messages, decoder.decode)
    assert any(k[0] == -2 for k in keys) and any(k[0] > 10**30 for k in keys)  # full load, 35-digit sequences
    _check_real(keys + [order_key("ABC", 3), order_key("ABD", 1), order_key(None, None, "S.T:{\"ID\": 1}")])


def test_dataworks_story_order_keys():
    from resources.codecs.dataworks import decode_dataworks, sequence_order_key
    from resources.emulator.dataworks import DataWorksConfig, build_dataworks_story

    story = build_dataworks_story(DataWorksConfig(seed=7, transactions=25))
    keys = _decoded(story.messages, decode_dataworks)
    _check_real(keys + [sequence_order_key("x17"), sequence_order_key("x17", old_image=True), sequence_order_key("9")])


def test_datastream_story_order_keys():
    from resources.codecs.datastream import decode_datastream
    from resources.emulator.datastream import DatastreamConfig, build_datastream_story

    story = build_datastream_story(DatastreamConfig(seed=7, steps=120))
    keys = _decoded(story.messages, decode_datastream)
    assert {k[0] for k in keys} == {0, 1}  # backfill reads and CDC events
    _check_real(keys)

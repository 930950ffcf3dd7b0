"""Qlik Replicate's Kafka target as a registered format: its codec (resources/codecs/qlik.py) primed
with the metadata messages the ledger keeps, its transaction-end boundaries, its type names. Its emulator: resources/emulator/formats.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.formats.boundaries import observe_qlik
from resources.codecs.qlik import QlikDecoder
from resources.formats.spec import Decode, StreamFormat

COLUMN_TYPES = {
    "INT1": "bigint", "INT2": "bigint", "INT4": "bigint", "INT8": "bigint", "UINT1": "bigint", "UINT2": "bigint",
    "UINT4": "bigint", "UINT8": "bigint", "REAL4": "double", "REAL8": "double", "BOOLEAN": "boolean",
    "DATE": "date", "TIME": "bigint", "DATETIME": "timestamp_ntz", "STRING": "string", "WSTRING": "string",
    "CLOB": "string", "NCLOB": "string", "BYTES": "binary", "BLOB": "binary",
}


def decoder(metadata: Iterable) -> Decode:
    """A decoder that has seen the kept metadata messages (in order) first."""
    qlik = QlikDecoder()
    for m in metadata:
        qlik.decode(m.key, m.value)
    return qlik.decode


FORMAT = StreamFormat(
    name="qlik", decoder=decoder, observe=observe_qlik, column_types=COLUMN_TYPES, keeps_metadata=True,
)

"""Qlik Replicate's Kafka target as a registered format: its codec (resources/codecs/qlik.py) primed
with the metadata messages the ledger keeps, its transaction-end boundaries, its type names, and
its emulator (resources/emulator/qlik.py) with the oracle of resources/emulator/stream_truths.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.changestream.boundaries import observe_qlik
from resources.codecs.qlik import QlikDecoder
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.stream_truths import qlik_final, qlik_truth
from resources.formats.spec import Decode, DemoSource, EmulatorHooks, StreamFormat

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


def demo(seed: int, deltas: int) -> DemoSource:
    story = build_qlik_story(QlikConfig(seed=seed, transactions=max(6, 3 * deltas),
                                        ddl_at_transaction=max(3, deltas), rollback_at_transaction=2))
    return DemoSource("sales_qlik", "qlik.sales", story, {"max_rows": 12, "max_seconds": 3600})


FORMAT = StreamFormat(
    name=QLIK, decoder=decoder, observe=observe_qlik, column_types=COLUMN_TYPES, keeps_metadata=True,
    emulator=EmulatorHooks(
        story=lambda seed, size, wire: build_qlik_story(QlikConfig(seed=seed, transactions=size or 24, format=wire)),
        demo=demo, truth_after=lambda story, records, _wm: qlik_truth(story, records), final_truth=qlik_final,
        wires=("json", "avro")),
)

"""The fault suite's stories and its lake-level check, shared by the corruption cases
(bench/faults.py) and the number cases (bench/fault_stream_numbers.py) without either importing
the other.

What flows through: a format and a seed go in, the story's good messages come out
(`fault_story`); the messages a sealer accepted go in, the ones the lake could not land come out
(`unlandable`). Pure: no broker, no Spark.
"""

from __future__ import annotations

__all__ = ["fault_story", "unlandable"]


def fault_story(fmt: str, seed: int) -> list:
    """The good messages of one format's story (`FORMATS`) that the fault cases corrupt, mix and
    pad: a small Prostore scenario's backup or signal messages, or a change stream's story."""
    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario

    if fmt in ("backup", "signal"):
        sc = build_scenario(EmulatorConfig(seed=seed, deltas=6, datamarts=("marketing",), chunk_size=20,
                                           backup_partitions=1, faults=Faults()))
        role = BACKUP if fmt == "backup" else SIGNAL
        return [m for m in sc.messages if m.role == role]
    if fmt == "qlik":
        from resources.emulator.qlik import QlikConfig, build_qlik_story
        return build_qlik_story(QlikConfig(seed=seed, duplicate_rate=0.0)).messages
    if fmt == "dataworks":
        from resources.emulator.dataworks import DataWorksConfig, build_dataworks_story
        return build_dataworks_story(DataWorksConfig(seed=seed, failover_rate=0.0)).messages
    from resources.emulator.datastream import DatastreamConfig, build_datastream_story
    return build_datastream_story(DatastreamConfig(seed=seed, duplicate_rate=0.0)).messages



def unlandable(fmt: str, items: list, quarantined: set[int]) -> list[tuple[int, str]]:
    """[(offset, why)] of the change-stream messages that were not quarantined but whose changes
    the lake could not land beside the story's good changes (a value with no column type, or
    one that fits no type of its column): such a message would fail its whole delta, and every
    later delta would wait behind it. Decoded again in order, as the sealer does."""
    from collections import defaultdict

    from resources.changestream.sealing import make_decoder
    from resources.codecs.cdc import Change
    from resources.errors import DecodeError
    from resources.lake.cdc import CdcTypeError, check_landable

    decode = make_decoder(fmt)
    good: dict = defaultdict(list)
    accepted: list[tuple[int, list]] = []
    for offset, (msg, value, kind, _) in enumerate(items):
        try:
            changes = [r for r in decode(msg.key, value) if isinstance(r, Change)]
        except DecodeError:
            continue  # quarantined by the sealer (counted above)
        if kind in ("good", "duplicate"):
            for ch in changes:
                good[(ch.namespace, ch.table)].append(ch)
        elif offset not in quarantined:
            accepted.append((offset, changes))
    out = []
    for offset, changes in accepted:
        for table in {(ch.namespace, ch.table) for ch in changes}:
            try:
                check_landable(good[table] + [ch for ch in changes if (ch.namespace, ch.table) == table])
            except CdcTypeError as exc:
                out.append((offset, str(exc)))
                break
    return out

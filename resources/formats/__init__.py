"""The change-stream formats the platform reads, and the one place they are registered.

Every source that is not Prostore is a change topic of one of these formats. A format is a
`StreamFormat` (resources/formats/spec.py): a decoder into the normalized records
(resources/codecs/cdc.py), a boundary rule for sealing (resources/formats/boundaries.py), a
map of its source type names to Spark types, and optionally its emulator and oracle. The sealer,
the lake's column typing, the config, `deltaport emulate` and the demo look a format up here by
name; none of them lists formats. Adding a format: a module or folder under resources/formats/
that defines `FORMAT`, and one line in `REGISTERED` below (docs/how-it-works.md, "Adding a
source format").
"""

from __future__ import annotations

from resources.errors import DeltaportError
from resources.formats import datastream, dataworks, debezium, qlik
from resources.formats.spec import StreamFormat

REGISTERED: tuple[StreamFormat, ...] = (
    qlik.FORMAT,
    dataworks.FORMAT,
    datastream.FORMAT,
    debezium.FORMAT,
)
STREAM_FORMATS: tuple[str, ...] = tuple(f.name for f in REGISTERED)
_BY_NAME = {f.name: f for f in REGISTERED}


class UnknownFormatError(DeltaportError, ValueError):
    """A format name no module registered."""


def stream_format(name: str) -> StreamFormat:
    """The registered format `name`, or `UnknownFormatError` naming the ones there are."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownFormatError(f"format {name!r} is none of {STREAM_FORMATS}") from None

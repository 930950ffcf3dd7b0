"""The one error a bad `deltaport.yaml` raises, in a module of its own so that the config's
checks (`config`, `lake_safety`) can raise it without importing each other.

What flows through: a key's path (``sources[1].topic``), the reason and the file go in; the
message names all three.
"""

from __future__ import annotations

from resources.errors import DeltaportError

__all__ = ["ConfigError"]


class ConfigError(DeltaportError):
    def __init__(self, path: str, reason: str, file: str | None = None):
        self.key_path, self.reason = path, reason
        where = f"{file}: " if file else ""
        super().__init__(f"{where}config key `{path}`: {reason}")

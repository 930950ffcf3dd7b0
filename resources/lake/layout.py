"""Where a source's tables live in the lake, whatever its format: `<catalog>.<source>.<table>`
(the snapshot), `<catalog>.<source>_increment.<table>`, `<catalog>.<source>_meta.<name>`, and the
history tables' and versions views' settings. Every writer and reader names tables through it.

What flows through: a source's name and a table's go in, the Iceberg identifier comes out. The
names are the lake's on-disk contract: changing one orphans every table written before.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LakeLayout"]


@dataclass(frozen=True)
class LakeLayout:
    catalog: str = "lake"
    # A new history table's partitions hold this many closing deltas each (truncate(K, delta_num):
    # resources/lake/history_layout.py); 0: one partition per delta, the layout before it.
    history_span: int = 1000
    # Keep a view of each history-kept table's versions, `<catalog>.<src>_versions.<t>`
    # (resources/lake/versions_view.py): on catalogs that keep views (JDBC, REST) only.
    versions_views: bool = False
    # Where the catalog places a table by its name, `<tables_root>/<namespace>/<table>` (hadoop and
    # JDBC catalogs); None for a catalog that chooses (REST, Hive): then `location` says nothing.
    tables_root: str | None = None

    def snapshot(self, datamart: str, table: str) -> str:
        return f"{self.catalog}.{datamart}.{table}"

    def increment(self, datamart: str, table: str) -> str:
        return f"{self.catalog}.{datamart}_increment.{table}"

    def meta(self, datamart: str, name: str) -> str:
        return f"{self.catalog}.{datamart}_meta.{name}"

    def location(self, ident: str) -> str | None:
        """The URI of table `ident`'s folder where the catalog places it by name (a table made by
        another writer at a location of its own is not seen here), with no call to the catalog."""
        if self.tables_root is None:
            return None
        _, namespace, table = ident.split(".", 2)
        root = self.tables_root.rstrip("/")
        return f"{root if '://' in root or root.startswith('file:') else 'file://' + root}/{namespace}/{table}"

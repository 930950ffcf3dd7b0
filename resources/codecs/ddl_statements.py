"""The typed statements of a Prostore changelog's DDL, as `resources/codecs/ddl_parser.py`
parses them and `resources/codecs/ddl.py` replays them (its docstring says what each means)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from resources.codecs.types import Column

EntityKind = Literal["table", "view", "materialized_view"]


@dataclass(frozen=True)
class CreateTable:
    datamart: str | None
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    distributed_by: tuple[str, ...]
    datasource_types: tuple[str, ...]


@dataclass(frozen=True)
class CreateView:
    """CREATE [OR REPLACE] VIEW, CREATE MATERIALIZED VIEW, ALTER VIEW. `query` is the text after
    AS, verbatim. A materialized view declares columns and keys like a table; a view does not."""

    datamart: str | None
    name: str
    kind: Literal["view", "materialized_view"]
    query: str
    or_replace: bool = False
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    distributed_by: tuple[str, ...] = ()
    datasource_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class DropTable:
    datamart: str | None
    name: str


@dataclass(frozen=True)
class DropView:
    datamart: str | None
    name: str
    kind: Literal["view", "materialized_view"] = "view"


@dataclass(frozen=True)
class AddColumn:
    column: Column
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


AlterAction = AddColumn | DropColumn | RenameColumn


@dataclass(frozen=True)
class AlterTable:
    """ALTER TABLE [IF EXISTS] [dm.]t action[, action ...]; actions apply left to right."""

    datamart: str | None
    name: str
    actions: tuple[AlterAction, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class OtherStatement:
    """A statement that changes no table or view schema this platform tracks."""

    verb: str  # first words, uppercased, e.g. "CREATE DATABASE"
    query: str


Statement = CreateTable | CreateView | DropTable | DropView | AlterTable | OtherStatement

"""`deltaport read SOURCE.TABLE [--as-of-delta N | --as-of TIME | --started-in A,B | --finished-in A,B]`:
a table as Prostore's FOR SYSTEM_TIME forms ask for it, from the lake. --as-of-delta N: its state
right after delta N (AS OF DELTA_NUM); --as-of 'YYYY-MM-DD HH:MM:SS' (UTC): as of the last delta
closed at or before that time; --started-in A,B: the row versions written in deltas A..B
(STARTED IN); --finished-in A,B: the versions deleted in deltas A..B, with their last values
(FINISHED IN); these two add sys_from, sys_to and sys_op. Both a datamart's and a change
stream's forms read its history table (resources/lake/history_read.py) where it is kept, tags
otherwise (as-of forms only). With no form, the
state as of the last delta landed in the table, named on stderr in a comment line
(`# ... as of delta 7 ...`). One row per line, data columns (and the system columns above); dates, times and timestamps in ISO 8601 with microseconds (timestamps in UTC, marked Z);
numbers as numbers, decimals with their exact digits (12.50); binary as lower-case hex; null as
null (an empty field in CSV). The encodings: platform_assets/cli/read_format.py (made from Arrow
columns, batch by batch: platform_assets/cli/arrow_format.py).
`--engine pyiceberg` answers every form without Spark (no server, no JVM): PyIceberg on the lake's
catalog, the same rows as the Spark engine (platform_assets/cli/read_engines.py); only a delta
inside a range run's commit of a table without history needs Spark (it is rebuilt from the
increments).
A user mart (an `@delta_asset`'s table) is read as SOURCE_marts.ASSET or SOURCE/ASSET (its asset
key as the UI shows it): its rows of the last delta landed in it, or of --as-of-delta N (--as-of
TIME: the last delta closed by then), by its delta_num column, never by time travel; its columns
without delta_num, sorted by their values (resources/lake/mart_read.py). A delta that has not
landed in the mart, or an unknown mart (the config's marts are listed), is an error."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys

from platform_assets.cli.common import add_config_option, without_pandas
from platform_assets.cli.read_engines import READERS
from platform_assets.config import load_config
from resources.errors import DeltaportError
from resources.lake.history_forms import FinishedIn, StartedIn, delta_at, parse_range


def register(sub) -> None:
    p = sub.add_parser("read", help="print a table as of a delta", description=__doc__)
    p.add_argument("table", help="SOURCE.TABLE (a datamart's table, or a change stream's <namespace>_<table>), "
                                 "or a user mart: SOURCE_marts.ASSET or SOURCE/ASSET")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--as-of-delta", type=int, default=None, metavar="N",
                      help="the delta to read the table as of (default: the last delta landed in it)")
    form.add_argument("--as-of", default=None, metavar="'YYYY-MM-DD HH:MM:SS'",
                      help="as of the last delta closed at or before this time (UTC)")
    form.add_argument("--started-in", default=None, metavar="A,B",
                      help="the row versions written in deltas A..B (Prostore's STARTED IN)")
    form.add_argument("--finished-in", default=None, metavar="A,B",
                      help="the row versions deleted in deltas A..B (Prostore's FINISHED IN)")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    p.add_argument("--engine", choices=["spark", "pyiceberg"], default="spark",
                   help="spark (default) or pyiceberg (no JVM): every form, from the history where it is kept")
    add_config_option(p)
    p.set_defaults(run=run)


def run(args) -> int:
    if "." not in args.table and "/" not in args.table:
        raise DeltaportError(f"table must be SOURCE.TABLE, SOURCE_marts.ASSET or SOURCE/ASSET, got {args.table!r}")
    cfg = load_config(args.config)
    mart = _mart(args.table, cfg)
    if mart is not None:
        return _read_mart(args, cfg, *mart)  # pandas allowed: an unknown mart imports the user's code
    source, table = args.table.split(".", 1)
    if source not in cfg.source_names:
        raise DeltaportError(f"source {source!r} is not in {cfg.source_file} (sources: {', '.join(cfg.source_names)}; "
                             "a user mart is read as SOURCE_marts.ASSET or SOURCE/ASSET)")
    ranged = [(flag, cls, text) for flag, cls, text in (("--started-in", StartedIn, args.started_in),
                                                       ("--finished-in", FinishedIn, args.finished_in)) if text]
    try:
        forms = [cls(*parse_range(text, flag=flag)) for flag, cls, text in ranged]
    except ValueError as exc:
        raise DeltaportError(str(exc))
    when = _as_of(args.as_of)
    with without_pandas() if args.engine == "pyiceberg" else contextlib.nullcontext():
        return _read(args, cfg, source, table, forms, when)


def _read(args, cfg, source: str, table: str, forms, when) -> int:
    reader = READERS[args.engine](cfg)
    if forms:
        _write(args.format, *reader.versions(source, table, forms[0]))
        return 0
    delta = args.as_of_delta if when is None else _delta_at(reader, source, f"{source}.{table}", when)
    if delta is None:
        delta = reader.last_landed(source, table)
        print(f"# {source}.{table} as of delta {delta}, the last delta landed in it "
              "(--as-of-delta N reads an earlier one)", file=sys.stderr, flush=True)
    _write(args.format, *reader.state(source, table, delta))
    return 0


def _as_of(text: str | None) -> dt.datetime | None:
    """--as-of's time as naive UTC (None without it)."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise DeltaportError(f"--as-of takes 'YYYY-MM-DD HH:MM:SS', got {text!r}") from None
    return when.astimezone(dt.timezone.utc).replace(tzinfo=None) if when.tzinfo is not None else when


def _delta_at(reader, source: str, name: str, when: dt.datetime) -> int:
    """The last delta of `source` closed at or before `when`, said on stderr."""
    delta = delta_at(reader.close_times(source), when)
    if delta is None:
        raise DeltaportError(f"no delta of {source} closed at or before {when.isoformat(sep=' ')} (UTC)")
    print(f"# {name} as of delta {delta}, the last closed at or before {when.isoformat(sep=' ')}",
          file=sys.stderr, flush=True)
    return delta


def _mart(name: str, cfg) -> tuple[str, str] | None:
    """(source, asset) when `name` names a user mart: `<source>_marts.<asset>` or `<source>/<asset>`
    (the asset key as the UI shows it)."""
    if "/" in name:
        source, asset = name.split("/", 1)
        if source not in cfg.source_names:
            raise DeltaportError(f"source {source!r} is not in {cfg.source_file} (sources: {', '.join(cfg.source_names)})")
        return source, asset
    namespace, asset = name.split(".", 1)
    if namespace not in cfg.source_names and namespace.endswith(MARTS) and namespace[:-len(MARTS)] in cfg.source_names:
        return namespace[:-len(MARTS)], asset
    return None


MARTS = "_marts"


def _read_mart(args, cfg, source: str, asset: str) -> int:
    """A user mart (resources/lake/mart_read.py): its rows as of a delta, by its delta column."""
    from resources.lake.mart_read import mart_ident, pick_delta

    name = mart_ident(source, asset)
    if args.started_in or args.finished_in:
        raise DeltaportError(f"{name} is a mart: it keeps one set of rows per delta, not row versions; "
                             "read it --as-of-delta N (or --as-of a time)")
    reader = READERS[args.engine](cfg)
    landed = reader.mart_deltas(source, asset)
    if landed is None:
        raise DeltaportError(f"{name} has no table in the lake; {_known_marts(cfg, source, asset)}")
    when = _as_of(args.as_of)
    asked = args.as_of_delta if when is None else _delta_at(reader, source, name, when)
    delta = pick_delta(name, landed, asked)
    if asked is None:
        print(f"# {name} as of delta {delta}, the last delta landed in it (--as-of-delta N reads an earlier one)",
              file=sys.stderr, flush=True)
    _write(args.format, *reader.mart(source, asset, delta))
    return 0


def _known_marts(cfg, source: str, asset: str) -> str:
    """Which marts of `source` the config's `code:` declares (imported only on this error's path)."""
    from platform_assets.build_on import load_user_code

    names = sorted(a.name for a in load_user_code(cfg)[0] if a.source == source)
    if asset in names:
        return f"its asset {source}/{asset} has not landed yet (the next `deltaport sync` lands it)"
    return (f"the marts of {source} (`code:` in {cfg.source_file}): "
            f"{', '.join(f'{source}_marts.{n}' for n in names) or 'none'}")


def _write(fmt: str, columns: list[str], rows) -> None:
    """`rows` (a pyarrow.Table, in print order) as text on stdout, `columns` in that order."""
    from platform_assets.cli.arrow_format import write_csv, write_jsonl

    rows = rows if rows.column_names == list(columns) else rows.select(list(columns))
    (write_jsonl if fmt == "jsonl" else write_csv)(rows, stdout_bytes())


def stdout_bytes():
    """stdout as a binary stream taking UTF-8 (the text as `print` would encode it)."""
    sys.stdout.flush()
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    if encoding == "utf8" and hasattr(sys.stdout, "buffer"):
        return sys.stdout.buffer
    return _Decoded(sys.stdout)


class _Decoded:
    """A text stream taking UTF-8 bytes (stdout in another encoding: it encodes them as it would text)."""

    def __init__(self, text):
        self.text = text

    def write(self, data) -> None:
        self.text.write(bytes(data).decode("utf-8"))

"""The SQL tool: one query on a read-only SQLite connection, with a time limit and a row cap.

The database file is opened with a `file:...?mode=ro` URI and `PRAGMA query_only`, and an
authorizer allows only reads (no `ATTACH`, `PRAGMA`, DDL or DML), so no statement can change
any file; a progress handler aborts queries that run past the time limit; no string or blob may
grow past 1 MiB (one huge `randomblob` would run past any time limit); at most `max_rows`
rows come back; `load_extension` and `printf` are refused. Errors are returned, never raised, so the env can
turn them into a penalty.

What reaches a prompt is bounded too: `QueryResult.render` shows each value in at most `VALUE_CHARS` characters
(a blob as hex) and the whole rendering in at most `RENDER_CHARS`, marking every cut (`... 1.0 MB cut`): twenty
rows of `zeroblob(1000000)` once put megabytes into the next agent's prompt.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from pettingllms_cli.tools.bounds import clip, human_size

TIME_LIMIT_S = 1.0
MAX_ROWS = 20
MAX_VALUE_BYTES = 1 << 20  # longest string or blob a query may build: the time limit cannot stop one long call
VALUE_CHARS = 200  # characters one rendered value may take
RENDER_CHARS = 2000  # characters the whole rendering may take


@dataclass
class QueryResult:
    ok: bool
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None
    truncated: bool = False

    def render(self, limit: int = 5) -> str:
        """Rows as short text for a prompt: each value and the whole text bounded, every cut marked.

        >>> QueryResult(True, ["n"], [(3,)]).render()
        '(3)'
        >>> QueryResult(False, error="no such table: x").render()
        'error: no such table: x'
        >>> QueryResult(True, ["b"], [(bytes(1000000),)]).render()[-30:]
        '0000000000... 1.0 MB blob cut)'
        """
        if not self.ok:
            return clip(f"error: {self.error}", RENDER_CHARS)
        if not self.rows:
            return "(no rows)"
        lines = ["(" + ", ".join(render_value(v) for v in row) + ")" for row in self.rows[:limit]]
        more = len(self.rows) - limit
        return clip("\n".join(lines) + (f"\n... {more} more rows" if more > 0 else ""), RENDER_CHARS)


def render_value(value: object, limit: int = VALUE_CHARS) -> str:
    """One value in at most `limit` characters: a blob as SQLite's hex literal, cut and marked when long.

    >>> render_value(b"\\x01\\x02"), render_value("x" * 500, 30)
    ("x'0102'", 'xxxxxxxxxxxxxxxx ... 484 B cut')
    """
    if isinstance(value, bytes | bytearray | memoryview):
        blob = bytes(value[: limit // 2])  # never hex-encode a megabyte to show a hundred characters of it
        if len(value) * 2 + 3 <= limit:
            return f"x'{blob.hex()}'"
        mark = f"... {human_size(len(value))} blob cut"
        return f"x'{blob.hex()}"[: max(0, limit - len(mark))] + mark
    return clip(str(value), limit)


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write: read-only URI plus `query_only`."""
    conn = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    # randomblob(1e9) or printf('%.*c', 1e9, 'x') runs inside one function call, where the progress handler
    # never fires: it took minutes and a gigabyte. Past this length SQLite fails with "string or blob too big".
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.set_authorizer(_authorize)  # ATTACH would create a file even on a read-only connection
    return conn


_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}


# printf('%.*c', 1e9, 'x') loops a billion times inside one call (12 s), past the progress handler's reach.
# load_extension would run native code (Python builds SQLite with it off; refused here all the same).
_DENIED_FUNCTIONS = frozenset({"printf", "format", "load_extension"})


def _authorize(action: int, arg1: object = None, arg2: object = None, *_: object) -> int:
    """Only reading statements are allowed: SELECT, column reads, functions (but printf), recursive CTEs."""
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def run_query(path: Path, query: str, time_limit: float = TIME_LIMIT_S, max_rows: int = MAX_ROWS) -> QueryResult:
    """Run one statement read-only; errors come back in the result."""
    if not isinstance(query, str) or not query.strip():
        return QueryResult(False, error="empty query")
    try:
        conn = connect_readonly(path)
    except sqlite3.Error as e:
        return QueryResult(False, error=f"cannot open database: {e}")
    deadline = time.monotonic() + time_limit
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)  # non-zero aborts the query
    try:
        cursor = conn.execute(query)
        rows = cursor.fetchmany(max_rows + 1)
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(True, columns, [tuple(r) for r in rows[:max_rows]], truncated=len(rows) > max_rows)
    except sqlite3.OperationalError as e:
        message = "query exceeded the time limit" if "interrupted" in str(e) else str(e)
        return QueryResult(False, error=message)
    except (sqlite3.Error, ValueError, OverflowError) as e:  # Warning: several statements; ValueError: NUL in query
        return QueryResult(False, error=str(e) or type(e).__name__)
    finally:
        conn.close()

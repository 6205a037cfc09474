"""The SQL tool reads only: destructive statements fail and the database file stays byte-identical."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from pettingllms_cli.tools.sql import MAX_ROWS, RENDER_CHARS, VALUE_CHARS, run_query


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    conn.commit()
    conn.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    yield path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.sqlite"]


def test_select_works(db):
    result = run_query(db, "SELECT SUM(x) FROM t")
    assert result.ok and result.rows == [(6,)]


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE t",
        "DELETE FROM t",
        "UPDATE t SET x = 0",
        "INSERT INTO t VALUES (9)",
        "CREATE TABLE u(y)",
        "PRAGMA query_only = OFF",
    ],
)
def test_writes_fail(db, query):
    assert not run_query(db, query).ok
    assert run_query(db, "SELECT COUNT(*) FROM t").rows == [(3,)]


def test_attach_cannot_create_a_file(db, tmp_path):
    result = run_query(db, f"ATTACH '{tmp_path / 'other.db'}' AS o")
    assert not result.ok and not (tmp_path / "other.db").exists()


def test_two_statements_fail(db):
    assert not run_query(db, "SELECT 1; DROP TABLE t").ok


def test_runaway_query_hits_the_time_limit(db):
    endless = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT COUNT(*) FROM c"
    result = run_query(db, endless, time_limit=0.3)
    assert not result.ok and "time limit" in result.error


def test_rows_are_capped(db):
    many = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 100) SELECT n FROM c"
    result = run_query(db, many, max_rows=5)
    assert result.ok and len(result.rows) == 5 and result.truncated


def test_missing_database_is_an_error_not_a_new_file(tmp_path):
    result = run_query(tmp_path / "nope.sqlite", "SELECT 1")
    assert not result.ok and not (tmp_path / "nope.sqlite").exists()


# --- the guards a hostile pass tried, and the size of what reaches a prompt -------------------------------------
@pytest.mark.parametrize(
    "query",
    [
        "PRAGMA writable_schema = ON",
        "PRAGMA journal_mode = WAL",
        "PRAGMA user_version = 7",
        "SELECT load_extension('/tmp/evil.so')",
        "VACUUM INTO '/tmp/pettingllms_copy.db'",
    ],
)
def test_pragma_writes_extensions_and_copies_are_refused(db, query):
    assert not run_query(db, query).ok
    assert not Path("/tmp/pettingllms_copy.db").exists()


def test_attach_of_an_existing_file_is_refused(db, tmp_path):
    other = tmp_path / "shop.sqlite"  # the fixture's own file: ATTACH would read (and could write) it
    result = run_query(db, f"ATTACH '{other}' AS o")
    assert not result.ok and "not authorized" in result.error


@pytest.mark.parametrize(
    "endless",
    [
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT MAX(n) FROM c",
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n FROM c) SELECT n FROM c ORDER BY n",
        "WITH RECURSIVE c(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM c) SELECT length(s) FROM c ORDER BY 1 DESC",
    ],
)
def test_never_ending_recursive_ctes_are_bounded(db, endless):
    start = time.monotonic()
    result = run_query(db, endless, time_limit=0.3)
    assert not result.ok and time.monotonic() - start < 5


def test_an_endless_cte_without_aggregation_stops_at_the_row_cap(db):
    result = run_query(db, "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n FROM c")
    assert result.ok and len(result.rows) == MAX_ROWS and result.truncated


def test_twenty_rows_of_zeroblob_render_under_the_cap(db):
    query = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 20) SELECT n, zeroblob(1000000) FROM c"
    result = run_query(db, query)
    assert result.ok and len(result.rows) == 20
    text = result.render(limit=20)
    assert len(text) <= RENDER_CHARS and "1.0 MB blob cut" in text
    assert all(len(line) <= VALUE_CHARS + 10 for line in text.splitlines())


def test_a_long_string_value_is_cut_and_marked(db):
    result = run_query(db, "SELECT hex(zeroblob(400000))")
    text = result.render()
    assert result.ok and len(text) <= VALUE_CHARS + 2 and text.endswith("kB cut)")


def test_a_long_error_is_cut_too(db):
    result = run_query(db, "SELECT * FROM " + "x" * 100_000)
    assert not result.ok and len(result.render()) <= RENDER_CHARS

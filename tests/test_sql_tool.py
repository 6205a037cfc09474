"""The SQL tool reads only: destructive statements fail and the database file stays byte-identical."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from pettingllms_cli.tools.sql import run_query


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

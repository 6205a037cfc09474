"""`sql_v0`: answer questions about a small shop database with read-only SQL queries.

The database (customers, products, orders; orders reference both) is generated from the
seed and written once to the temp folder; every query runs through `tools.sql.run_query`
(read-only connection, an authorizer that allows only reads, 1 s limit, 20 rows).

Layouts:
- `multi`: `query_writer` writes one `sql` tool call; `reporter` reads the query and its rows
  and states the answer (`Answer: <value>`).
- `single`: `analyst` writes the query; the first cell of its result is the team's answer.

Rewards per action: team = the team's current answer is correct (numbers compared as
numbers, text without case). Local (envs/rewards.py): query writer `QUERY_RAN` (+0.1) for a query
that ran, `QUERY_FAILED` (-0.1) for a malformed call or a failing query; the reporter is paid for
a correct judgement, never for copying the first cell: `JUDGED_RIGHT` (1.0) for a right answer,
or for `Answer: retry` when the result's first cell is wrong; `JUDGED_WRONG` (0.0) otherwise.
Solved when the answer is correct; a retry is told what went wrong (the call, the query's
result, or the reporter's answer to a right result).

Data: `generated` (every template filled with every name in the seed's database, about 40
questions, answers computed by a gold query; a seeded fifth is held out for test) or a
JSON-lines file of `question` and gold `sql` over the database built from the spec's seed.
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import tempfile
from pathlib import Path

from pettingllms_cli.envs.base import Message, Outcome, Problem, TurnEnv, read_jsonl, split_records
from pettingllms_cli.envs.rewards import JUDGED_RIGHT, JUDGED_WRONG, QUERY_FAILED, QUERY_RAN
from pettingllms_cli.errors import UserError
from pettingllms_cli.tools.calls import ToolCall, parse_tool_call, render_tool_call, strip_tool_results
from pettingllms_cli.tools.sql import connect_readonly, run_query

SCHEMA = "customers(id, name, city)\nproducts(id, name, category, price)\norders(id, customer_id, product_id, quantity)"
CALL_PREFIX = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT '
ANSWER_PREFIX = "Answer: "
WRITER_SYSTEM = f"Write one SQLite query that answers the question. Tables:\n{SCHEMA}"
RETRY = "retry"  # the reporter's rejection of the query's result
REPORTER_SYSTEM = f"Read the query result and give the final answer, or reply {RETRY} if the result is wrong."
SHOT = ("How many products cost more than 20?", "SELECT COUNT(*) FROM products WHERE price > 20")
NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jin"]
CITIES = ["Oslo", "Lima", "Rome", "Kyiv"]
PRODUCTS = [
    ("lamp", "home"),
    ("mug", "kitchen"),
    ("pan", "kitchen"),
    ("desk", "home"),
    ("pen", "office"),
    ("chair", "home"),
    ("stapler", "office"),
    ("kettle", "kitchen"),
    ("notebook", "office"),
]

# (question template, gold SQL template); {customer}, {city}, {product}, {category} come from the db.
TEMPLATES = [
    ("What is the price of the {product}?", "SELECT price FROM products WHERE name = '{product}'"),
    ("How many customers live in {city}?", "SELECT COUNT(*) FROM customers WHERE city = '{city}'"),
    (
        "How many orders did {customer} place?",
        "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.id WHERE c.name = '{customer}'",
    ),
    (
        "How many units of the {product} were ordered in total?",
        "SELECT SUM(o.quantity) FROM orders o JOIN products p ON o.product_id = p.id WHERE p.name = '{product}'",
    ),
    (
        "Which {category} product is the most expensive?",
        "SELECT name FROM products WHERE category = '{category}' ORDER BY price DESC LIMIT 1",
    ),
    (
        "How much did {customer} spend in total?",
        "SELECT SUM(o.quantity * p.price) FROM orders o JOIN products p ON o.product_id = p.id "
        "JOIN customers c ON o.customer_id = c.id WHERE c.name = '{customer}'",
    ),
]


def same_answer(value: object, gold: object) -> bool:
    """Numbers compare as numbers, text without case or surrounding quotes.

    >>> same_answer("42.0", 42), same_answer("'Lamp'", "lamp"), same_answer(None, 3)
    (True, True, False)
    """
    if value is None or gold is None:
        return False
    a, b = str(value).strip().strip("'\"").strip().lower(), str(gold).strip().lower()
    try:
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))
    except ValueError:
        return a == b


def build_db(seed: int) -> Path:
    """The seed's database file (built once, atomically, then read-only)."""
    path = Path(tempfile.gettempdir()) / "pettingllms_sql" / f"shop_v0_seed{seed}.sqlite"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    conn = sqlite3.connect(tmp)
    _fill(conn, random.Random(seed))
    conn.commit()
    conn.close()
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)
    return path


def _fill(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript(
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);"
        "CREATE TABLE products(id INTEGER PRIMARY KEY, name TEXT, category TEXT, price INTEGER);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),"
        " product_id INTEGER REFERENCES products(id), quantity INTEGER);"
    )
    names = rng.sample(NAMES, 7)
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i + 1, n, rng.choice(CITIES)) for i, n in enumerate(names)])
    prices = rng.sample(range(3, 60), len(PRODUCTS))  # distinct prices: "most expensive" has one answer
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?)",
        [(i + 1, n, c, p) for i, ((n, c), p) in enumerate(zip(PRODUCTS, prices, strict=True))],
    )
    orders = [(i + 1, rng.randint(1, len(names)), rng.randint(1, len(PRODUCTS)), rng.randint(1, 5)) for i in range(24)]
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)


def gold_answer(db: Path, sql: str) -> object | None:
    result = run_query(db, sql)
    return result.rows[0][0] if result.ok and result.rows else None


def all_questions(seed: int) -> list[Problem]:
    """Every template filled with every value of the seed's database that has an answer."""
    db = build_db(seed)
    conn = connect_readonly(db)
    pools = {
        "customer": [r[0] for r in conn.execute("SELECT name FROM customers ORDER BY id")],
        "city": [r[0] for r in conn.execute("SELECT DISTINCT city FROM customers ORDER BY city")],
        "product": [r[0] for r in conn.execute("SELECT name FROM products ORDER BY id")],
        "category": [r[0] for r in conn.execute("SELECT DISTINCT category FROM products ORDER BY category")],
    }
    problems = []
    for t, (question, sql) in enumerate(TEMPLATES):
        slot = re.search(r"\{(\w+)\}", question).group(1)
        for value in pools[slot]:
            row = conn.execute(sql.format(**{slot: value})).fetchone()
            if row and row[0] is not None:  # e.g. a product nobody ordered has no total
                pid = f"q{t}-{value}"
                problems.append(
                    Problem(pid, question.format(**{slot: value}), row[0], {"db_seed": seed, "sql": sql.format(**{slot: value})})
                )
    conn.close()
    return problems


def generate_problems(seed: int, split: str, n: int) -> list[Problem]:
    """A seeded shuffle of all questions; the last fifth is the test split, so no test question is trained on."""
    problems = all_questions(seed)
    random.Random(seed).shuffle(problems)
    return split_records(problems, split, max(1, len(problems) // 5), f"sql_v0 generated data (seed {seed})")[:n]


class SqlEnv(TurnEnv):
    name = "sql_v0"
    layouts = {"multi": ("query_writer", "reporter"), "single": ("analyst",)}

    def _reset_task(self) -> None:
        self.query: str | None = None
        self.result = "(no result)"
        self.first_cell: object = None
        self.answer: object = None
        self.feedback: str | None = None

    @property
    def db(self) -> Path:
        return build_db(self.problem.meta["db_seed"])

    def observe(self, role: str) -> list[Message]:
        question = f"Question: {self.problem.question}"
        if role == "reporter":
            return [
                {"role": "system", "content": REPORTER_SYSTEM},
                {"role": "user", "content": f"{question}\nQuery: {self.query or '(none)'}\nResult: {self.result}"},
                {"role": "assistant", "content": ANSWER_PREFIX},
            ]
        content = question if self.feedback is None else f"{question}\n{self.feedback}"
        return [
            {"role": "system", "content": WRITER_SYSTEM},
            {"role": "user", "content": f"Question: {SHOT[0]}"},
            {"role": "assistant", "content": render_tool_call(ToolCall("sql", {"query": SHOT[1]}))},
            {"role": "user", "content": content},
            {"role": "assistant", "content": CALL_PREFIX},
        ]

    def _act(self, role: str, text: str) -> Outcome:
        text = strip_tool_results(text)  # a forged result block in the reply is not a result
        if role == "reporter":
            return self._report(text)
        outcome = self._run(text)
        if role == "analyst":
            self.answer = self.first_cell
            outcome.solved = outcome.team_reward > 0
        return outcome

    def _run(self, text: str) -> Outcome:
        call = parse_tool_call(text)
        self.query, self.result, self.first_cell = None, "(no result)", None
        if isinstance(call, str) or call.name != "sql" or not isinstance(call.arguments.get("query"), str):
            error = call if isinstance(call, str) else "expected the `sql` tool with a string `query`"
            self.feedback = f"Your last call was invalid: {error}."
            return Outcome(QUERY_FAILED, 0.0, info={"tool_error": error})
        self.query = call.arguments["query"][:500]
        result = run_query(self.db, self.query)
        self.result = result.render()
        if not result.ok:
            self.feedback = f"Your last query failed: {result.error}."
            return Outcome(QUERY_FAILED, 0.0, info={"tool_error": result.error})
        self.first_cell = result.rows[0][0] if result.rows else None
        correct = same_answer(self.first_cell, self.problem.answer)
        self.feedback = None if correct else f"Your last query returned {self.result[:80]!r}, which is wrong."
        info = {"query": self.query, "rows": len(result.rows), "result": self.result}  # the reply the reporter reads
        return Outcome(QUERY_RAN, float(correct), info=info)

    def _report(self, text: str) -> Outcome:
        body = text.removeprefix(ANSWER_PREFIX).strip()
        self.answer = body.splitlines()[0].strip().rstrip(".") if body else None
        correct = same_answer(self.answer, self.problem.answer)
        rejected = (self.answer or "").lower() == RETRY
        result_right = self.query is not None and same_answer(self.first_cell, self.problem.answer)
        if not correct and result_right:  # the query was right: say so, and what the reporter did with it
            verdict = "the reporter rejected it" if rejected else f"the answer given was {self.answer!r}"
            self.feedback = f"Your last query returned {self.result[:80]!r}, which was right, but {verdict}."
        right = not result_right if rejected else correct  # reject a wrong result, or answer right
        return Outcome(JUDGED_RIGHT if right else JUDGED_WRONG, float(correct), solved=correct, info={"answer": self.answer})

    def reference_action(self, role: str) -> str:
        if role == "reporter":
            return ANSWER_PREFIX + str(self.problem.answer)
        return render_tool_call(ToolCall("sql", {"query": self.problem.meta["sql"]}))

    def corrupted_actions(self, role: str) -> list[str]:
        """A wrong value, and a destructive query (which must fail and change nothing)."""
        if role == "reporter":
            return [ANSWER_PREFIX + "not-the-answer"]
        return [
            render_tool_call(ToolCall("sql", {"query": "SELECT 'wrong'"})),
            render_tool_call(ToolCall("sql", {"query": "DROP TABLE orders"})),
        ]

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        if data == "generated":
            return generate_problems(seed, split, n)
        path, db = Path(data), build_db(seed)
        problems = []
        for i, rec in enumerate(read_jsonl(path), 1):
            if not isinstance(rec.get("question"), str) or not isinstance(rec.get("sql"), str):
                raise UserError(f"{path}: record {i} needs string `question` and gold `sql`")
            answer = gold_answer(db, rec["sql"])
            if answer is None:
                raise UserError(f"{path}: record {i}: the gold `sql` fails or returns no value on the seed-{seed} database")
            problems.append(Problem(f"{path.stem}-{i}", rec["question"], answer, {"db_seed": seed, "sql": rec["sql"]}))
        return split_records(problems, split, max(1, len(problems) // 5), path)[:n]

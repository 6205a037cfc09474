"""Every constant local reward a built-in env pays, written once: the envs import them, and docs/credit.md's table
("What each role is paid") quotes them, checked by tests/test_one_home.py. Team rewards are scores (solved or not,
a share of tests passed), never constants; `format_bonus` is an option (math_tool_v0, default 0).

Small shaping terms (+-0.1) reward a well-formed action over a malformed one without outweighing a team success
(1.0). A judgement's pay is the same for every judge, whether it answers (verifier, reporter) or says yes or no
(validator, reader): right 1.0, wrong 0.0, and a reply that is no verdict earns what a wrong one does, so that
dodging never pays better than judging.
"""

from __future__ import annotations

# --- judges: math_tool_v0's verifier, sql_v0's reporter, the `team` layouts' validator and reader ------------------
JUDGED_RIGHT = 1.0  # a right judgement: a right answer, `retry` on a wrong result, a right yes/no verdict
JUDGED_WRONG = 0.0  # a wrong one: a wrong answer (a copied wrong result too), `retry` on a right result, a wrong verdict
NO_VERDICT = 0.0  # a validator's or reader's reply not in the verdict form (envs/review.py `verdict`)
NOTHING_TO_READ = 0.0  # the reader when no call ran this round: there was nothing to judge

# --- tool callers ------------------------------------------------------------------------------------------------
CALL_RAN = 0.1  # math_tool_v0 caller, solver, planner: a well-formed calculator call that ran
CALL_FAILED = -0.1  # math_tool_v0: no call, another tool, or an expression the calculator refused
QUERY_RAN = 0.1  # sql_v0 writer: a query that ran
QUERY_FAILED = -0.1  # sql_v0 writer: no `sql` call, or a query that failed
TOOL_RAN = 0.1  # planning envs' tool agent: its code ran
TOOL_FAILED = -0.1  # planning envs' tool agent: its code failed or timed out

# --- choosing and calling a function: function_call_v0, function_select_v0 ---------------------------------------
PLAN_RIGHT = 1.0  # planner, selector: a function the ground truth calls
PLAN_OTHER = 0.2  # planner, selector: another offered function (the format is right, the choice is not)
PLAN_NONE = -0.1  # planner, selector: no offered function named
CALL_INVALID = -0.1  # caller, filler: no parseable <tool_call>, or a function that is not offered (else: the share right)

# --- actions with nothing to score -------------------------------------------------------------------------------
NO_ASSERT = -0.1  # code_v0 tester: a reply without a single one-line `assert`
CODE_DOES_NOT_LOAD = -0.1  # code_v0 coder: the code fails while loading (syntax error, failing import)
NO_PLAN = -0.1  # planning envs' plan agent and planner: no plan could be read

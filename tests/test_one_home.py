"""Facts written once (issue 31): each is declared in one place, and what the docs and schema say of it is checked here
against that declaration, so a doc that drifts fails."""

from __future__ import annotations

import pytest

from pettingllms_cli.analysis.header import spec_item
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import parse_spec


def test_algorithm_name_lists_the_algorithms_and_the_header_names_it(smoke_tree):
    spec = parse_spec(smoke_tree)
    assert spec.algorithm.name == "at_grpo"
    assert "at_grpo tree K=4" in spec_item(spec.model_dump(mode="json"))  # what the report says it trained
    smoke_tree["algorithm"]["name"] = "ppo"
    with pytest.raises(UserError, match=r"algorithm\.name: Input should be 'at_grpo'$"):
        parse_spec(smoke_tree)

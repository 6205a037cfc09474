"""`pettingllms serve`: the plain `openai` client against a served tiny team, in a subprocess as a user runs it.

The served greedy text is the sampler's own greedy output for the same prompt; the served log-probs (one forward
over prompt and completion, policy/logprobs.py) match those the sampler's cached decode computed while it picked the
tokens, within LOGPROB_TOL; errors come back in OpenAI's shape with the status the client maps to its exceptions."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
import torch

from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.chat import ApiError, ChatRequest, Completer
from pettingllms_cli.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
LOGPROB_TOL = 1e-4  # fp32, one thread: a cached step-by-step decode vs one forward over the whole sequence
MESSAGES = [{"role": "system", "content": "Answer with one number."}, {"role": "user", "content": "Tom has 12 apples."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served():
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pettingllms_cli", "serve", str(SMOKE), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
    deadline = time.monotonic() + 120
    while True:
        try:
            client.models.list()
            break
        except openai.APIConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"serve did not start: {proc.stdout.read()}")
            time.sleep(0.3)
    yield client
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def team():
    torch.set_num_threads(1)
    return Team(load_spec(SMOKE))


def test_models_lists_the_agents(served):
    assert sorted(m.id for m in served.models.list().data) == ["caller", "verifier"]


def test_greedy_text_and_logprobs_are_the_samplers(served, team):
    got = served.chat.completions.create(model="verifier", messages=MESSAGES, temperature=0, max_tokens=8, logprobs=True)
    choice = got.choices[0]
    tokenizer = team.tokenizer_of("verifier")
    prompt = list(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False))
    with team.recording_logprobs() as recorded:
        [[ids]] = team.sample_mixed(["verifier"], [prompt], 1, 8, 1.0, greedy=True)
    assert choice.message.content == team.decode("verifier", ids)
    assert got.usage.prompt_tokens == len(prompt) and got.usage.completion_tokens == len(ids)
    served_logprobs = [t.logprob for t in choice.logprobs.content]
    assert len(served_logprobs) == len(ids)
    [decode_mean] = recorded.values()  # the decode's own mean log-prob of these tokens (temperature 1)
    assert abs(sum(served_logprobs) / len(served_logprobs) - decode_mean) < LOGPROB_TOL
    assert all(lp <= 0 for lp in served_logprobs)


def test_adapters_differ_per_agent_and_seed_repeats(served):
    ask = dict(messages=MESSAGES, temperature=1.0, max_tokens=6, seed=7, n=3)
    first = served.chat.completions.create(model="caller", **ask)
    again = served.chat.completions.create(model="caller", **ask)
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    assert len(first.choices) == 3


def test_stop_cuts_the_text(served):
    ask = dict(model="caller", messages=MESSAGES, temperature=1.0, seed=3, max_tokens=12)
    text = served.chat.completions.create(**ask).choices[0].message.content
    assert len(text) >= 6, text  # the seeded draw of the tiny model is long enough to cut
    stop = text[3:5]
    cut = served.chat.completions.create(**ask, stop=["never here", stop])
    assert cut.choices[0].message.content == text[: text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_errors_in_openai_shape(served):
    with pytest.raises(openai.NotFoundError, match="caller, verifier"):
        served.chat.completions.create(model="nobody", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="messages"):
        served.chat.completions.create(model="caller", messages=[])
    with pytest.raises(openai.BadRequestError, match="temperature"):
        served.chat.completions.create(model="caller", messages=MESSAGES, temperature=7)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096"):
        served.chat.completions.create(model="caller", messages=[{"role": "user", "content": "12 apples " * 3000}])


def test_tools_are_rendered_by_the_chat_template(team):
    tokenizer = team.tokenizer_of("caller")
    before = tokenizer.chat_template
    tokenizer.chat_template = "{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}" + before
    try:
        tool = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
        completer = Completer(team)
        with_tools = tokenizer.decode(completer.prompt_ids("caller", MESSAGES, [tool]))
        without = tokenizer.decode(completer.prompt_ids("caller", MESSAGES, None))
    finally:
        tokenizer.chat_template = before
    assert "calculator" in with_tools and "calculator" not in without


def test_too_long_for_max_tokens_names_the_limit(team):
    request = ChatRequest(model="caller", messages=MESSAGES, max_tokens=4096)
    with pytest.raises(ApiError, match="4096 tokens") as e:
        Completer(team).complete(request)
    assert e.value.status == 400 and e.value.code == "context_length_exceeded"

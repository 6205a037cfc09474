"""OpenAI chat completions over the team's sampler: a request's messages to token ids, K samples through the named
agent's adapter, and the response in OpenAI's shape (docs/external.md).

Sampling goes through the rollout's `Sampler` (`sample_mixed`), so a served completion is what the trainer's own
rollout would draw for the same prompt and seed; log-probs are the trainer's (policy/logprobs.py) over the tokens
returned. A served request samples alone (its settings are its own); an external rollout's calls, whose settings the trainer
fixes, are sampled in batches across concurrent episodes (batcher.py).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pettingllms_cli.envs.messages import Message, continues
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import group_logprobs, pad
from pettingllms_cli.policy.prompts import render_plain
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.rollout.batcher import Batcher, Row

DEFAULT_MAX_TOKENS = 256  # served on its own, without `max_tokens`; capped by the context left after the prompt
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class ApiError(Exception):
    """An error the client gets in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = {404: "not_found_error", 400: "invalid_request_error"}.get(self.status, "server_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat completion request that change what is sampled; others are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=64)
    logprobs: bool | None = False
    tools: list[dict[str, Any]] | None = None
    stream: bool | None = False


def parse_request(body: object) -> ChatRequest:
    """The request, or a 400 naming the first bad field."""
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "body"
        raise ApiError(400, f"{where}: {err['msg']}", param=where) from None
    if request.stream:
        raise ApiError(400, "stream: streaming is not supported; leave `stream` unset", param="stream")
    return request


def plain_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """OpenAI messages as the chat template takes them: text parts joined, a null content as '', tool calls kept."""
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ApiError(400, f"messages.{i}.role: {role!r} is not one of system, user, assistant, tool", f"messages.{i}")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if content is not None and not isinstance(content, str):
            raise ApiError(400, f"messages.{i}.content: must be a string or a list of text parts", f"messages.{i}")
        message = {"role": "system" if role == "developer" else role, "content": content or ""}
        if m.get("tool_calls"):
            message["tool_calls"] = m["tool_calls"]
        out.append(message)
    return out


@dataclass
class Choice:
    ids: torch.Tensor  # the completion's token ids as sampled (EOS kept), cut after a stop string
    text: str
    finish_reason: str
    logprobs: list[float] | None = None


@dataclass
class Completion:
    agent: str
    prompt: list[int]
    choices: list[Choice]
    messages: list[Message] = field(default_factory=list)
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")


@dataclass
class Settings:
    """How to sample one request: from the request (serving), or fixed by the trainer (an external rollout)."""

    temperature: float
    max_tokens: int
    n: int = 1
    seed: int | None = None
    greedy: bool = False


class Completer:
    def __init__(self, team: Team, sampler: Sampler | None = None):
        self.team, self.sampler = team, sampler or team
        self.lock = threading.Lock()  # torch modules are not safe to call from several threads
        self.batcher = Batcher(self.sampler, self.lock)

    @property
    def agents(self) -> list[str]:
        return sorted(self.team.spec.agents)

    def check_agent(self, name: str) -> str:
        if name not in self.team.spec.agents:
            raise ApiError(404, f"model {name!r} is not an agent of this team; the agents are: {', '.join(self.agents)}", "model")
        return name

    def context(self, agent: str) -> int | None:
        return getattr(self.team.model_of(agent).config, "max_position_embeddings", None)

    def prompt_ids(self, agent: str, messages: list[Message], tools: list[dict] | None) -> list[int]:
        """The base's chat template over the messages (and tools), as the sampler's `encode` renders them, but never
        cut to fit: a prompt that does not fit is the client's to shorten."""
        tokenizer = self.team.tokenizer_of(agent)
        template = self.team.spec.models[self.team.spec.agents[agent].model].prompt_template
        if template is not None or tokenizer.chat_template is None:
            if tools:
                raise ApiError(400, f"tools: the base of {agent!r} has no chat template to render them with", "tools")
            return tokenizer(render_plain(messages, template), add_special_tokens=True)["input_ids"]
        ids = tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            continue_final_message=continues(messages),
            add_generation_prompt=not continues(messages),
            tokenize=True,
            return_dict=False,
        )
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def settings(self, request: ChatRequest, agent: str, prompt_tokens: int, fixed: Settings | None = None) -> Settings:
        """The request's own settings, or `fixed`; a prompt that leaves no room in the context is a 400 naming the
        limit."""
        context = self.context(agent)
        asked = fixed.max_tokens if fixed else request.max_completion_tokens or request.max_tokens
        room = None if context is None else context - prompt_tokens
        if room is not None and (room < 1 or (asked is not None and asked > room)):
            raise ApiError(
                400,
                f"this model's maximum context length is {context} tokens; the messages take {prompt_tokens} and "
                f"max_tokens asks for {asked or 1} more; shorten the messages or lower max_tokens",
                "messages",
                "context_length_exceeded",
            )
        if fixed is not None:
            return fixed
        max_tokens = asked or min(DEFAULT_MAX_TOKENS, room or DEFAULT_MAX_TOKENS)
        temperature = 1.0 if request.temperature is None else request.temperature
        return Settings(temperature, max_tokens, request.n, request.seed, greedy=temperature == 0)

    def complete(self, request: ChatRequest, fixed: Settings | None = None) -> Completion:
        """Sample the request's completions with its agent's adapter; `fixed` overrides the request's settings."""
        agent = self.check_agent(request.model)
        messages = plain_messages(request.messages)
        prompt = self.prompt_ids(agent, messages, request.tools)
        settings = self.settings(request, agent, len(prompt), fixed)
        stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
        temperature = max(settings.temperature, 1e-5)  # 0 is greedy, which does not divide by it
        if fixed is not None and settings.n == 1:  # a rollout's call: batched with the other episodes' (batcher.py)
            row = Row(agent, prompt, settings.max_tokens, temperature, settings.greedy, settings.seed)
            drawn = [self.batcher.sample(row)]
        else:
            with self.lock:
                seeds = None if settings.seed is None else [settings.seed]
                [drawn] = self.sampler.sample_mixed(
                    [agent], [prompt], settings.n, settings.max_tokens, temperature, settings.greedy, seeds
                )
        choices = [self.choice(agent, ids, stops) for ids in drawn]
        if request.logprobs:
            with self.lock:
                self.add_logprobs(agent, prompt, choices)
        return Completion(agent, prompt, choices, messages)

    def choice(self, agent: str, ids: torch.Tensor, stops: list[str]) -> Choice:
        """The text of sampled ids, cut before the first stop string (the ids after the token that completed it)."""
        eos = self.team.tokenizer_of(agent).eos_token_id
        ended = len(ids) > 0 and int(ids[-1]) == eos
        text = self.sampler.decode(agent, ids)
        hits = [text.find(s) for s in stops if s and s in text]
        if not hits:
            return Choice(ids, text, "stop" if ended else "length")
        cut = min(hits)
        for n in range(1, len(ids) + 1):  # the fewest tokens whose text reaches past the stop string's start
            if len(self.sampler.decode(agent, ids[:n])) > cut:
                return Choice(ids[:n].clone(), text[:cut], "stop")
        return Choice(ids, text[:cut], "stop")

    @torch.no_grad()
    def add_logprobs(self, agent: str, prompt: list[int], choices: list[Choice]) -> None:
        """Each returned token's log-prob under the agent's policy at temperature 1, as the trainer computes it."""
        kept = [c for c in choices if len(c.ids)]
        if not kept:
            return
        model = self.team.activate(agent)
        pad_id = self.team.tokenizer_of(agent).pad_token_id or 0
        completions, _ = pad([c.ids for c in kept], pad_id)
        was_training = model.training
        model.eval()
        try:
            logp, _ = group_logprobs(model, torch.tensor(prompt), completions, 1.0)
        finally:
            model.train(was_training)
        for row, c in enumerate(kept):
            c.logprobs = logp[row, : len(c.ids)].tolist()


def response(completer: Completer, completion: Completion, tools: bool) -> dict:
    """OpenAI's chat.completion object."""
    choices = []
    for i, c in enumerate(completion.choices):
        message: dict[str, Any] = {"role": "assistant", "content": c.text}
        finish = c.finish_reason
        calls = tool_calls(c.text) if tools else []
        if calls:
            message |= {"content": None, "tool_calls": calls}
            finish = "tool_calls"
        choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
        if c.logprobs is not None:
            choice["logprobs"] = {"content": token_logprobs(completer, completion.agent, c)}
        choices.append(choice)
    completion_tokens = sum(len(c.ids) for c in completion.choices)
    return {
        "id": completion.id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": completion.agent,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(completion.prompt),
            "completion_tokens": completion_tokens,
            "total_tokens": len(completion.prompt) + completion_tokens,
        },
    }


def token_logprobs(completer: Completer, agent: str, choice: Choice) -> list[dict]:
    tokenizer = completer.team.tokenizer_of(agent)
    out = []
    for token_id, logprob in zip(choice.ids.tolist(), choice.logprobs or [], strict=True):
        token = tokenizer.decode([token_id])
        out.append({"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []})
    return out


def tool_calls(text: str) -> list[dict]:
    """`<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks (the Hermes/Qwen/SmolLM2 convention) as
    OpenAI tool calls; text that holds none, or none that parses, is plain content."""
    calls = []
    for i, match in enumerate(TOOL_CALL.finditer(text)):
        try:
            call = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            arguments = call.get("arguments", {})
            encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
            calls.append({"id": f"call_{i}", "type": "function", "function": {"name": call["name"], "arguments": encoded}})
    return calls


def models_list(completer: Completer) -> dict:
    return {
        "object": "list",
        "data": [{"id": a, "object": "model", "created": 0, "owned_by": "pettingllms"} for a in completer.agents],
    }

"""Calls of concurrent episodes sampled together: one batched `sample_mixed` over every call waiting, whatever agent
each names (rows of one base share a decode, each through its own adapter).

An external rollout's episodes each wait on their own HTTP call; sampled one at a time, K x problems calls would each
pay a whole decode for one row, where the built-in rollout decodes them as one batch. Here the first call to arrive
leads: it waits `WINDOW` seconds for others to join, then samples everything queued; calls that arrive meanwhile form
the next batch. Each row carries its own seed (policy/sampling.py), so what a call draws does not depend on which
calls share its batch (up to float rounding in a wider batch, as in `Team.sample_mixed`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from pettingllms_cli.policy.sampler import Sampler

WINDOW = 0.01  # seconds a leading call waits for others; small against one decode step of a real base on a CPU


@dataclass
class Row:
    agent: str
    prompt: list[int]
    max_tokens: int
    temperature: float
    greedy: bool
    seed: int | None
    ids: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


class Batcher:
    def __init__(self, sampler: Sampler, lock: threading.Lock):
        self.sampler, self.lock = sampler, lock  # `lock`: held while the sampler runs (the serving path shares it)
        self.ready = threading.Condition()
        self.queue: list[Row] = []
        self.busy = False

    def sample(self, row: Row) -> torch.Tensor:
        """The row's one completion, sampled in a batch with whatever other rows are waiting."""
        with self.ready:
            self.queue.append(row)
            while self.busy and not row.done:
                self.ready.wait()
            if row.done:
                return result(row)
            self.busy = True  # this call leads the next batch
        time.sleep(WINDOW)
        with self.ready:
            batch, self.queue = self.queue, []
        try:
            self.run(batch)
        except BaseException as e:  # every row of a failed batch gets the error, not only the leader's
            for r in batch:
                r.error, r.done = e, True
        finally:
            with self.ready:
                self.busy = False
                self.ready.notify_all()
        return result(row)

    def run(self, batch: list[Row]) -> None:
        """One `sample_mixed` per distinct (max_tokens, temperature, greedy, seeded); the trainer's calls share one."""
        kinds: dict[tuple, list[Row]] = {}
        for r in batch:
            kinds.setdefault((r.max_tokens, r.temperature, r.greedy, r.seed is None), []).append(r)
        with self.lock:
            for (max_tokens, temperature, greedy, unseeded), rows in kinds.items():
                seeds = None if unseeded else [r.seed for r in rows]
                drawn = self.sampler.sample_mixed(
                    [r.agent for r in rows], [r.prompt for r in rows], 1, max_tokens, temperature, greedy, seeds
                )
                for r, [ids] in zip(rows, drawn, strict=True):
                    r.ids, r.done = ids, True


def result(row: Row) -> torch.Tensor:
    if row.error is not None:
        raise row.error
    return row.ids

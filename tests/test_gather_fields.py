"""Gathering a record over ranks is generic over its fields (distributed.gather_fields): a field added to a record
is merged on every rank, never silently dropped. Two gloo processes on localhost, spawned by torch.multiprocessing."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from pettingllms_cli import distributed
from pettingllms_cli.rollout.records import Rollout


@dataclass(frozen=True)
class WithExtra:
    """A record like `Rollout`, with one field the old hand-written gather did not know."""

    samples: list[str] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    extra: list[int] = field(default_factory=list)  # the new field
    extra_count: int = 0


@dataclass(frozen=True)
class Odd:
    name: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out: dict) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        mine = WithExtra([f"s{rank}"], 10 + rank, 1.0 + rank, [rank, rank], 3)
        out[rank] = distributed.gather_fields(mine)
    finally:
        dist.destroy_process_group()


def test_a_new_field_survives_a_gather_over_two_ranks() -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(_free_port(), out), nprocs=2, join=True)
        merged = dict(out)
    expected = WithExtra(["s0", "s1"], 21, 2.0, [0, 0, 1, 1], 6)  # lists in rank order, ints summed, the slowest time
    assert merged == {0: expected, 1: expected}


def test_one_process_keeps_the_record_and_an_unknown_kind_of_field_is_refused() -> None:
    record = WithExtra(["a"], 1, 0.5, [7])
    assert distributed.gather_fields(record) is record
    with pytest.raises(TypeError, match=r"Odd\.name: .*str"):
        distributed.gather_fields(Odd("x"))


def test_every_rollout_field_is_one_gather_fields_merges() -> None:
    assert distributed.gather_fields(Rollout()) == Rollout()  # no field of another kind: none would be dropped

"""Data parallelism over processes started by `torchrun` or `accelerate launch` (one per GPU, or gloo on CPU).

Each rank samples and scores its shard of a step's problems; gradients are summed over ranks
before every optimizer step, so every rank holds the same adapters. Rank 0 alone writes files
and prints. Every helper is a no-op in a single process (WORLD_SIZE unset or 1), so the
one-process code path is unchanged.

Collectives must be called by every rank in the same order: code that calls one of these
helpers must run on all ranks, never behind `is_main()`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

from pettingllms_cli.errors import UserError

T = TypeVar("T")
TIMEOUT = timedelta(minutes=30)  # a rank stuck longer than this (e.g. a peer died) fails instead of hanging


# Where each launcher says who a process is: torchrun (and `accelerate launch --multi_gpu`, which runs it) sets
# the first name; mpirun (`accelerate launch --cpu --mpirun_hostfile ...`) sets one of the others.
RANK_VARS = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
LOCAL_RANK_VARS = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def _env_int(names: Sequence[str]) -> int | None:
    """The first of `names` set in the environment, as an int (None when none is)."""
    return next((int(os.environ[n]) for n in names if os.environ.get(n, "").strip()), None)


def init() -> None:
    """Join the process group the launcher described (rank, world size, MASTER_ADDR, MASTER_PORT)."""
    world = _env_int(WORLD_SIZE_VARS) or 1
    if world <= 1:
        refuse_lone_accelerate_process()
        return
    if dist.is_initialized():
        return
    rank_ = _env_int(RANK_VARS)
    missing = ([] if rank_ is not None else ["RANK"]) + [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise UserError(f"WORLD_SIZE>1 but {', '.join(missing)} unset; start with torchrun or accelerate launch")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())  # one process per GPU
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank_, world_size=world, timeout=TIMEOUT)


def refuse_lone_accelerate_process() -> None:
    """Refuse `accelerate launch --cpu --num_processes N` (or N without `--multi_gpu` and no GPU): it starts ONE process.

    Accelerate's simple launcher sets ACCELERATE_USE_CPU, and MASTER_PORT only when more than one
    process was asked for, but no rank: going on would silently train on 1 of the N processes asked for.
    """
    if "ACCELERATE_USE_CPU" in os.environ and "MASTER_PORT" in os.environ:
        raise UserError(
            "accelerate launch started one process, not --num_processes N (it starts several CPU processes only "
            "through mpirun, --mpirun_hostfile); on one machine use `accelerate launch --multi_gpu --num_processes N` "
            "(torchrun underneath, gloo on CPU) or `torchrun --nproc_per_node N`"
        )


def shutdown(succeeded: bool = False) -> None:
    """Leave the process group. After a command that succeeded, wait for every rank first: rank 0 hosts the group's
    store, and a rank that tears down while another still talks to it can abort at exit (SIGABRT, "terminate called
    without an active exception"). After an error, leave at once: a barrier could wait on a rank that failed."""
    if dist.is_initialized():
        if succeeded:
            dist.barrier()
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def local_rank() -> int:
    return _env_int(LOCAL_RANK_VARS) or 0


def relaunch() -> list[str]:
    """The start of a command that starts this job's processes again (the printed resume line uses it)."""
    world = world_size()
    if world <= 1:
        return ["pettingllms"]
    if os.environ.get("LOCAL_WORLD_SIZE") == str(world):  # torchrun (or accelerate through it), one machine
        return ["torchrun", "--nproc_per_node", str(world), "-m", "pettingllms_cli"]
    return ["<your launcher, as before>", "-m", "pettingllms_cli"]  # several machines: rerun it on each


def is_main() -> bool:
    return rank() == 0


def device() -> torch.device:
    """This rank's device: `cuda:LOCAL_RANK` when CUDA is available, else the CPU."""
    return torch.device("cuda", local_rank()) if torch.cuda.is_available() else torch.device("cpu")


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


# --- data --------------------------------------------------------------------------------------
def shard(items: Sequence[T]) -> list[T]:
    """This rank's contiguous slice of `items` (sizes differ by at most one; concatenated in rank order = items).

    >>> shard([1, 2, 3])  # one process: everything
    [1, 2, 3]
    """
    n, w, r = len(items), world_size(), rank()
    return list(items[r * n // w : (r + 1) * n // w])


def gather(items: list[T]) -> list[T]:
    """Every rank's list, concatenated in rank order, on every rank (inverse of `shard`)."""
    if world_size() == 1:
        return items
    parts: list = [None] * world_size()
    dist.all_gather_object(parts, items)
    return [x for part in parts for x in part]


def gather_fields(record: T) -> T:
    """Every rank's `record` (a dataclass) merged field by field, on every rank; one process: `record` itself.

    Lists and tuples concatenate in rank order (as `gather`), ints sum, floats take the largest (they are wall
    times, and ranks run side by side: the slowest sets the pace). A field of another kind is a TypeError naming
    it, in one process too, so a field added to a record is merged or refused, never silently dropped.
    """
    hints = typing.get_type_hints(type(record))
    kinds = {f.name: typing.get_origin(hints[f.name]) or hints[f.name] for f in dataclasses.fields(record)}
    for name, kind in kinds.items():
        if kind not in MERGE:
            raise TypeError(
                f"{type(record).__name__}.{name}: a {hints[name]} cannot be gathered over ranks; "
                "make it a list, tuple, int or float, or gather it by hand"
            )
    if world_size() == 1:
        return record
    parts: list = [None] * world_size()
    dist.all_gather_object(parts, record)
    return dataclasses.replace(record, **{n: MERGE[k]([getattr(p, n) for p in parts]) for n, k in kinds.items()})


MERGE: dict[type, Callable[[list], object]] = {  # how `gather_fields` merges one field's values, one per rank
    list: lambda values: [x for v in values for x in v],
    tuple: lambda values: tuple(x for v in values for x in v),
    int: sum,
    float: max,
}


# --- reductions --------------------------------------------------------------------------------
def all_reduce_sum(values: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Elementwise sum over ranks, in float64 (counts and loss sums stay exact enough); returns a new tensor."""
    t = torch.as_tensor(values, dtype=torch.float64).clone()
    if world_size() > 1:
        moved = t.to(_comm_device())
        dist.all_reduce(moved, op=dist.ReduceOp.SUM)
        t = moved.cpu()
    return t


def any_rank(flag: bool) -> bool:
    """True on every rank when `flag` is true on any rank (e.g. a stop signal that reached one process first)."""
    return bool(all_reduce_sum([float(flag)])[0] > 0)


def all_reduce_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Sum gradients over ranks, in place, in one flat buffer.

    A rank without a grad for a parameter adds zeros; a parameter no rank has a grad for keeps
    `grad=None`, so the optimizer skips it as it would in one process.
    """
    if world_size() == 1 or not params:
        return
    grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype, device=p.device) for p in params]
    has = torch.tensor([p.grad is not None for p in params], dtype=grads[0].dtype, device=grads[0].device)  # [P]
    flat = torch.cat([*grads, has]).to(_comm_device())  # [sum numel + P]
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for i, p in enumerate(params):
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.device, p.dtype).clone() if flat[-len(params) + i] > 0 else None
        offset += n


# --- rank 0 does, the others learn the outcome ---------------------------------------------------
def on_main(fn: Callable[..., T], *args, **kwargs) -> T:
    """Run `fn` on rank 0 only and hand its result (or its UserError) to every rank."""
    if world_size() == 1:
        return fn(*args, **kwargs)
    box: list = [None]
    if is_main():
        try:
            box[0] = ("ok", fn(*args, **kwargs))
        except UserError as e:
            box[0] = ("error", pickle.dumps(e))
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise pickle.loads(value)
    return value


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


@contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. materialising a model cache), then the others."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()

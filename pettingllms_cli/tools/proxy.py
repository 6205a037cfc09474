"""Test verdicts that model code cannot forge: the tests and the candidate run in two separate sandboxes.

The candidate's sandbox loads the model's code and only answers requests about the names it defined
(`proxy_child.serve`). The judge's sandbox never loads model code: it runs the test setup and the tests with
those names bound to proxies (`proxy_child.judge`), evaluates each assertion on plain data, and reports the
verdicts to this process. Every message passes through this process: the candidate's answers go to the judge
only, as replies to the judge's requests, each echoing its request's random nonce, which no answer written
before its question can carry. Nothing the candidate prints, writes, walks or kills can produce a verdict; a
candidate that dies or hangs fails the tests still to run. The candidate's output is discarded (its size
changes nothing), and each sandbox keeps the caller's wall-clock limit.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pettingllms_cli.tools import proxy_child
from pettingllms_cli.tools.sandbox import run_python

_CHILD_SOURCE = Path(proxy_child.__file__).read_text(encoding="utf-8")
SPAWN_SLACK_S = 2.0  # beyond the sandboxes' own limit: their start and the last messages
_POLL_S = 0.05  # how often a wait checks that the other side still runs
_DEAD = proxy_child.dumps(("raise", "RuntimeError", "the candidate's process did not answer"))


def run_proxied(code: str, tests: Sequence[str], setup: str = "", timeout: float = 3.0) -> tuple[bool, tuple[bool, ...]]:
    """(code loaded, pass/fail per test): `code` in one sandbox, `setup` and `tests` in another.

    >>> run_proxied("def add(a, b):\\n    return a + b", ["assert add(1, 2) == 3", "assert add(1, 1) == 3"])
    (True, (True, False))
    """
    to_cand, from_cand, to_judge, from_judge = os.pipe(), os.pipe(), os.pipe(), os.pipe()
    ours = (to_cand[1], from_cand[0], to_judge[1], from_judge[0])
    for fd in ours:
        os.set_blocking(fd, False)
    cand = _start(f"{_CHILD_SOURCE}\nserve({code!r}, {to_cand[0]}, {from_cand[1]})\n", timeout, (to_cand[0], from_cand[1]))
    judge = _start(
        f"{_CHILD_SOURCE}\njudge({setup!r}, {list(tests)!r}, {to_judge[0]}, {from_judge[1]})\n",
        timeout,
        (to_judge[0], from_judge[1]),
    )
    deadline = time.monotonic() + timeout + SPAWN_SLACK_S
    try:
        candidate = _Side(from_cand[0], to_cand[1], cand.is_alive, deadline)
        return _relay(candidate, _Side(from_judge[0], to_judge[1], judge.is_alive, deadline), len(tests))
    finally:
        _Side(-1, to_cand[1], cand.is_alive, time.monotonic() + _POLL_S).send(b"")  # the candidate may leave now
        cand.join()
        judge.join()
        for fd in (*to_cand, *from_cand, *to_judge, *from_judge):
            os.close(fd)


def _start(program: str, timeout: float, fds: tuple[int, int]) -> threading.Thread:
    thread = threading.Thread(target=run_python, args=(program,), kwargs={"timeout": timeout, "pass_fds": fds}, daemon=True)
    thread.start()
    return thread


def _relay(candidate: _Side, judge: _Side, n: int) -> tuple[bool, tuple[bool, ...]]:
    """Carry the judge's requests to the candidate and the answers back, until the judge has given n verdicts."""
    judge.send(candidate.recv() or proxy_child.dumps(("load_error", "no answer")))
    passed, loaded, candidate_up = [False] * n, False, True
    while (frame := judge.recv()) is not None:
        if frame[:1] == b"C":
            answer = candidate.ask(frame[1:]) if candidate_up else None
            candidate_up = answer is not None
            if not judge.send(answer or _DEAD):
                break
            continue
        verdict = _verdict(frame, n)
        if verdict is None:
            break  # "load" or a frame the judge cannot have meant
        if verdict == "ready":
            loaded = True
        else:
            passed[verdict[0]] = verdict[1]
        if not n or (verdict != "ready" and verdict[0] == n - 1):
            break
    return loaded, tuple(passed)


def _verdict(frame: bytes, n: int) -> str | tuple[int, bool] | None:
    """`Vready`, or `V<i> <0|1>` for a test in range; None for anything else."""
    if frame == b"Vready":
        return "ready"
    parts = frame[1:].split(b" ") if frame[:1] == b"V" else []
    if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) >= n or parts[1] not in (b"0", b"1"):
        return None
    return int(parts[0]), parts[1] == b"1"


class _Side:
    """Our ends of one sandbox's pipes; every wait gives up when that sandbox has ended or the deadline passed."""

    def __init__(self, rfd: int, wfd: int, alive: Callable[[], bool], deadline: float) -> None:
        self.rfd, self.wfd, self.alive, self.deadline = rfd, wfd, alive, deadline

    def _wait(self, fd: int, write: bool) -> bool:
        while time.monotonic() < self.deadline:
            ready = select.select([], [fd], [], _POLL_S)[1] if write else select.select([fd], [], [], _POLL_S)[0]
            if ready:
                return True
            if not self.alive():
                return False
        return False

    def pending(self) -> bool:
        """Bytes wait to be read (the sandbox wrote without being asked)."""
        return bool(select.select([self.rfd], [], [], 0)[0])

    def recv(self) -> bytes | None:
        """One frame, or None if the sandbox ended, went silent past the deadline, or announced too large a frame."""
        head = self._read(4)
        size = int.from_bytes(head, "big") if head is not None else proxy_child.MAX_FRAME + 1
        return self._read(size) if size <= proxy_child.MAX_FRAME else None

    def _read(self, size: int) -> bytes | None:
        chunks: list[bytes] = []
        while size:
            if not self._wait(self.rfd, write=False):
                return None
            try:
                chunk = os.read(self.rfd, min(size, 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                return None
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def ask(self, request: bytes) -> bytes | None:
        """The candidate's answer to one request, or None if it fails to answer or answers out of protocol: bytes
        already waiting before the question, or an answer without the request's nonce (bytes it wrote before the
        question was asked, however the race between the two processes ran)."""
        nonce = os.urandom(proxy_child.NONCE_BYTES)
        answer = self.recv() if not self.pending() and self.send(nonce + request) else None
        return answer[len(nonce) :] if answer is not None and answer[: len(nonce)] == nonce else None

    def send(self, payload: bytes) -> bool:
        data = memoryview(len(payload).to_bytes(4, "big") + payload)
        while data:
            if not self._wait(self.wfd, write=True):
                return False
            try:
                data = data[os.write(self.wfd, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                return False
        return True

"""The two sandboxed sides of a proxied test run; `tools.proxy` embeds this file's text in each child program.

- The candidate side (`serve`) loads model code and answers requests (call, getattr, setattr, list) about
  the names it defined, with plain data: builtin values only, any other object as an opaque handle.
- The judge side (`judge`) never loads model code: it binds the candidate's names to `Remote` proxies,
  runs the test setup and the tests, and reports one verdict per test. Assertions are evaluated here,
  on plain data, so a candidate's `__eq__`, `print` or frames never reach a verdict.

Standard library only: the children run `python -I -S`, and this file is sent as text, not imported.
Frames are a 4-byte big-endian length and a pickle; `loads` refuses every global except the builtin
value types, so a pickle written by model code can build nothing but plain data and handles.
"""

from __future__ import annotations

import builtins
import importlib
import io
import os
import pickle
import sys

MAX_FRAME = 16 << 20  # bytes one message may hold; a larger answer fails the call that asked for it
NONCE_BYTES = 16  # each request to the candidate starts with this many random bytes, echoed by its answer
PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)
# Builtin value types travel as themselves (a test may pass `int` as an argument); calling one builds plain data.
TYPES = (*PLAIN[1:], list, tuple, dict, set, frozenset)
_GLOBALS = {("builtins", t.__name__) for t in TYPES}


class Handle:
    """An object of the candidate's that stays in its process, known to the judge by number or global name."""

    __slots__ = ("key",)

    def __init__(self, key: int | str) -> None:
        self.key = key


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")

    def persistent_load(self, pid):
        return self.remote(pid)

    remote = Handle


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.key if type(obj) in (Handle, Remote) else None


def dumps(obj: object) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


def loads(data: bytes, remote: type = Handle) -> object:
    unpickler = _Unpickler(io.BytesIO(data))
    unpickler.remote = remote
    return unpickler.load()


def read_frame(fd: int) -> bytes | None:
    """One frame, or None at end of file."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    return None if size > MAX_FRAME else _read_exact(fd, size)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_frame(fd: int, payload: bytes) -> None:
    data = len(payload).to_bytes(4, "big") + payload
    while data:
        data = data[os.write(fd, data) :]


class _Sink(io.TextIOBase):
    """Where prints go: output neither travels nor counts, so its size changes nothing."""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return len(s)


# --- the candidate side ---------------------------------------------------------------------------------------
def serve(code: str, rfd: int, wfd: int) -> None:
    """Load the candidate's code, then answer requests until an empty frame or end of file.

    Each answer starts with its request's nonce, fresh random bytes the loaded code cannot know in advance:
    a frame the code wrote before the question (a forged answer) does not carry it.
    """
    sys.stdout = sys.stderr = _Sink()
    ns: dict = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(code, "solution.py", "exec"), ns)
    except BaseException as e:  # noqa: BLE001 - any failure while loading is the candidate's
        write_frame(wfd, dumps(("load_error", type(e).__name__)))
        return
    write_frame(wfd, dumps(("ready", _exported(ns))))
    table: dict = {}
    while (frame := read_frame(rfd)) is not None and frame:  # each request: its nonce, then the request
        write_frame(wfd, frame[:NONCE_BYTES] + _answer(frame[NONCE_BYTES:], ns, table))


def _exported(ns: dict) -> dict[str, str | None]:
    """Names the tests may use: module name for an imported module (the judge imports its own), else None."""
    out = {}
    for name, value in ns.items():
        if name.startswith("__") or hasattr(builtins, name):
            continue  # never let the candidate stand in for `len`, `sorted`, ...
        out[name] = value.__name__ if type(value) is type(sys) else None
    return out


def _answer(frame: bytes, ns: dict, table: dict) -> bytes:
    try:
        request = loads(frame)
        result = _do(request, lambda h: ns[h.key] if isinstance(h.key, str) else table[h.key], table)
        return dumps(("ok", result))
    except BaseException as e:  # noqa: BLE001 - the candidate's exception is the answer
        try:
            return dumps(("raise", type(e).__name__, str(e)[:200]))
        except BaseException:  # noqa: BLE001 - a message that cannot even be printed
            return dumps(("raise", "RuntimeError", ""))


def _do(request: tuple, resolve, table: dict) -> object:
    op, target, *rest = request
    args = _resolved(rest, resolve)
    obj = resolve(target)
    if op == "call":
        value = obj(*args[0], **args[1])
    elif op == "getattr":
        value = getattr(obj, args[0])
    elif op == "setattr":
        value = setattr(obj, args[0], args[1])
    elif op == "list":
        value = list(obj)
    else:
        raise ValueError(f"unknown request {op!r}")
    return plain(value, table)


def _resolved(value: object, resolve) -> object:
    """The judge's arguments with handles replaced by the objects they stand for."""
    if type(value) is Handle:
        return resolve(value)
    if type(value) in (list, tuple, set, frozenset):
        return type(value)(_resolved(v, resolve) for v in value)
    if type(value) is dict:
        return {_resolved(k, resolve): _resolved(v, resolve) for k, v in value.items()}
    return value


def plain(value: object, table: dict, depth: int = 0) -> object:
    """Builtin data only: a subclass of a builtin becomes the builtin (its overrides stay behind), anything else a Handle."""
    if depth > 200:
        raise RecursionError("value nested too deeply to send")
    if type(value) in PLAIN or any(value is t for t in TYPES):
        return value
    for base, convert in _CONVERT.items():
        if isinstance(value, base):
            return convert(value)
    for base in (list, tuple, set, frozenset):
        if isinstance(value, base):
            return base(plain(v, table, depth + 1) for v in base.__iter__(value))
    if isinstance(value, dict):
        return {plain(k, table, depth + 1): plain(v, table, depth + 1) for k, v in dict.items(value)}
    key = len(table)
    table[key] = value
    return Handle(key)


# The builtin value inside a subclass instance, read with the builtin's own method (an exact copy).
_CONVERT = {
    int: int.__index__,
    float: float.__float__,
    complex: complex.__complex__,
    str: str.__str__,
    bytes: lambda v: bytes.__getitem__(v, slice(None)),
    bytearray: bytearray,
}


# --- the judge side -------------------------------------------------------------------------------------------
class Remote:
    """The judge's view of a candidate object: calls, attributes and iteration go to the candidate's process.

    It compares by identity and refuses truth tests, so no verdict ever rests on the candidate's own methods.
    """

    __slots__ = ("key",)
    channel: tuple[int, int] = (-1, -1)

    def __init__(self, key: int | str) -> None:
        object.__setattr__(self, "key", key)

    def __setstate__(self, state) -> None:
        raise pickle.UnpicklingError("a handle carries no state")

    def _ask(self, *request) -> object:
        wfd, rfd = Remote.channel
        write_frame(wfd, b"C" + dumps(request))
        frame = read_frame(rfd)
        answer = loads(frame, Remote) if frame else ("raise", "RuntimeError", "the candidate did not answer")
        if answer[0] == "ok":
            return answer[1]
        raise _exception(str(answer[1]))(str(answer[2]) if len(answer) > 2 else "")

    def __call__(self, *args, **kwargs):
        return self._ask("call", self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", self, name)

    def __setattr__(self, name: str, value) -> None:
        self._ask("setattr", self, name, value)

    def __iter__(self):
        return iter(self._ask("list", self))

    def __bool__(self) -> bool:
        raise TypeError("a candidate object has no truth value here; return plain data")

    def __repr__(self) -> str:
        return f"<candidate object {self.key!r}>"


def _exception(name: str) -> type:
    """The builtin exception of that name (tests may expect a ValueError), else RuntimeError."""
    kind = getattr(builtins, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError


def judge(setup: str, tests: list[str], rfd: int, wfd: int) -> None:
    """Bind the candidate's names, run the setup, then each test; report `Vready` and `V<i> <1|0>` per test, or `Vload`."""
    sys.stdout = sys.stderr = _Sink()
    Remote.channel = (wfd, rfd)
    try:
        hello = loads(read_frame(rfd) or b"", Remote)
    except BaseException:  # noqa: BLE001 - no answer, or one that is not plain data: the code does not load
        hello = ("load_error",)
    ns = _bind(hello[1]) if type(hello) is tuple and len(hello) == 2 and hello[0] == "ready" else None
    try:
        if ns is not None:
            exec(compile(setup, "setup.py", "exec"), ns)
    except BaseException:  # noqa: BLE001 - setup that fails on the candidate's classes: the code does not load
        ns = None
    if ns is None:
        write_frame(wfd, b"Vload")
        return
    write_frame(wfd, b"Vready")
    for i, test in enumerate(tests):
        try:
            exec(compile(test, "test.py", "exec"), ns)
            ok = 1
        except BaseException:  # noqa: BLE001 - a test that raises anything fails
            ok = 0
        write_frame(wfd, f"V{i} {ok}".encode())


def _bind(names: object) -> dict:
    """The test namespace: a Remote per candidate name, the judge's own import for a standard module.

    The list comes from the candidate's process, so it is checked again here: no dunder, no builtin's name.
    """
    ns: dict = {"__name__": "__main__", "__builtins__": builtins}
    for name, module in names.items() if type(names) is dict else ():
        if type(name) is not str or not name.isidentifier() or name.startswith("__") or hasattr(builtins, name):
            continue
        if type(module) is str and module.split(".")[0] in sys.stdlib_module_names:
            try:
                ns[name] = importlib.import_module(module)
            except BaseException:  # noqa: BLE001 - a module the judge cannot import is left unbound
                pass
        elif module is None:
            ns[name] = Remote(name)
    return ns

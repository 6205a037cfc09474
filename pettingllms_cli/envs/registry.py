"""Envs by name: the built-ins, those a package registers under the `pettingllms.envs` entry point group, and any
`module:Class` import path (docs/envs.md, "Your own env").

`EnvRegistry` is a plain `name -> class` dict of the built-ins (what iterating it lists); a name it does not hold
is looked up when first asked for (an entry point, then an import path) and remembered apart, so
`ENVS[spec.env.name]` works everywhere once the spec validated.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from pettingllms_cli.envs.base import TurnEnv
from pettingllms_cli.envs.imports import NotAnImportPath, import_object

ENTRY_POINT_GROUP = "pettingllms.envs"


class EnvError(ValueError):
    """An env name that names no env: the message is one line naming it and why."""


class EnvRegistry(dict[str, type[TurnEnv]]):
    """The built-in envs; other names resolve on first lookup (`resolve`) and are remembered, not listed."""

    def __init__(self, builtins: dict[str, type[TurnEnv]]) -> None:
        super().__init__(builtins)
        self.resolved: dict[str, type[TurnEnv]] = {}  # entry points and import paths looked up so far

    def __missing__(self, name: str) -> type[TurnEnv]:
        try:
            return self.resolve(name)
        except EnvError as e:
            raise KeyError(str(e)) from None

    def resolve(self, name: str) -> type[TurnEnv]:
        """The env class `name` stands for; an `EnvError` naming it and the reason when none."""
        if name in self:
            return self[name]
        if name not in self.resolved:
            self.resolved[name] = from_entry_point(name) or from_import_path(name, sorted(self))
        return self.resolved[name]

    def entry_point_names(self) -> list[str]:
        """Names packages register under `pettingllms.envs` (not loaded)."""
        return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in self)


def from_entry_point(name: str) -> type[TurnEnv] | None:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        return None
    try:
        loaded = found[0].load()
    except Exception as e:  # a third-party package's import can fail any way
        raise EnvError(f"env.name {name!r}: entry point {found[0].value!r} does not import ({type(e).__name__}: {e})") from None
    return checked_env_class(loaded, f"env.name {name!r} (entry point {found[0].value!r})")


def from_import_path(path: str, known: list[str]) -> type[TurnEnv]:
    """`package.module:Class`, imported from installed packages or the current folder."""
    try:
        obj = import_object(path)
    except NotAnImportPath:
        raise EnvError(f"env.name: unknown env {path!r}; known: {', '.join(known)} (or an import path `module:Class`)") from None
    except ValueError as e:
        raise EnvError(f"env.name {path!r}: {e}") from None
    return checked_env_class(obj, f"env.name {path!r}")


def checked_env_class(obj: object, what: str) -> type[TurnEnv]:
    """`obj` if it is a usable env class (a TurnEnv subclass with a name and layouts), else an EnvError."""
    if not isinstance(obj, type) or not issubclass(obj, TurnEnv):
        raise EnvError(f"{what}: {obj!r} is not an env class (subclass pettingllms_cli.envs.TurnEnv)")
    missing = [a for a in ("name", "layouts") if not hasattr(obj, a)]
    if missing:
        raise EnvError(f"{what}: {obj.__name__} does not set {', '.join(missing)} (see docs/envs.md, 'Your own env')")
    return obj

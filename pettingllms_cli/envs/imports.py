"""`package.module:attr` import paths, as `env.name` and the external env's `program` take them."""

from __future__ import annotations

import importlib
import os
import sys


class NotAnImportPath(ValueError):
    """The text has no `module:attr` shape (each caller says what it expected instead)."""


def import_object(path: str) -> object:
    """The object `package.module:attr` names (attr may be dotted), imported from installed packages or the current
    folder, as `python -m` would. A module that does not import or lacks the attribute is a ValueError in one line."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise NotAnImportPath(path)
    if os.getcwd() not in sys.path and "" not in sys.path:  # a module beside the spec imports
        sys.path.append(os.getcwd())
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as e:  # a user's module can fail any way: name it and the reason in one line
        raise ValueError(f"module {module_name!r} does not import ({type(e).__name__}: {e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj

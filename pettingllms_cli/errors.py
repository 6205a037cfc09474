"""Errors meant for people: the CLI prints their message on one line and exits with code 2."""


class UserError(Exception):
    """A mistake the user can fix (bad spec, missing file, unknown name). Never shows a traceback."""

    exit_code = 2

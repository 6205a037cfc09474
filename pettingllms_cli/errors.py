"""Errors meant for people: the CLI prints their message on one line and exits with their code (2, or 130)."""


class UserError(Exception):
    """A mistake the user can fix (bad spec, missing file, unknown name). Never shows a traceback."""

    exit_code = 2


class Stopped(Exception):
    """A command stopped by SIGINT/SIGTERM after saving its work; the message says what is missing and how to go on."""

    exit_code = 130  # 128 + SIGINT, as for any interrupted command

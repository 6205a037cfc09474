"""The `pettingllms` command line, one module per group of commands (common.py holds what they share)."""

from pettingllms_cli.cli.common import app
from pettingllms_cli.cli.main import main

__all__ = ["app", "main"]

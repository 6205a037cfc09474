"""The `pettingllms` entry point. User mistakes end as one line on stderr and exit code 2."""

from __future__ import annotations

import logging
import os
import sys
import warnings

import typer
from rich.console import Console
from rich.markup import escape

from pettingllms_cli import distributed

# Each module registers its commands on import; this order is --help's.
# isort: off
import pettingllms_cli.cli.train  # noqa: F401
import pettingllms_cli.cli.evaluate  # noqa: F401
import pettingllms_cli.cli.compare  # noqa: F401
import pettingllms_cli.cli.use  # noqa: F401
import pettingllms_cli.cli.serve  # noqa: F401
import pettingllms_cli.cli.catalogue  # noqa: F401

# isort: on
from pettingllms_cli.cli.common import app, console
from pettingllms_cli.errors import Stopped, UserError
from pettingllms_cli.memory import return_large_frees_to_os

INTERRUPTED = 130  # exit code of a command stopped by Ctrl-C or a second SIGINT/SIGTERM (128 + SIGINT)


def _say_interrupted() -> None:
    """One line on stderr: what stopped the command and what it left behind."""
    from pettingllms_cli.training.graceful import abort_reason

    reason = abort_reason() or "interrupted (Ctrl-C); the command did not finish"
    Console(stderr=True).print(f"aborted: {reason}", markup=False, highlight=False, soft_wrap=True)


def _say_error(message: str) -> None:
    """One `error:` line on stderr, never read as rich markup."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(' '.join(message.splitlines()))}", highlight=False, soft_wrap=True)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notes are not for users
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # bitsandbytes warns at import, on CPUs with AVX512-BF16, that an optional kernel for its bf16 CPU
    # inference path is missing; pettingllms keeps that path off (models/loader.py, keep_4bit_layout).
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    return_large_frees_to_os()  # N agents' activations, freed in turn, must not pile up
    try:
        distributed.init()  # under torchrun / accelerate launch; a no-op in one process
        console.quiet = not distributed.is_main()  # rank 0 alone prints
        # Without standalone mode click returns, not raises, the code of a typer.Exit (and typer turns
        # Ctrl-C into Exit(130)): pass it on, or `envs check` failures and aborts would exit 0.
        code = app(standalone_mode=False)
        if isinstance(code, int) and code != 0:
            if code == INTERRUPTED:
                _say_interrupted()
            sys.exit(code)
        distributed.shutdown(succeeded=True)
    except Stopped as e:  # a graceful stop: what was kept, what is missing, how to go on
        Console(stderr=True).print(" ".join(str(e).splitlines()), markup=False, highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except UserError as e:
        _say_error(str(e))
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _say_interrupted()
        sys.exit(INTERRUPTED)
    except Exception as e:  # usage errors (a bad flag value, an unknown option) carry their own exit code
        import click

        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `pettingllms` (or group): its help is already printed
            sys.exit(0)
        if isinstance(e, click.exceptions.ClickException | typer.TyperException) and hasattr(e, "format_message"):
            _say_error(e.format_message())  # click's and typer's own (typer >= 0.29 vendors click): one line each
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Exit | typer.Exit):
            sys.exit(e.exit_code)
        raise
    finally:
        distributed.shutdown()

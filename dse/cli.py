"""The `dse` command: trace, sim, sweep, report, hardware, capacity, serve, engine-fit, methods, compare.

Subcommands live in `dse/commands/<name>.py`, each exposing a click command named `command`; they
are imported lazily so that `dse sim` or `dse report` never imports torch.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

import click

from dse.errors import user_error_types

_SUBCOMMANDS = {
    "trace": "Run the real model with a KV policy: measured accuracy and a trace.",
    "sim": "Replay a trace (or a synthetic one) on a hardware profile: simulated latency.",
    "hardware": "List or show hardware and software profiles.",
    "sweep": "Run an Optuna design-space study from a study file.",
    "report": "Write a self-contained HTML report of a study.",
    "capacity": "Largest batch under a per-token latency SLO, per hardware profile and method.",
    "serve": "Request-level serving simulation: TTFT, per-token latency, the highest rate under SLOs.",
    "engine-fit": "Fit a serving engine's overheads to one measured low-load run: an engine profile.",
    "methods": "List the KV methods (the method catalogue) and each method's knobs.",
    "compare": "Two runs' accuracy on the same prompts: paired difference, McNemar, floor, disagreements.",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _SUBCOMMANDS:
            return None
        module = importlib.import_module(f"dse.commands.{name.replace('-', '_')}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(_SUBCOMMANDS.items()))


@click.group(cls=_LazyGroup)
@click.version_option(version=None, package_name="freekv-dse", prog_name="dse",
                      message="%(prog)s (freekv-dse) %(version)s")
def cli() -> None:
    """freekv-dse: design-space exploration of KV-cache retrieval (FreeKV) for long-context decoding."""


_PLAIN_WARNINGS = ("CacheRebuiltWarning", "StoredAttributeWarning")  # shown as one line, no source line


def _show_plain_warnings() -> None:
    """Warnings meant for the user (a damaged cache file rebuilt, a stored trial left out) print as
    `warning: ...`; other warnings keep Python's form."""
    default = warnings.showwarning
    if getattr(default, "plain_warnings", False):
        return

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if category.__name__ in _PLAIN_WARNINGS:
            click.echo(f"warning: {message}", err=True)
        else:
            default(message, category, filename, lineno, file, line)

    show.plain_warnings = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors print one paragraph and exit 2, never a traceback."""
    _show_plain_warnings()
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except user_error_types() as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except OSError as exc:  # a path the user named that the system refuses (permission, a full disk, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"error: {where}{exc.strerror or exc}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`dse methods`: the method catalogue (traces.catalogue), as a table, one method's knobs, or Markdown.

    dse methods                 every method: kind, runtime policy, simulator model, summary
    dse methods quest           one method: source, where its halves live, every knob (side, valid, default)
    dse methods --markdown      the method list README shows (README and docs/methods.md are checked
                                against it: tests/dse/test_methods_cli.py)
    dse methods --markdown --knobs   the knob tables of docs/methods.md
    dse methods --update-docs   rewrite those tables in README.md and docs/methods.md (between their
                                `<!-- methods: begin/end -->` and `<!-- knobs: begin/end -->` markers)

Never imports torch.
"""

from __future__ import annotations

from pathlib import Path

import click

from traces.catalogue import CATALOGUE, MethodEntry, entry

__all__ = ["command", "methods_markdown", "knobs_markdown", "update_docs", "DOC_SECTIONS"]

# file (relative to the repository root) -> the marked sections it holds
DOC_SECTIONS = {"README.md": ("methods",), "docs/methods.md": ("methods", "knobs")}


def _halves(e: MethodEntry) -> tuple[str, str]:
    runtime = "yes" if e.policy else "-"
    if e.model is None:
        return runtime, "-"
    if e.policy:
        return runtime, "yes"
    return runtime, f"yes (prices {e.replays} traces)" if e.replays else "yes (closed form, no trace)"


def methods_markdown() -> str:
    """The catalogue as a Markdown table: method, kind, runtime policy, simulator model, summary."""
    lines = ["| method | kind | runtime policy | simulator model | what it does |", "|---|---|---|---|---|"]
    for e in CATALOGUE.values():
        runtime, simulator = _halves(e)
        aka = f" (was `{'`, `'.join(e.aliases)}`)" if e.aliases else ""
        lines.append(f"| `{e.name}`{aka} | {e.kind} | {runtime} | {simulator} | {e.summary} |")
    return "\n".join(lines) + "\n"


def _default(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def knobs_markdown() -> str:
    """One Markdown table per method with knobs (ablations share their method's): knob, side, valid,
    default, what it is."""
    out = []
    seen: set[type] = set()
    for e in CATALOGUE.values():
        specs = e.knobs.specs()
        if not specs or e.knobs in seen:
            continue
        seen.add(e.knobs)
        users = [x.name for x in CATALOGUE.values() if x.knobs is e.knobs]
        out.append(f"**{', '.join(users)}**\n")
        out.append("| knob | read by | valid | default | what it is |\n|---|---|---|---|---|")
        for s in specs:
            out.append(f"| `{s.name}` | {s.side} | {s.valid()} | `{_default(s.default)}` | {s.doc} |")
        out.append("")
    return "\n".join(out)


def _section(marker: str) -> str:
    return methods_markdown() if marker == "methods" else knobs_markdown()


def update_docs(root: Path) -> list[Path]:
    """Rewrite every marked section of DOC_SECTIONS under `root` with the catalogue's tables; the files
    changed. A file without its markers is a DseError naming it."""
    from dse.errors import DseError
    from dse.paths import write_text

    changed = []
    for name, markers in DOC_SECTIONS.items():
        path = root / name
        text = old = path.read_text(encoding="utf-8")
        for marker in markers:
            begin, end = f"<!-- {marker}: begin -->\n", f"<!-- {marker}: end -->"
            if begin not in text or end not in text:
                raise DseError(f"{path}: the markers {begin.strip()} ... {end} are missing")
            head, rest = text.split(begin, 1)
            text = head + begin + _section(marker) + end + rest.split(end, 1)[1]
        if text != old:
            write_text(path, text, str(path))
            changed.append(path)
    return changed


def _show_one(name: str) -> None:
    from rich.table import Table

    from dse.commands.sim_render import console

    e = entry(name)
    out = console()
    out.print(f"[bold]{e.name}[/] ({e.kind}): {e.summary}")
    if e.source:
        out.print(f"source: {e.source}")
    out.print(f"runtime policy: {e.policy or 'none'}; simulator model: {e.model or 'none'}"
              + (f"; its model prices traces of {e.replays}" if e.replays else ""))
    if not e.knobs.specs():
        out.print("knobs: none (only the shared retrieval knobs: page size, budget, sink, window, "
                  "dense layers)")
        return
    table = Table(title=f"knobs of {e.name} (dse trace --option / dse sim --option / study search.knobs)")
    for col in ("knob", "read by", "valid", "default", "what it is"):
        table.add_column(col)
    for s in e.knobs.specs():
        table.add_row(s.name, s.side, s.valid(), _default(s.default), s.doc)
    out.print(table)


@click.command(name="methods")
@click.argument("method", required=False)
@click.option("--markdown", is_flag=True, help="print Markdown (the method list of README and docs)")
@click.option("--knobs", "knob_tables", is_flag=True, help="with --markdown: the knob tables instead")
@click.option("--update-docs", "rewrite_docs", is_flag=True,
              help="rewrite the method and knob tables of README.md and docs/methods.md in this checkout")
def command(method: str | None, markdown: bool, knob_tables: bool, rewrite_docs: bool) -> None:
    """The KV methods this toolkit knows (the method catalogue): which have a runtime policy (dse trace)
    and a simulator model (dse sim), and each method's knobs."""
    from rich.table import Table

    from dse.commands.sim_render import console

    if rewrite_docs:
        changed = update_docs(Path(__file__).resolve().parents[2])
        click.echo("rewrote " + ", ".join(str(p) for p in changed) if changed else "the tables are current")
        return
    if method is not None:
        _show_one(method)
        return
    if markdown:
        click.echo(knobs_markdown() if knob_tables else methods_markdown(), nl=False)
        return
    table = Table(title="KV methods (traces/catalogue): `dse methods METHOD` shows one method's knobs")
    for col in ("method", "kind", "runtime policy", "simulator model", "what it does"):
        table.add_column(col)
    for e in CATALOGUE.values():
        table.add_row(e.name, e.kind, *_halves(e), e.summary)
    console().print(table)

"""`dse methods` shows the method catalogue; README's and docs/methods.md's method lists and knob tables are
its output (`dse methods --update-docs` rewrites them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.cli import main
from dse.commands.methods import knobs_markdown, methods_markdown
from traces.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]


def _between(text: str, marker: str) -> str:
    begin, end = f"<!-- {marker}: begin -->\n", f"<!-- {marker}: end -->"
    assert begin in text and end in text, f"markers of {marker} missing"
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_readme_lists_every_method_of_the_catalogue() -> None:
    assert _between((ROOT / "README.md").read_text(), "methods") == methods_markdown()


def test_docs_show_every_knob_of_the_catalogue() -> None:
    text = (ROOT / "docs" / "methods.md").read_text()
    assert _between(text, "methods") == methods_markdown()
    assert _between(text, "knobs") == knobs_markdown()


def test_dse_methods_lists_and_explains(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in CATALOGUE)
    assert main(["methods", "arkvale"]) == 0
    one = capsys.readouterr().out
    assert "top_pages" in one and "group_heads" in one and "simulator" in one
    assert main(["methods", "full"]) == 0 and "dense (dense)" in capsys.readouterr().out
    assert main(["methods", "lru"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'lru': valid methods are freekv" in err and "Traceback" not in err
    assert main(["methods", "--markdown"]) == 0 and capsys.readouterr().out == methods_markdown()


def test_update_docs_rewrites_only_the_marked_sections(tmp_path: Path) -> None:
    from dse.commands.methods import DOC_SECTIONS, update_docs
    from dse.errors import DseError

    for name, markers in DOC_SECTIONS.items():
        text = (ROOT / name).read_text()
        for marker in markers:  # a stale table in every marked section
            text = text.replace(_between(text, marker), "| `stale` |\n")
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert sorted(p.name for p in update_docs(tmp_path)) == ["README.md", "methods.md"]
    for name in DOC_SECTIONS:
        assert (tmp_path / name).read_text() == (ROOT / name).read_text()
    assert update_docs(tmp_path) == []
    (tmp_path / "README.md").write_text("no markers")
    with pytest.raises(DseError, match="README.md: the markers <!-- methods: begin --> ... "):
        update_docs(tmp_path)

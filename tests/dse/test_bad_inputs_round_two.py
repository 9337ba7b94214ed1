"""Bad inputs of every family replayed through `dse` (the cases are in bad_input_cases.py): numbers that are
not finite, not integers or out of range; YAML/JSON that explodes, recurses or nests too deep; files that
are FIFOs, devices, loops of links or not UTF-8; names that would become paths outside `--out`.

Each case must end with exit status 2, a message naming the flag/key/file, no traceback, and within the
alarm below (a FIFO read or an unbounded computation would otherwise hang the test, not fail it)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from bad_input_cases import CASES, Case, build_inputs

from dse.cli import main

CASE_SECONDS = 30


class _TooSlow(Exception):
    pass


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bad-inputs")
    build_inputs(directory)
    return directory


def _alarm(signum: int, frame: object) -> None:
    raise _TooSlow(f"the case took over {CASE_SECONDS} s (a hang or an unbounded computation)")


@pytest.mark.parametrize("case", CASES, ids=[f"{c.family}: {c.name}" for c in CASES])
def test_bad_input_is_refused_cleanly(case: Case, inputs: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(inputs)  # a study that slipped through would write runs/ here, not in the checkout
    for key, value in case.environment(inputs).items():
        monkeypatch.setenv(key, value)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        code = main(case.argv(inputs))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert code == 2, text
    assert "Traceback" not in text
    for needle in case.needles:
        assert needle.replace("{d}", str(inputs)) in text, (needle, text)
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    assert len(paragraphs) <= 2, text  # click's usage line + the error, or the error alone


def test_a_software_name_cannot_write_outside_out(inputs: Path, tmp_path: Path, capsys) -> None:
    build = inputs
    out = tmp_path / "mb" / "out"
    assert (
        main(
            [
                "sim",
                "calibrate",
                "--microbench",
                str(build / "microbench-evil-hw.json"),
                "--hardware",
                "a100-40g-pcie4",
                "--software",
                str(build / "software-evil.yaml"),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "plain file name" in capsys.readouterr().err
    assert not list(tmp_path.glob("**/escaped-calibrated.yaml"))


def test_a_utf8_byte_order_mark_is_accepted(inputs: Path) -> None:
    from sim.serving import load_requests

    (request,) = load_requests(inputs / "requests-bom.csv")
    assert (request.arrival_s, request.input_tokens, request.output_tokens) == (0.5, 64, 4)


def test_docs_list_every_numeric_range() -> None:
    from traces import numbers

    doc = (Path(__file__).resolve().parents[2] / "docs" / "inputs.md").read_text()
    for name in numbers.__all__:
        bound = getattr(numbers, name)
        if isinstance(bound, numbers.Range):
            assert f"| `{name}` | {bound.describe()} |" in doc, name

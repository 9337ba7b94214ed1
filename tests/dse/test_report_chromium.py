"""The whole report, built and opened in headless Chromium: every figure rendered, no JavaScript error.

Chromium is Debian's (`scripts/chromium.sh` installs it); chromium_render.py drives it (an injected
probe, every host name unresolvable, a full-page screenshot under the pytest tmp dir and under reports/).

- Default run: every section of the report, drawn from a results table whose simulated results are
  real simulator runs on synthetic demand (no runtime needed; conftest.py), rendered.
- Slow: `dse sweep` on a tiny real study (SmolLM2-135M, minutes on a CPU), then `build_report` on it,
  rendered; screenshot reports/test-screenshot.png.

Without chromium the rendering tests skip, unless CI=true, where they fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from chromium_render import check_render, check_rendered_content, chromium_path

from dse.cli import main as dse_main
from dse.report.page import Section, count_figures, render_page


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = chromium_path()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed but CI=true: run scripts/chromium.sh first")
        pytest.skip("chromium is not installed (run scripts/chromium.sh; Debian package `chromium`)")
    return exe


def test_report_sections_render_offline_in_chromium(
    chromium: str, simulated_sections: list[Section], tmp_path: Path
) -> None:
    sections = simulated_sections
    page = tmp_path / "sections.html"
    page.write_text(render_page("simulated sections", [("study", "s")], sections), encoding="utf-8")
    check_render(page, count_figures(sections), tmp_path, "test-sections-screenshot")
    check_rendered_content(page, tmp_path)


_TEST_STUDY = """
name: report-test
model: {{name: smollm2-135m}}
tasks: [{{name: passkey, context_tokens: 256, samples: 1, decode_tokens: 8}}]
search: {{method: [freekv], tau: [0.8, 0.95], page_size: [16], budget_tokens: [96], sink_tokens: [16],
         window_tokens: [32]}}
objectives: [{{metric: passkey_accuracy}}, {{latency: {{hardware: a100-40g-pcie4}}}}]
workload: {{input_tokens: 32768, output_tokens: 64, batch_sizes: [1, 4]}}
hardware: [a100-40g-pcie4, h100-pcie5]
target_model: llama-3.1-8b
slo: {{per_token_latency_s: 0.05}}
trials: 2
sampler: {{name: grid, seed: 0}}
baselines:
  dense: true
  untuned_freekv: {{tau: 0.9, page_size: 16, budget_tokens: 128, sink_tokens: 16, window_tokens: 32}}
device: cpu
storage: sqlite:///{tmp}/study.db
out_dir: {tmp}/runs
"""


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real study: `dse sweep` runs SmolLM2-135M (passkey, 256 tokens) for dense attention, untuned
    FreeKV and 2 trials, and replays the traces on Llama-3.1-8B's shape on two profiles (minutes on a
    2-core CPU)."""
    tmp = tmp_path_factory.mktemp("report-study")
    study = tmp / "study.yaml"
    study.write_text(_TEST_STUDY.format(tmp=tmp))
    assert dse_main(["sweep", str(study), "--no-progress"]) == 0
    return study


@pytest.mark.slow
def test_report_of_a_real_study_renders_in_chromium(chromium: str, tiny_study: Path, tmp_path: Path) -> None:
    from dse.report import build_report

    out = tmp_path / "report.html"
    summary = build_report(str(tiny_study), out)
    print(
        f"\nreport: {summary.n_figures} figures, {summary.size_bytes / 1e6:.1f} MB in {summary.seconds:.1f} s"
    )
    text = out.read_text(encoding="utf-8")
    for anchor in ("pareto", "why", "observation", "capacity"):
        assert f'<section id="{anchor}">' in text
    assert "trace mapped from smollm2-135m" in text  # traces of SmolLM2 replayed on Llama-3.1-8B
    assert text.count("badge-measured") > summary.n_figures // 2 and "badge-simulated" in text
    assert "Parameter importances need at least 10 distinct complete trials" in text  # 2 trials: a note
    steps = set(re.findall(r"Stream timeline of a (?:typical|corrected) step \(step (\d+)\)", text))
    assert len(steps) == 2 or "so there is no more corrected step to show" in text
    assert "<script src=" not in text and summary.size_bytes < 8e6
    assert summary.seconds < 120, f"report took {summary.seconds:.0f} s"
    check_render(out, summary.n_figures, tmp_path, "test-screenshot")
    check_rendered_content(out, tmp_path)
    # the same stored traces re-simulated on another profile and workload: nothing re-measured
    from dse.report.resimulate import parse_overrides

    again = tmp_path / "rtx.html"
    overrides = parse_overrides("rtx-4090,h100-pcie5", "input=600,output=16384,batch=1/4")
    summary = build_report(str(tiny_study), again, overrides=overrides)
    text = again.read_text(encoding="utf-8")
    assert "re-simulated" in text and "hardware rtx-4090, h100-pcie5" in text
    assert "Pareto front on rtx-4090" in text and "Pareto front on a100-40g-pcie4" not in text
    assert "600 tokens and 16384 output tokens" in text

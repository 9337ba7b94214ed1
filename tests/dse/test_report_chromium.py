"""The report opened in headless Chromium: every figure rendered, no JavaScript error, a screenshot.

Chromium is Debian's (`scripts/chromium.sh` installs it). The test injects a probe script as the first
element of <head> (it records `error` events, unhandled promise rejections and console.error), lets the
page load with every host name unresolvable (so the file must work offline), and reads the probe's JSON
verdict from `--dump-dom`. A second run saves a full-page screenshot for a human to look at: under the
pytest tmp dir and as reports/test-screenshot.png (gitignored); the test prints both paths.

Without chromium the test skips, unless CI=true, where it fails.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dse.cli import main as dse_main
from dse.report.page import FigureBlock, Section, TableBlock, render_page
from dse.report.provenance import Provenance

REPO = Path(__file__).resolve().parents[2]
_STATUS_ID = "__report_render_status"
_MAX_SCREENSHOT_PX = 16000
_WIDTH_PX = 1280

PROBE = (
    """<script>(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    var where = e.target && (e.target.src || e.target.href);
    errors.push("error: " + (e.message || ("failed to load " + where)));
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    errors.push("unhandled rejection: " + String(e.reason));
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return consoleError.apply(console, arguments);
  };
  function count() {
    var divs = document.querySelectorAll("div.plotly-graph-div"), rendered = 0;
    divs.forEach(function (d) { if (d.querySelector(".main-svg")) { rendered++; } });
    return [divs.length, rendered];
  }
  window.addEventListener("load", function () {
    var tries = 0;
    var timer = setInterval(function () {
      var c = count();
      tries++;
      if (c[0] === c[1] || tries > 150) {
        clearInterval(timer);
        var pre = document.createElement("pre");
        pre.id = "__STATUS_ID__";
        pre.textContent = JSON.stringify({plotly_divs: c[0], rendered: c[1], errors: errors,
                                          height_px: document.documentElement.scrollHeight});
        document.body.appendChild(pre);
      }
    }, 100);
  });
})();</script>"""
).replace("__STATUS_ID__", _STATUS_ID)


def chromium_path() -> str | None:
    for candidate in (shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _chromium(args: list[str], profile_dir: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    exe = chromium_path()
    assert exe is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000",
        "--hide-scrollbars",
    ]
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def render_status(html_path: Path, work_dir: Path) -> dict:
    """Load `html_path` with the probe injected; the probe's verdict (plotly_divs, rendered, errors,
    height_px)."""
    text = html_path.read_text(encoding="utf-8")
    head = text.index("<head>") + len("<head>")
    probed = work_dir / "probed.html"
    probed.write_text(text[:head] + PROBE + text[head:], encoding="utf-8")
    proc = _chromium(
        ["--dump-dom", f"--window-size={_WIDTH_PX},1000", probed.as_uri()], work_dir / "profile-dom"
    )
    match = re.search(rf'<pre id="{_STATUS_ID}">(.*?)</pre>', proc.stdout, re.S)
    assert match, (
        f"the probe never reported (chromium rc={proc.returncode}); stderr tail:\n{proc.stderr[-2000:]}"
    )
    return json.loads(html.unescape(match.group(1)))


def screenshot(html_path: Path, png_path: Path, height_px: int, work_dir: Path) -> None:
    """A full-page PNG (1280 px wide, the page's height up to 16000 px)."""
    height = max(800, min(height_px + 40, _MAX_SCREENSHOT_PX))
    proc = _chromium(
        [f"--screenshot={png_path}", f"--window-size={_WIDTH_PX},{height}", html_path.as_uri()],
        work_dir / "profile-shot",
    )
    assert png_path.is_file() and png_path.stat().st_size > 10_000, (
        f"no screenshot written (rc={proc.returncode}); stderr tail:\n{proc.stderr[-2000:]}"
    )


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = chromium_path()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed but CI=true: run scripts/chromium.sh first")
        pytest.skip("chromium is not installed (run scripts/chromium.sh; Debian package `chromium`)")
    return exe


def _check_render(html_path: Path, n_figures: int, work_dir: Path, name: str) -> Path:
    """Render checks shared by the tests; returns the screenshot path (also copied under reports/)."""
    status = render_status(html_path, work_dir)
    assert status["errors"] == [], f"JavaScript errors in {html_path}: {status['errors']}"
    assert status["plotly_divs"] == n_figures, status
    assert status["rendered"] == n_figures, f"only {status['rendered']} of {n_figures} figures rendered"
    png = work_dir / f"{name}.png"
    screenshot(html_path, png, status["height_px"], work_dir)
    shared = REPO / "reports" / f"{name}.png"
    shared.parent.mkdir(exist_ok=True)
    shutil.copyfile(png, shared)
    print(f"\nscreenshot: {png}\nscreenshot: {shared}")
    return png


def _simulated_page(path: Path) -> int:
    """A page of the report's figure kinds (scatter, stacked bars, heatmap, subplots, stream timeline),
    all drawn from one real simulator run on synthetic demand. Returns the number of figures."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from sim import SimConfig, run_simulation, synthetic_demand
    from sim.timeline import timeline_figure

    spec = "correction=0.3,hit=0.8"
    demand = synthetic_demand(spec, model="llama-3.1-8b", seed=0)
    cfg = SimConfig(
        model="llama-3.1-8b",
        hardware="a100-40g-pcie4",
        batch_size=2,
        input_tokens=8192,
        output_tokens=16,
        page_size=32,
        budget_tokens=1024,
        sink_tokens=128,
        window_tokens=128,
    )
    res = run_simulation(cfg, demand, seed=0, timeline_steps=(3,))
    out = res.to_dict()
    prov = Provenance(simulated=("llama-3.1-8b on a100-40g-pcie4",), synthetic=(spec,))
    lat = go.Figure(go.Scatter(y=res.step_latency_s * 1e3, mode="lines+markers"))
    bars = go.Figure(
        [go.Bar(y=["freekv"], x=[v * 1e3], name=op, orientation="h") for op, v in out["breakdown_s"].items()]
    )
    bars.update_layout(barmode="stack")
    heat = go.Figure(go.Heatmap(z=demand.corrected[0].mean(axis=0).tolist(), colorscale="RdYlGn"))
    two = make_subplots(rows=1, cols=2)
    two.add_trace(go.Bar(x=["h2d", "d2h"], y=list(out["link_utilisation"].values())), row=1, col=1)
    two.add_trace(go.Scatter(x=[1, 2], y=[out["prefill_s"], out["decode_s"]]), row=1, col=2)
    timeline = timeline_figure(res.timeline(3), title="")
    blocks = [
        FigureBlock(f"figure {i}", fig, "caption", prov)
        for i, fig in enumerate((lat, bars, heat, two, timeline))
    ]
    table = TableBlock(
        "memory", ("gpu bytes", "fits"), ((str(out["memory"]["gpu_bytes"]), "yes"),), "c", prov
    )
    page = render_page(
        "simulated figures",
        [("profile", "a100-40g-pcie4")],
        [Section("a", "A", "q?", (*blocks[:3], table)), Section("b", "B", "q?", tuple(blocks[3:]))],
    )
    path.write_text(page, encoding="utf-8")
    return len(blocks)


def test_page_of_simulated_figures_renders_offline_in_chromium(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    n_figures = _simulated_page(page)
    _check_render(page, n_figures, tmp_path, "test-page-screenshot")


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
    assert "trace transplanted from smollm2-135m" in text  # traces of SmolLM2 replayed on Llama-3.1-8B
    assert text.count("badge-measured") > summary.n_figures // 2 and "badge-simulated" in text
    assert "Parameter importances need at least 4 complete trials" in text  # 2 trials: a note, no failure
    assert "<script src=" not in text and summary.size_bytes < 8e6
    assert summary.seconds < 120, f"report took {summary.seconds:.0f} s"
    _check_render(out, summary.n_figures, tmp_path, "test-screenshot")


def test_cli_reports_a_missing_study_in_one_paragraph(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert dse_main(["report", str(tmp_path / "nope.db"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ")
        and "not an existing file or a storage URL" in err
        and "Traceback" not in err
    )

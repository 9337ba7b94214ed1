"""Render a report page in Debian's headless Chromium (`scripts/chromium.sh` installs it) and check it.

The probe script is injected as the first element of <head> (it records `error` events, unhandled
promise rejections and console.error); the page loads with every host name unresolvable (so the file
must work offline) and the probe's JSON verdict is read from `--dump-dom`. A second run saves a
full-page screenshot for a human to look at: under the test's work dir and under reports/ (gitignored);
the paths are printed (run pytest with -s to see them). Used by test_report_chromium.py.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["check_render", "check_rendered_content", "chromium_path", "render_status", "rendered_tables",
           "screenshot"]

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


def check_render(html_path: Path, n_figures: int, work_dir: Path, name: str) -> Path:
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



SHAPES_PROBE = """<script>window.addEventListener("load", function () { setTimeout(function () {
  var out = [];
  document.querySelectorAll("div.plotly-graph-div").forEach(function (d) {
    var slo = (d.layout && d.layout.shapes || []).filter(function (s) { return s.name === "slo"; }).length;
    var rendered = d.querySelectorAll(".shapelayer path, .layer-above path").length;
    var bars = [];
    (d.data || []).forEach(function (t) {
      if (t.type === "bar" && t.marker && typeof t.marker.color === "string") {
        bars.push([t.name, t.marker.color]);
      }
    });
    var fl = d._fullLayout || {};
    var first = d.data[0] || {};
    var axis = first.orientation === "h" ? fl.xaxis : fl.yaxis;
    out.push({slo: slo, drawn: rendered, bars: bars, type: first.type,
              value_axis: axis ? {range: axis.range, type: axis.type} : null});
  });
  var pre = document.createElement("pre"); pre.id = "__shapes"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 1500); });</script>"""


def check_rendered_content(page: Path, work_dir: Path) -> None:
    """What the rendered page shows: SLO lines drawn on the latency figures, one colour per operation
    across figures, bar charts starting at zero."""
    text = page.read_text(encoding="utf-8")
    head = text.index("<head>") + len("<head>")
    probed = work_dir / "shapes.html"
    probed.write_text(text[:head] + SHAPES_PROBE + text[head:], encoding="utf-8")
    proc = _chromium(["--dump-dom", f"--window-size={_WIDTH_PX},1000", probed.as_uri()], work_dir / "p2")
    match = re.search(r'<pre id="__shapes">(.*?)</pre>', proc.stdout, re.S)
    assert match, f"the shapes probe never reported; stderr tail:\n{proc.stderr[-2000:]}"
    figures = json.loads(html.unescape(match.group(1)))
    with_slo = [f for f in figures if f["slo"]]
    # Pareto (2 profiles), breakdowns (2), latency vs batch and vs context (2 x 2)
    assert len(with_slo) >= 8, figures
    assert all(f["drawn"] > 0 for f in with_slo)  # the line is drawn, not only declared
    colours: dict[str, set[str]] = {}
    for f in figures:
        for name, colour in f["bars"]:
            colours.setdefault(name.split(":", 1)[0].removesuffix(".host"), set()).add(colour)
    common = ("qkv", "attention", "ffn", "select", "recall_sync")
    shared = {op: c for op, c in colours.items() if op in common}
    assert shared and all(len(c) == 1 for c in shared.values()), colours
    bar_charts = [f for f in figures if f["type"] == "bar" and f["value_axis"] is not None]
    assert bar_charts
    for f in bar_charts:  # value axes of bar charts are linear and start at zero
        assert f["value_axis"]["type"] == "linear" and f["value_axis"]["range"][0] <= 0, f


TABLES_PROBE = """<script>window.addEventListener("load", function () {
  function texts(root, selector) {
    return Array.prototype.map.call(root.querySelectorAll(selector), function (c) { return c.textContent; });
  }
  var out = [];
  document.querySelectorAll("figure.card").forEach(function (f) {
    var table = f.querySelector("table.data");
    if (!table) { return; }
    var caption = f.querySelector("figcaption");
    out.push({title: f.querySelector("h3").textContent, header: texts(table, "thead th"),
              rows: Array.prototype.map.call(table.querySelectorAll("tbody tr"), function (tr) {
                return texts(tr, "td");
              }),
              caption: caption ? caption.textContent : ""});
  });
  var pre = document.createElement("pre"); pre.id = "__tables"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def rendered_tables(page: Path, work_dir: Path) -> list[dict]:
    """The data tables of the page as Chromium rendered them: [{title, header, rows, caption}], cell text
    read from the DOM after load."""
    text = page.read_text(encoding="utf-8")
    head = text.index("<head>") + len("<head>")
    probed = work_dir / "tables.html"
    probed.write_text(text[:head] + TABLES_PROBE + text[head:], encoding="utf-8")
    proc = _chromium(["--dump-dom", f"--window-size={_WIDTH_PX},1000", probed.as_uri()], work_dir / "p3")
    match = re.search(r'<pre id="__tables">(.*?)</pre>', proc.stdout, re.S)
    assert match, f"the tables probe never reported; stderr tail:\n{proc.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))

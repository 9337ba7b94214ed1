"""The report opened in headless Chromium: every figure rendered, no JavaScript error, a screenshot.

Chromium is Debian's (`scripts/chromium.sh` installs it). The test injects a probe script as the first
element of <head> (it records `error` events, unhandled promise rejections and console.error), lets the
page load with every host name unresolvable (so the file must work offline), and reads the probe's JSON
verdict from `--dump-dom`. A second run saves a full-page screenshot for a human to look at: under the
pytest tmp dir and as reports/test-screenshot.png (gitignored); the test prints both paths.

Without chromium the test skips, unless CI=true, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
    return json.loads(
        match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


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

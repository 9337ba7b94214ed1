"""Run every case of tests/dse/bad_input_cases.py through `python -m dse.cli` in a subprocess and classify
the outcome: clean (exit 2, every needle, no traceback), weak (exit 2, a needle missing), traceback, silent
(exit 0), hang (still running after 60 s). Two cases at a time; prints one line per case and the counts.

    python scripts/bad_input_probe.py CODE_DIR [CASE NAME ...]

CODE_DIR is the checkout whose `dse` runs (e.g. `git archive <commit> | tar -x -C DIR` of an older commit,
to count "before"); the cases always come from this checkout's tests/dse.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TIMEOUT_S = 60


def _run(case: Any, code: Path, directory: Path) -> tuple[Any, str, float, str]:
    env = {**os.environ, "PYTHONPATH": str(code), **case.environment(directory)}
    start = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dse.cli", *case.argv(directory)],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return case, "hang", TIMEOUT_S, ""
    text = proc.stderr + proc.stdout
    if "Traceback" in text:
        kind = "traceback"
    elif proc.returncode == 0:
        kind = "silent"
    elif proc.returncode == 2:
        kind = "clean" if all(n in text for n in case.needles) else "weak"
    else:
        kind = f"exit{proc.returncode}"
    last = text.strip().splitlines()[-1][:300] if text.strip() else ""
    return case, kind, time.time() - start, last


def main() -> None:
    code = Path(sys.argv[1]).resolve()
    sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "dse"), str(code)]
    from bad_input_cases import CASES, build_inputs

    directory = Path(tempfile.mkdtemp(prefix="probe-"))
    build_inputs(directory)
    only = set(sys.argv[2:])
    cases = [c for c in CASES if not only or c.name in only]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: _run(c, code, directory), cases))
    for case, kind, seconds, last in results:
        print(f"{case.family:8} {kind:9} {seconds:5.1f}s  {case.name}  | {last}")
    print(Counter((c.family, k) for c, k, _, _ in results))
    print(Counter(k for _, k, _, _ in results))


if __name__ == "__main__":
    main()

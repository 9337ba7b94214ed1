"""Make `import traces` mean the package, not this test folder.

pytest puts `tests/` on sys.path (rootdir conftest, no __init__.py), where `tests/traces/` looks like a
namespace package called `traces` that shadows the real one unless the repository root is on sys.path
too (a regular package beats a namespace portion wherever it sits on the path). Until pyproject sets
`pythonpath = ["."]` for pytest, do that here, and drop a shadowing namespace module imported earlier.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
if getattr(sys.modules.get("traces"), "__file__", "") is None:
    del sys.modules["traces"]

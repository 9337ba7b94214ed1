"""Make `import sim` mean the package, not this test folder (same fix as tests/traces/conftest.py).

pytest puts `tests/` on sys.path (rootdir conftest, no __init__.py), where `tests/sim/` looks like a
namespace package called `sim` that shadows the real one unless the repository root is on sys.path too.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
for _name in ("sim", "traces"):
    if getattr(sys.modules.get(_name), "__file__", "") is None:
        del sys.modules[_name]

"""Write the frozen format-version-1 trace in tests/traces/assets/v1_small/ (run once; kept in git).

    .venv/bin/python tests/traces/make_v1_asset.py

It also writes expected.json, every record as plain JSON, so test_trace_asset_v1.py can check that any future
reader decodes the frozen binary to exactly these values. Do NOT regenerate it after a format change:
the point of the asset is that old traces stay readable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from trace_factory import make_meta, random_run, tiny_model, write_trace  # noqa: E402

from traces import PrefillRecord, StepRecord  # noqa: E402

ASSET = HERE / "assets" / "v1_small"


def _floats(a: np.ndarray) -> list:
    return [None if np.isnan(x) else float(x) for x in np.asarray(a, dtype=np.float64).ravel()]


def _nested(n: tuple) -> list:
    return [[ids.tolist() for ids in layer] for layer in n]


def record_to_json(rec: PrefillRecord | StepRecord) -> dict:
    if isinstance(rec, PrefillRecord):
        return {"kind": "prefill", "sequence": rec.sequence, "prompt_tokens": rec.prompt_tokens,
                "initial_selected": _nested(rec.initial_selected), "timings_s": rec.timings_s}
    return {
        "kind": "step", "sequence": rec.sequence, "step": rec.step, "context_tokens": rec.context_tokens,
        "similarity": _floats(rec.similarity), "corrected": rec.corrected.ravel().tolist(),
        "selected": _nested(rec.selected), "missed": _nested(rec.missed),
        "attended_tokens": rec.attended_tokens.ravel().tolist(), "timings_s": rec.timings_s,
        "attention_mass": None if rec.attention_mass is None else _floats(rec.attention_mass),
    }


def main() -> None:
    model = tiny_model(3, 2)
    records = random_run(2026, model, n_sequences=2, n_steps=3, dense_layers=(0,), n_selected=4,
                         with_mass=True, prompt_tokens=512)
    if ASSET.exists():
        raise SystemExit(f"{ASSET} exists; the frozen asset must not be regenerated")
    write_trace(ASSET, make_meta(model, dense_layers=(0,), page_size=32), records)
    expected = [record_to_json(r) for r in records]
    (ASSET / "expected.json").write_text(json.dumps(expected, indent=None) + "\n")


if __name__ == "__main__":
    main()

"""Write the frozen format-version-2 trace in tests/traces/assets/v2_small/ (run once; kept in git).

    .venv/bin/python tests/traces/make_v2_asset.py

Like make_v1_asset.py, plus the format-2 movement fields (fetched_tokens, evicted_tokens, refactorised;
some records hold None for some of them). It also writes expected.json, every record as plain JSON, so
test_trace_asset_v2.py checks that any future reader decodes the frozen binary to exactly these values.
Do NOT regenerate it after a format change: the point of the asset is that old traces stay readable.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from make_v1_asset import record_to_json as v1_record_to_json  # noqa: E402
from trace_factory import make_meta, random_run, tiny_model, write_trace  # noqa: E402

from traces import FORMAT_VERSION, PrefillRecord, StepRecord  # noqa: E402

ASSET = HERE / "assets" / "v2_small"


def _grid(a: np.ndarray | None) -> list | None:
    return None if a is None else np.asarray(a).ravel().tolist()


def record_to_json(rec: PrefillRecord | StepRecord) -> dict:
    out = v1_record_to_json(rec)
    if isinstance(rec, StepRecord):
        out.update(fetched_tokens=_grid(rec.fetched_tokens), evicted_tokens=_grid(rec.evicted_tokens),
                   refactorised=_grid(rec.refactorised))
    return out


def main() -> None:
    if FORMAT_VERSION != 2:
        raise SystemExit(f"this script writes the format-2 asset; the writer now writes {FORMAT_VERSION}")
    if ASSET.exists():
        raise SystemExit(f"{ASSET} exists; the frozen asset must not be regenerated")
    model = tiny_model(3, 2)
    records = random_run(2027, model, n_sequences=2, n_steps=3, dense_layers=(0,), n_selected=4,
                         with_mass=True, prompt_tokens=512, movement="random")
    freekv = records[4]  # one step as the recorder writes FreeKV's: fetched = missed pages x page size
    assert isinstance(freekv, StepRecord)
    shape = freekv.similarity.shape
    records[4] = replace(freekv, fetched_tokens=(freekv.missed_counts() * 32).astype(np.int32),
                         evicted_tokens=np.zeros(shape, np.int32), refactorised=np.zeros(shape, bool))
    write_trace(ASSET, make_meta(model, dense_layers=(0,), page_size=32), records)
    expected = [record_to_json(r) for r in records]
    (ASSET / "expected.json").write_text(json.dumps(expected, indent=None) + "\n")


if __name__ == "__main__":
    main()

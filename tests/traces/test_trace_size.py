"""Size of a Llama-3.1-8B-shaped trace step on disk (32 layers x 8 KV heads x 64 selected pages).

Run with `-s` to see the numbers. The reference point: the same step stored naively (float32
similarity, one byte per flag, int32 page ids of every selected and missed page, int32 attended
tokens) takes 1024 + 256 + 4 * (16384 + missed) + 1024 bytes, about 70 KB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trace_factory import StepStream, make_meta

from traces import TraceWriter, get_model, open_trace

N_STEPS = 12


@pytest.mark.parametrize("movement", ["none", "freekv"])
@pytest.mark.parametrize(("churn", "max_bytes_per_step"), [(2, 2400), (12, 5000), (26, 8000)])
def test_llama_step_is_compact(tmp_path: Path, churn: int, max_bytes_per_step: int, movement: str) -> None:
    """churn: up to this many of a head's 64 pages change per step (uniform, so half on average); the
    changed-in pages are the missed ones (hit rate ~ 1 - churn / 128). movement "freekv": the step also
    holds the format-2 fields as the runtime's recorder fills them for FreeKV (fetched = missed pages x
    page size, nothing evicted or rebuilt), which must cost FreeKV traces next to nothing."""
    model = get_model("llama-3.1-8b")
    rng = np.random.default_rng(churn)
    stream = StepStream(model, 0, 16384, (0,), 64, churn=churn, missed_equals_added=True, movement=movement)
    steps = [stream.next(rng) for _ in range(N_STEPS + 1)]
    path = tmp_path / "llama"
    with TraceWriter.create(path, make_meta(model, dense_layers=(0,))) as writer:
        writer.append_step(steps[0])  # the first step stores the full selection
        first_bytes = writer.bytes_written
        for step in steps[1:]:
            writer.append_step(step)
        per_step = (writer.bytes_written - first_bytes) / N_STEPS
    naive = 1024 + 256 + 4 * 31 * 8 * 64 + 4 * float(np.mean([s.missed_counts().sum() for s in steps])) + 1024
    hit_rate = 1 - sum(int(s.missed_counts().sum()) for s in steps[1:]) / sum(
        int(s.selected_counts().sum()) for s in steps[1:])
    print(f"\nllama-3.1-8b step, movement {movement}, churn <= {churn} pages/head (hit rate {hit_rate:.3f}): "
          f"{per_step:.0f} bytes per step ({naive / per_step:.0f}x smaller than naive {naive:.0f} B); "
          f"first step {first_bytes} B")
    assert per_step < max_bytes_per_step
    reader = open_trace(path)
    assert reader.n_steps == N_STEPS + 1
    got = list(reader.steps())
    assert all(a.identical(b) for a, b in zip(got, steps, strict=True))

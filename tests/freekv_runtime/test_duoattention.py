"""DuoAttention's defining rule on tiny tensors: a released pattern's gates are sparsified as
mit-han-lab/duo-attention does (duo_attn/utils.py 353-373: the `sparsity` quantile over all heads), its
retrieval heads attend everything and its streaming heads the sink + recent tokens (duo_attn/patch/llama.py
273-290), written out here independently; the deviation probe (a labelled proxy of the published
optimisation) ranks a head that retrieves far back above one that attends locally."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, make_episode, run_policy

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies.duoattention import DeviationProbeState, split_heads

BUDGET, SINK = 24, 4
GATES = np.array([[0.9, 0.1], [0.5, 0.3], [0.05, 0.7]])  # (layers, KV heads) of the suite's SHAPE


def test_split_is_the_sparsity_quantile() -> None:
    for sparsity in (0.0, 0.5, 2 / 3, 1.0):
        threshold = np.quantile(GATES, sparsity)  # utils.py 360 and 371 (no ties here)
        want = GATES >= threshold if 0 < sparsity < 1 else np.full(GATES.shape, sparsity == 0)
        np.testing.assert_array_equal(split_heads(GATES, sparsity), want)


def _config(pattern: str, **kw) -> RuntimeConfig:
    return RuntimeConfig(method="duoattention", page_size=4, budget_tokens=BUDGET, sink_tokens=SINK,
                         window_tokens=4, dense_layers=(), knobs={"pattern": pattern, "sparsity": 0.5, **kw})


def test_retrieval_heads_attend_all_streaming_heads_sink_and_recent(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "full_attention_heads.tsv"
    np.savetxt(path, GATES, delimiter="\t")
    episode = make_episode(SHAPE, 40, 5, seed=2)
    run = run_policy(_config(str(tmp_path)), [episode])
    retrieval = GATES >= np.quantile(GATES, 0.5)
    group = SHAPE.n_qo_heads // SHAPE.n_kv_heads
    for layer in range(SHAPE.n_layers):
        k, v = episode.prompt[layer][1].double(), episode.prompt[layer][2].double()
        for t, step in enumerate(episode.steps):
            q_t, k_t, v_t = (x.double() for x in step[layer])
            k, v = torch.cat([k, k_t], 1), torch.cat([v, v_t], 1)
            n = k.shape[1]
            for h in range(SHAPE.n_kv_heads):
                idx = torch.arange(n) if retrieval[layer, h] else \
                    torch.cat([torch.arange(SINK), torch.arange(n - (BUDGET - SINK), n)])
                heads = slice(h * group, (h + 1) * group)
                w = torch.softmax(q_t[heads, 0] @ k[h, idx].T / math.sqrt(k.shape[-1]), -1)
                got = run.decode_out[t][layer][0, heads, 0].double()
                torch.testing.assert_close(got, w @ v[h, idx], atol=1e-5, rtol=0)
                assert run.steps[t].attended_tokens[0, layer, h] == len(idx)


def test_a_pattern_of_another_shape_is_refused(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "p.tsv"
    np.savetxt(path, GATES[:2], delimiter="\t")
    with pytest.raises(RuntimeConfigError, match="pattern is 2 x 2 .* model has 3 x 2"):
        run_policy(_config(str(path)), [make_episode(SHAPE, 40, 1, seed=2)])


def test_the_probe_ranks_a_far_retrieving_head_above_a_local_one() -> None:
    g = torch.Generator().manual_seed(0)
    period, t, d = 32, 96, 16
    keys = torch.randn(1, 2, t, d, generator=g)
    q = torch.zeros(1, 2, t, d)
    q[0, 0, period:] = 8 * keys[0, 0, :-period]  # head 0 looks `period` tokens back
    q[0, 1] = 8 * keys[0, 1]  # head 1 looks at its own token
    probe = DeviationProbeState(1, 2, period, sink=2, recent=8)
    probe.prefill(0, q, keys, torch.randn(1, 2, t, d, generator=g))
    assert probe.deviation[0, 0] > 0.5 and probe.deviation[0, 1] < 0.1

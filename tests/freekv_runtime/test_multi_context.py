"""Conformance of the multi-context mechanism and its five policies, on a tiny random Llama and tiny tensors.

The mechanism: full recompute equals dense attention over the joined prompt; no recompute keeps the
document caches as prefilled alone (block-diagonal attention). Each policy's defining rule: CacheBlend's
value-deviation selection and its shrinking ratios, EPIC's first tokens of every document, SamKV's
blocks, personalised query (Eq. 1), dynamic top-p (Eq. 2) and kept anchors. The record each prefill
leaves, and a multi-context method refused on a single-context task.
"""

from __future__ import annotations

import pytest
import torch

from freekv_runtime.api import check_task_context
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.decode import DecodeContext
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.model import ModelAdapter
from freekv_runtime.multi_context_run import document_pass, run_with_logits
from freekv_runtime.policies import make_policy
from freekv_runtime.policies._multi_context import Segments, _document_pass_mask, _fuse
from freekv_runtime.policies.cacheblend import CacheBlendPlan
from freekv_runtime.policies.dense import DensePolicy
from freekv_runtime.policies.epic import link_positions
from freekv_runtime.policies.samkv import doc_blocks, personalised_queries, top_p_ratio
from freekv_runtime.timing import OpTimer

CPU = torch.device("cpu")
SEG = Segments(prefix_tokens=3, document_tokens=(20, 24, 18), query_tokens=5)
_MODEL: list[ModelAdapter] = []


def _model() -> ModelAdapter:
    if not _MODEL:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             max_position_embeddings=256)
        _MODEL.append(ModelAdapter(LlamaForCausalLM(config).eval()))
    return _MODEL[0]


def _tokens(batch: int = 2, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (batch, SEG.total_tokens), generator=g)


def _run(method: str, knobs: dict | None = None, n_tokens: int = 3):
    adapter = _model()
    ids = _tokens()
    policy = DensePolicy(RuntimeConfig(method="dense")) if method == "dense" else \
        make_policy(RuntimeConfig(method=method, knobs=knobs or {}))
    timer = OpTimer(CPU)
    state = policy.new_state(adapter.shape, ids.shape[0], CPU, torch.float32, timer)
    ctx = DecodeContext(adapter, state, adapter.rope_table(SEG.total_tokens + n_tokens), timer)
    if method != "dense":
        document_pass(adapter, ctx, ids, SEG)
    tokens, logits = run_with_logits(ctx, ids, n_tokens)
    return tokens, logits, state


def test_full_recompute_equals_dense_attention_over_the_joined_prompt() -> None:
    _, dense, _ = _run("dense")
    _, full, state = _run("rag-full-recompute")
    torch.testing.assert_close(full, dense, atol=1e-4, rtol=1e-4)
    record = state.end_prefill().multi_context[0]
    assert record.recomputed_tokens == (62, 62, 62) and record.kept_tokens == (62, 62, 62)
    assert record.sequence_ratio == 1.0


def test_no_recompute_keeps_the_document_caches_as_prefilled_alone() -> None:
    _, dense, _ = _run("dense")
    _, joined, state = _run("rag-no-recompute")
    record = state.end_prefill().multi_context[0]
    assert record.recomputed_tokens == (0, 0, 0) and record.kept_tokens == (62, 62, 62)
    assert not torch.allclose(joined, dense, atol=1e-3)  # the missing cross-document attention shows
    mask = _document_pass_mask(SEG, None, CPU)
    starts, ends = SEG.starts, SEG.ends
    assert not mask[starts[1], starts[0]]  # a document never sees the one before it
    assert not mask[starts[0], 0]  # nor the prefix: a document cache is its document alone
    assert mask[ends[1] - 1, starts[1]] and mask[SEG.query_start, 0] and mask[SEG.query_start, starts[2]]


def test_cacheblend_recomputes_all_to_the_check_layer_then_the_largest_value_deviations() -> None:
    seg = Segments(0, (4, 4), 2)
    cached_v = torch.zeros(1, 2, 10, 3)
    fresh_v = cached_v.clone()
    fresh_v[0, :, 2] = 3.0  # the largest deviation
    fresh_v[0, :, 6] = 2.0
    fresh_v[0, 0, 5] = 1.0
    k = torch.zeros_like(cached_v)
    plan = CacheBlendPlan(recompute_ratio=0.25, check_layer=1, ratio_decay=1.0)
    assert plan.layer_plan(seg, 0, k, fresh_v, k, cached_v).recompute.all()
    check = plan.layer_plan(seg, 1, k, fresh_v, k, cached_v)
    assert check.recompute.all() and check.keep.all()  # the check layer recomputes every token
    after = plan.layer_plan(seg, 2, k, fresh_v, k, cached_v)
    assert after.recompute[0].nonzero().flatten().tolist() == [2, 6]  # int(8 x 0.25) = 2 largest
    assert after.keep.all()


def test_cacheblend_ratio_decay_shrinks_the_set_among_the_previous_one() -> None:
    seg = Segments(0, (8, 8), 2)
    cached_v = torch.zeros(1, 1, 18, 2)
    fresh_v = torch.arange(18.0).reshape(1, 1, 18, 1).expand(1, 1, 18, 2).clone()  # later = larger
    k = torch.zeros_like(cached_v)
    plan = CacheBlendPlan(recompute_ratio=0.5, check_layer=0, ratio_decay=0.5)
    plan.layer_plan(seg, 0, k, fresh_v, k, cached_v)
    assert plan.selected[0].nonzero().flatten().tolist() == list(range(8, 16))  # 16 x 0.5 largest
    shrunk = fresh_v.clone()
    shrunk[0, 0, 8] = 100.0  # now the largest, and in the previous set
    shrunk[0, 0, 0] = 200.0  # larger still, but not in the previous set
    layer1 = plan.layer_plan(seg, 1, k, shrunk, k, cached_v)
    assert layer1.recompute[0].nonzero().flatten().tolist() == [8, 13, 14, 15]  # 16 x 0.25 among the 8
    layer2 = plan.layer_plan(seg, 2, k, shrunk, k, cached_v)
    assert layer2.recompute[0].nonzero().flatten().tolist() == [8, 15]  # 16 x 0.125


def test_epic_recomputes_the_first_tokens_of_every_document() -> None:
    seg = Segments(2, (5, 3), 2)
    assert link_positions(seg, 2, CPU).nonzero().flatten().tolist() == [2, 3, 7, 8]
    assert link_positions(seg, 4, CPU).nonzero().flatten().tolist() == [2, 3, 4, 5, 7, 8, 9]
    _, _, state = _run("epic", {"link_tokens": 4})
    record = state.end_prefill().multi_context[0]
    assert record.recomputed_tokens == (12, 12, 12) and record.kept_tokens == (62, 62, 62)


def test_samkv_blocks_anchors_and_middle() -> None:
    blocks = doc_blocks(10, 30, 4, 1, 2)
    assert blocks.anchor_tokens == (10, 11, 12, 13, 22, 23, 24, 25, 26, 27, 28, 29)
    assert blocks.middle == ((14, 18), (18, 22))
    small = doc_blocks(0, 6, 4, 1, 2)  # two blocks: both local, no middle
    assert small.middle == () and small.anchor_tokens == tuple(range(6))


def test_samkv_personalised_query_is_equation_1() -> None:
    q = torch.tensor([[[1.0, 0.0]]])  # (b=1, Hq=1, d=2)
    loc = torch.tensor([[[[0.0, 2.0]]], [[[2.0, 2.0]]], [[[-3.0, 0.0]]]]).reshape(1, 3, 1, 2)
    out = personalised_queries(q, loc)
    cos = torch.tensor([0.0, 2 ** -0.5, 1.0])  # |cos(q, loc_j)|
    weighted = cos[:, None] * loc[0, :, 0]
    for i in range(3):
        expect = q[0, 0] + (weighted.sum(0) - weighted[i]) / 2
        torch.testing.assert_close(out[0, i, 0], expect)
    torch.testing.assert_close(personalised_queries(q, loc[:, :1]), q[:, None])  # D = 1: the query itself


def test_samkv_dynamic_top_p_is_equation_2() -> None:
    s_max, s_min = torch.tensor([4.0, 4.0, 4.0, 4.0]), torch.tensor([0.0, 0.0, 0.0, 0.0])
    s_anc = torch.tensor([1.0, 4.0, 0.0, 5.0])
    assert top_p_ratio(s_anc, s_max, s_min).tolist() == [0.75, 0.0, 0.0, 0.0]


def test_samkv_fusion_is_equation_4_with_the_cosine_clipped_to_a_blend() -> None:
    """Eq. 4 per token and head: theta = cos(new, old); clipped, a negative cosine keeps the old entry
    (theta 0); unclipped it extrapolates: -0.6 new + 1.6 old."""
    new = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]]])  # (b, Hkv, T, d)
    old = torch.tensor([[[[1.0, 1.0], [-0.6, 0.8]]]])
    theta_aligned = 1 / 2 ** 0.5  # cos((1, 0), (1, 1))
    expect_first = theta_aligned * new[0, 0, 0] + (1 - theta_aligned) * old[0, 0, 0]
    clipped, literal = _fuse(new, old, clip=True), _fuse(new, old, clip=False)
    assert torch.allclose(clipped[0, 0, 0], expect_first) and torch.allclose(literal[0, 0, 0], expect_first)
    assert torch.allclose(clipped[0, 0, 1], old[0, 0, 1])  # cos = -0.6 clipped to 0
    assert torch.allclose(literal[0, 0, 1], -0.6 * new[0, 0, 1] + 1.6 * old[0, 0, 1])


def test_samkv_keeps_anchors_and_a_subset_of_the_middle() -> None:
    _, _, state = _run("samkv", {"block_tokens": 4, "stable_layers": 2})
    record = state.end_prefill().multi_context[0]
    anchors = sum(len(doc_blocks(s, e, 4, 1, 2).anchor_tokens) for s, e in zip(SEG.starts, SEG.ends,
                                                                              strict=True))
    assert all(anchors <= kept <= 62 for kept in record.kept_tokens)
    assert all(anchors <= r <= kept for r, kept in zip(record.recomputed_tokens, record.kept_tokens,
                                                       strict=True))
    plan = state.plan
    for layer in range(3):
        keep = plan.plans[layer].keep[0]
        for s, e in zip(SEG.starts, SEG.ends, strict=True):
            assert keep[list(doc_blocks(s, e, 4, 1, 2).anchor_tokens)].all()


def test_multi_context_methods_refuse_single_context_tasks() -> None:
    with pytest.raises(RuntimeInputError, match="needs a multi-context task"):
        check_task_context("samkv", "passkey")
    check_task_context("samkv", "rag_facts")
    check_task_context("freekv", "rag_facts")  # a single-context method reads the joined prompt

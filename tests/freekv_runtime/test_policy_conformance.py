"""Conformance suite every KV policy inherits (parametrized over the catalogue's runtime policies).

Each test runs a policy through a prefill and a few decode steps the way the decode loop does (every
layer, then `end_step`). Queries of adjacent steps are made similar with per-head noise, so FreeKV
corrects some heads and not others at tau = 0.85. A method's catalogue entry with a runtime policy
(traces.catalogue) adds it here.

Every policy is `prepare`d with a tiny random Llama of the suite's shape (`tiny_model`), as the runtime
prepares it with the real one; a state that wants layer inputs gets each layer's random hidden input and
the episode's keys with RoPE undone (so that its pre-RoPE keys are those of the keys it attends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.model import ModelAdapter, RopeTable
from freekv_runtime.policies import make_policy, policy_names
from freekv_runtime.policies.base import AttentionShape, PrefillDecisions, StepDecisions
from freekv_runtime.timing import OpTimer
from traces.catalogue import entry

SHAPE = AttentionShape(n_layers=3, n_qo_heads=6, n_kv_heads=2, head_dim=16)
HIDDEN = 96  # the tiny model's hidden size (its layer inputs)
# Policies that attend everything by definition: the budget does not apply to them.
UNBUDGETED = {"dense": "dense attention attends everything by definition (the accuracy reference)"}
# fp32 runtime vs a float64 dense reference over at most a few hundred tokens.
DENSE_ATOL = 1e-5


@dataclass
class Episode:
    """One sequence's inputs.

    prompt[l] = (q (Hq, T, d), k, v (Hkv, T, d)); steps[t][l] = (q (Hq, 1, d), k, v (Hkv, 1, d)).
    """

    prompt: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    steps: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]
    prompt_hidden: torch.Tensor | None = None  # (L, T, D) each layer's input
    step_hidden: torch.Tensor | None = None  # (S, L, 1, D)


_TINY: dict[tuple[int, int, int, int], ModelAdapter] = {}


def tiny_model(shape: AttentionShape = SHAPE) -> ModelAdapter:
    """A random-weight Llama of `shape` (hidden size HIDDEN, seed 0), the `ModelAccess` policies get."""
    key = (shape.n_layers, shape.n_qo_heads, shape.n_kv_heads, shape.head_dim)
    if key not in _TINY:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=64, hidden_size=HIDDEN, intermediate_size=128,
                             num_hidden_layers=shape.n_layers, num_attention_heads=shape.n_qo_heads,
                             num_key_value_heads=shape.n_kv_heads, head_dim=shape.head_dim,
                             max_position_embeddings=512)
        _TINY[key] = ModelAdapter(LlamaForCausalLM(config).eval())
    return _TINY[key]


def undo_rope(k: torch.Tensor, rope: RopeTable, start: int) -> torch.Tensor:
    """Keys before RoPE: k (b, H, T, d) post-RoPE at positions start..start+T-1 rotated back."""
    cos, sin = rope.at(start, k.shape[2])
    half = k.shape[-1] // 2
    rotated = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return k * cos - rotated * sin


def make_episode(shape: AttentionShape, prompt_tokens: int, n_steps: int, seed: int) -> Episode:
    """Random post-RoPE tensors; q_t = q_{t-1} + sigma_h * noise with sigma_h in [0.2, 1.2] per query head."""
    g = torch.Generator().manual_seed(seed)
    hq, hkv, d = shape.n_qo_heads, shape.n_kv_heads, shape.head_dim
    sigma = 0.2 + torch.rand(hq, 1, 1, generator=g)
    prompt, q_last = [], []
    for _ in range(shape.n_layers):
        q = torch.randn(hq, prompt_tokens, d, generator=g)
        k = torch.randn(hkv, prompt_tokens, d, generator=g)
        prompt.append((q, k, torch.randn(hkv, prompt_tokens, d, generator=g)))
        q_last.append(q[:, -1:])
    steps = []
    for _ in range(n_steps):
        layers = []
        for layer in range(shape.n_layers):
            q_last[layer] = q_last[layer] + sigma * torch.randn(hq, 1, d, generator=g)
            k, v = torch.randn(hkv, 1, d, generator=g), torch.randn(hkv, 1, d, generator=g)
            layers.append((q_last[layer], k, v))
        steps.append(layers)
    hidden = torch.randn(shape.n_layers, prompt_tokens + n_steps, HIDDEN, generator=g)
    step_hidden = hidden[:, prompt_tokens:].transpose(0, 1)[:, :, None, :]  # (S, L, 1, D)
    return Episode(prompt, steps, hidden[:, :prompt_tokens], step_hidden.contiguous())


@dataclass
class Run:
    prefill_out: list[torch.Tensor]  # [l] (b, Hq, T, d)
    decode_out: list[list[torch.Tensor]]  # [t][l] (b, Hq, 1, d)
    prefill: PrefillDecisions
    steps: list[StepDecisions]
    state: object


def run_policy(config: RuntimeConfig, episodes: list[Episode], shape: AttentionShape = SHAPE) -> Run:
    """Drive a policy over a batch made of the episodes (stacked on dim 0), as the decode loop does."""
    device = torch.device("cpu")
    policy = make_policy(config)
    model = tiny_model(shape)
    policy.prepare(model)
    state = policy.new_state(shape, len(episodes), device, torch.float32, OpTimer(device))
    n_prompt, n_steps = episodes[0].prompt[0][0].shape[1], len(episodes[0].steps)
    rope = model.rope_table(n_prompt + n_steps)

    def batch(parts: list[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
        return [torch.stack(t) for t in zip(*parts, strict=True)]

    def attend(fn, layer: int, qkv: list[torch.Tensor], hidden: list[torch.Tensor], start: int):  # noqa: ANN001, ANN202
        if state.wants_layer_inputs:
            state.layer_inputs(layer, torch.stack(hidden), undo_rope(qkv[1], rope, start), start)
        return fn(layer, *qkv)

    prefill_out = [attend(state.prefill, layer, batch([e.prompt[layer] for e in episodes]),
                          [e.prompt_hidden[layer] for e in episodes], 0) for layer in range(shape.n_layers)]
    prefill = state.end_prefill()
    decode_out, steps = [], []
    for t in range(n_steps):
        decode_out.append([attend(state.decode, layer, batch([e.steps[t][layer] for e in episodes]),
                                  [e.step_hidden[t, layer] for e in episodes], n_prompt + t)
                           for layer in range(shape.n_layers)])
        steps.append(state.end_step())
    return Run(prefill_out, decode_out, prefill, steps, state)


def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """float64 softmax(q K^T / sqrt(d)) V with GQA. q (b, Hq, T, d); k, v (b, Hkv, N, d) -> (b, Hq, T, d)."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q.double() @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t, n = q.shape[2], k.shape[2]
        s = s.masked_fill(torch.ones(t, n, dtype=torch.bool).tril(n - t).logical_not(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v64


# knobs under which a method whose budget covers the context is exact: ShadowKV's default rank is a share
# of the key width (lossy by design), so the exactness check asks for full rank
FULL_BUDGET_KNOBS: dict[str, dict[str, object]] = {"shadowkv": {"rank": 10_000}}
# knobs the suite's random-weight model needs: it has no trained DuoAttention pattern, so the probe
SUITE_KNOBS: dict[str, dict[str, object]] = {"duoattention": {"head_split": "probe"}}


def config_for(method: str, **kw) -> RuntimeConfig:
    """The suite's configuration of `method`; tau 0.85 where the method has that knob; `knobs` adds or
    replaces method knobs, other keywords the retrieval knobs."""
    knobs = {"tau": 0.85} if "tau" in entry(method).knobs.names("runtime") else {}
    knobs.update(SUITE_KNOBS.get(method, {}))
    knobs.update(kw.pop("knobs", {}))
    base = dict(method=method, page_size=8, budget_tokens=64, sink_tokens=8, window_tokens=16,
                dense_layers=(0,))
    return RuntimeConfig(**{**base, **kw}, knobs=knobs)


def assert_same_decisions(a: StepDecisions, ia: int, b: StepDecisions, ib: int) -> None:
    """Sequence ia of decisions a equals sequence ib of b (float fields to 1e-6)."""
    np.testing.assert_allclose(a.similarity[ia], b.similarity[ib], atol=1e-6, equal_nan=True)
    np.testing.assert_array_equal(a.corrected[ia], b.corrected[ib])
    np.testing.assert_array_equal(a.attended_tokens[ia], b.attended_tokens[ib])
    for field in ("selected", "missed"):
        for la, lb in zip(getattr(a, field)[ia], getattr(b, field)[ib], strict=True):
            for ha, hb in zip(la, lb, strict=True):
                np.testing.assert_array_equal(ha, hb)
    if a.attention_mass is not None or b.attention_mass is not None:
        np.testing.assert_allclose(a.attention_mass[ia], b.attention_mass[ib], atol=1e-6)
    for field in ("fetched_tokens", "evicted_tokens", "refactorised"):
        fa, fb = getattr(a, field), getattr(b, field)
        assert (fa is None) == (fb is None), field
        if fa is not None:
            np.testing.assert_array_equal(fa[ia], fb[ib])


def unbudgeted_heads(state: object, shape: AttentionShape = SHAPE) -> np.ndarray:
    """(L, Hkv) bool: heads the state declares exempt from the budget by its method's definition, through
    an `unbudgeted_heads` attribute (e.g. RazorAttention's retrieval heads attend the whole context);
    none when it declares none. Exempt heads must still attend at most the context."""
    heads = getattr(state, "unbudgeted_heads", None)
    if heads is None:
        return np.zeros((shape.n_layers, shape.n_kv_heads), dtype=bool)
    return np.asarray(heads, dtype=bool)


def budget_limit(state: object, config: RuntimeConfig, context_tokens: int) -> int:
    """Tokens a budgeted head may attend at `context_tokens`: budget_tokens, or what the state declares
    through `attend_limit(n_tokens)` where its method's budget is defined otherwise (RaaS as published
    keeps the prompt and bounds the decoded tokens; RazorAttention's buffer is max(S0, N/C))."""
    limit = getattr(state, "attend_limit", None)
    return config.budget_tokens if limit is None else limit(context_tokens)


# multi-context policies join separately prefilled documents: their own conformance tests are
# tests/freekv_runtime/test_multi_context.py
METHODS = sorted(m for m in policy_names() if entry(m).kind != "multi-context")


@pytest.mark.parametrize("method", METHODS)
def test_budget_respected(method: str) -> None:
    if method in UNBUDGETED:
        pytest.skip(f"policy {method!r}: {UNBUDGETED[method]}")
    config = config_for(method)
    prompt_tokens = 83  # not a multiple of the page size; the steps cross two page boundaries
    run = run_policy(config, [make_episode(SHAPE, prompt_tokens, 12, seed=1)])
    exempt = unbudgeted_heads(run.state)
    for t, dec in enumerate(run.steps):
        context = prompt_tokens + t + 1
        sparse = [layer for layer in range(SHAPE.n_layers) if layer not in config.dense_layers]
        budgeted = dec.attended_tokens[:, sparse][:, ~exempt[sparse]]
        assert (budgeted <= budget_limit(run.state, config, context)).all(), (t, dec.attended_tokens)
        assert (dec.attended_tokens[:, sparse] > 0).all()
        assert (dec.attended_tokens <= context).all()
        for layer in config.dense_layers:
            assert (dec.attended_tokens[:, layer] == context).all()


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_result(method: str) -> None:
    config = config_for(method, measure_attention_mass=True)
    runs = [run_policy(config, [make_episode(SHAPE, 70, 6, seed=s) for s in (3, 4)]) for _ in range(2)]
    for out_a, out_b in zip(runs[0].decode_out, runs[1].decode_out, strict=True):
        for a, b in zip(out_a, out_b, strict=True):
            assert torch.equal(a, b)
    for a, b in zip(runs[0].steps, runs[1].steps, strict=True):
        for i in range(2):
            assert_same_decisions(a, i, b, i)


@pytest.mark.parametrize("method", METHODS)
def test_batched_equals_per_request(method: str) -> None:
    config = config_for(method, measure_attention_mass=True)
    episodes = [make_episode(SHAPE, 77, 10, seed=s) for s in (5, 6, 7)]
    batched = run_policy(config, episodes)
    singles = [run_policy(config, [e]) for e in episodes]
    n_corrected = 0
    for i, single in enumerate(singles):
        for layer in range(SHAPE.n_layers):
            torch.testing.assert_close(batched.prefill_out[layer][i], single.prefill_out[layer][0])
        for t, (dec_b, dec_s) in enumerate(zip(batched.steps, single.steps, strict=True)):
            assert_same_decisions(dec_b, i, dec_s, 0)
            n_corrected += int(dec_s.corrected.sum())
            for layer in range(SHAPE.n_layers):
                torch.testing.assert_close(batched.decode_out[t][layer][i], single.decode_out[t][layer][0],
                                           atol=1e-5, rtol=1e-5)
        initial_b, initial_s = batched.prefill.initial_selected[i], single.prefill.initial_selected[0]
        for la, lb in zip(initial_b, initial_s, strict=True):
            for ha, hb in zip(la, lb, strict=True):
                np.testing.assert_array_equal(ha, hb)
    if method == "freekv":  # the inputs exercise both branches (some heads corrected, some not)
        total = 3 * 10 * (SHAPE.n_layers - 1) * SHAPE.n_kv_heads
        assert 0 < n_corrected < total


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("prompt_tokens", [61, 64])
def test_full_budget_equals_dense(method: str, prompt_tokens: int) -> None:
    """A budget covering the whole context gives dense attention (to DENSE_ATOL vs a float64 reference)."""
    n_steps = 9
    budget = 8 + 16 + 8 * (-(-(prompt_tokens + n_steps) // 8))
    full = FULL_BUDGET_KNOBS.get(method, {})
    config = config_for(method, budget_tokens=budget, knobs=full)
    episodes = [make_episode(SHAPE, prompt_tokens, n_steps, seed=s) for s in (8, 9)]
    run = run_policy(config, episodes)
    for layer in range(SHAPE.n_layers):
        q, k, v = (torch.stack(t) for t in zip(*[e.prompt[layer] for e in episodes], strict=True))
        ref = dense_reference(q, k, v, causal=True)
        torch.testing.assert_close(run.prefill_out[layer].double(), ref, atol=DENSE_ATOL, rtol=0)
        for t in range(n_steps):
            qs, ks, vs = (torch.stack(x) for x in zip(*[e.steps[t][layer] for e in episodes], strict=True))
            k = torch.cat([k, ks], dim=2)
            v = torch.cat([v, vs], dim=2)
            ref = dense_reference(qs, k, v, causal=False)
            torch.testing.assert_close(run.decode_out[t][layer].double(), ref, atol=DENSE_ATOL, rtol=0)
            assert (run.steps[t].attended_tokens[:, layer] == k.shape[2]).all()

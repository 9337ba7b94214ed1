"""DuoAttention's gate optimisation on tiny tensors and a tiny random-weight model: the gated mix is full
attention at alpha 1 and streaming (sink + recent, duo_attn/patch/streaming_attn.py 15-24) at alpha 0, per
KV head; the training reduces its objective, reaches only the gates; the multi-passkey samples put the
needles in order and label only the questions and answers; the shipped smollm2-135m pattern loads with the
model's shape and is the default split of a model matching its fingerprint."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, tiny_model

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.duo_data import ORDINALS, PASSKEY_ALPHABET, PasskeyDataSpec, PasskeySamples
from freekv_runtime.duo_gates import (
    GatedAttention,
    GateTraining,
    ReferenceAttention,
    distill_loss,
    lr_factor,
    streaming_mask,
    train_gates,
)
from freekv_runtime.policies import _duo_patterns
from freekv_runtime.policies.duoattention import DuoAttentionPolicy, load_pattern
from freekv_runtime.random_weights import ByteTokenizer
from freekv_runtime.timing import OpTimer

SINK, RECENT = 2, 5


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """float64 softmax over the allowed (T, T) keys, GQA by repetition: (b, Hq, T, d)."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q.double() @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v64


def _published_mask(t: int, sink: int, recent: int) -> torch.Tensor:
    """streaming_attn.py 18-23, written out: causal & (sink columns | the band triu(-recent + 1))."""
    ones = torch.ones(t, t, dtype=torch.bool)
    return (torch.triu(ones, diagonal=-recent + 1) | (torch.arange(t) < sink)[None, :]) & torch.tril(ones)


def test_streaming_mask_is_the_published_one() -> None:
    for t in (1, 7, 19):
        assert torch.equal(streaming_mask(t, SINK, RECENT), _published_mask(t, SINK, RECENT))


def _qkv(t: int = 17, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 6, t, 8, generator=g), torch.randn(2, 2, t, 8, generator=g),
            torch.randn(2, 2, t, 8, generator=g))


def test_gated_mix_is_full_at_one_streaming_at_zero_per_kv_head() -> None:
    q, k, v = _qkv()
    t = q.shape[2]
    full = _attention(q, k, v, torch.ones(t, t, dtype=torch.bool).tril())
    stream = _attention(q, k, v, _published_mask(t, SINK, RECENT))
    alpha = torch.tensor([[1.0, 0.0], [1.7, -0.3]])  # layer 1: outside [0, 1], clamped in the mix
    gated = GatedAttention(alpha, SINK, RECENT)
    for layer in (0, 1):
        got = gated(layer, q, k, v).double()
        torch.testing.assert_close(got[:, :3], full[:, :3], atol=1e-5, rtol=0)  # KV head 0: query heads 0-2
        torch.testing.assert_close(got[:, 3:], stream[:, 3:], atol=1e-5, rtol=0)
    half = GatedAttention(torch.full((1, 2), 0.25), SINK, RECENT)(0, q, k, v).double()
    torch.testing.assert_close(half, 0.25 * full + 0.75 * stream, atol=1e-5, rtol=0)
    assert not torch.allclose(full, stream)  # the test distinguishes the two


def test_the_full_term_is_the_reference_passs_output() -> None:
    q, k, v = _qkv()
    reference = ReferenceAttention()
    reference(0, q, k, v)
    q2 = q + 1.0  # the gated pass's own queries differ; its full term is the reference's (llama.py 127-129)
    got = GatedAttention(torch.ones(1, 2), SINK, RECENT, reference)(0, q2, k, v)
    torch.testing.assert_close(got, reference.outputs[0])


def test_distill_loss_and_schedule_follow_train_py() -> None:
    ref = torch.zeros(1, 4, 3)
    gated = torch.tensor([[[1.0, 1, 1], [2, 2, 2], [3, 3, 3], [9, 9, 9]]])
    labelled = torch.tensor([[False, True, True, False]])
    assert distill_loss(ref, gated, labelled).item() == pytest.approx((4 + 9) / 2)
    assert [lr_factor(s, 10) for s in (0, 1, 5, 8, 9)] == [0.5, 1.0, 1.0, 1.0, 0.5]
    assert lr_factor(0, 100) == pytest.approx(0.1)  # warm-up floor 0.1 (train.py 350)


def _samples(model, t: int, seed: int):  # noqa: ANN001, ANN202
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.vocab_size, (1, t), generator=g)
    labelled = torch.zeros(1, t, dtype=torch.bool)
    labelled[:, t // 2:] = True
    while True:
        yield tokens, labelled


def _objective(model, alpha: torch.Tensor, sample, reg_weight: float) -> float:  # noqa: ANN001
    tokens, labelled = sample
    rope, timer = model.rope_table(tokens.shape[1]), OpTimer(torch.device("cpu"), enabled=False)
    with torch.no_grad():
        reference = ReferenceAttention()
        ref = model.forward(tokens, 0, rope, reference, timer, hidden=True)
        gated = GatedAttention(alpha, SINK, RECENT, reference)
        out = model.forward(tokens, 0, rope, gated, timer, hidden=True)
    return float(distill_loss(ref, out, labelled) + reg_weight * alpha.clamp(0, 1).abs().mean())


def test_training_lowers_the_objective_and_moves_only_the_gates() -> None:
    model = tiny_model()
    before = [p.detach().clone() for p in model.hf.parameters()]
    settings = GateTraining(steps=8, lr=0.1, reg_weight=0.05, sink=SINK, recent=RECENT)
    sample = next(_samples(model, 48, 1))
    trained = train_gates(model, _samples(model, 48, 1), settings)
    start = _objective(model, torch.ones(SHAPE.n_layers, SHAPE.n_kv_heads), sample, settings.reg_weight)
    end = _objective(model, torch.as_tensor(trained.alpha, dtype=torch.float32), sample, settings.reg_weight)
    assert end < start and len(trained.distill) == 8
    assert trained.alpha.shape == (SHAPE.n_layers, SHAPE.n_kv_heads)
    assert ((trained.alpha >= 0) & (trained.alpha <= 1)).all() and (trained.alpha < 1).any()
    assert all(torch.equal(a, p) for a, p in zip(before, model.hf.parameters(), strict=True))


def test_gradients_reach_the_gates_only() -> None:
    model = tiny_model()
    model.hf.requires_grad_(False)
    alpha = torch.nn.Parameter(torch.full((SHAPE.n_layers, SHAPE.n_kv_heads), 0.5))
    tokens, labelled = next(_samples(model, 40, 2))
    rope, timer = model.rope_table(40), OpTimer(torch.device("cpu"), enabled=False)
    reference = ReferenceAttention()
    with torch.no_grad():
        ref = model.forward(tokens, 0, rope, reference, timer, hidden=True)
    out = model.forward(tokens, 0, rope, GatedAttention(alpha, SINK, RECENT, reference), timer, hidden=True)
    distill_loss(ref, out, labelled).backward()
    assert alpha.grad is not None and (alpha.grad != 0).all()
    assert all(p.grad is None for p in model.hf.parameters())


def test_passkey_samples_place_needles_in_order_and_label_the_answers() -> None:
    spec = PasskeyDataSpec(context_min_tokens=300, context_max_tokens=400, context_intervals=3, n_passkeys=3,
                           passkey_words=4, depth_min=0.1, depth_max=0.9, depth_intervals=50)
    tok = ByteTokenizer()
    data = PasskeySamples(spec, tok)
    a, b = data.draw(np.random.default_rng(5)), data.draw(np.random.default_rng(5))
    assert a == b  # the generator decides everything
    text = tok.decode(a.token_ids)
    first_label = a.labelled.index(True)
    assert not any(a.labelled[:first_label]) and all(a.labelled[first_label:])
    context, qa = tok.decode(a.token_ids[:first_label]), tok.decode(a.token_ids[first_label:])
    at = [context.index(f"it's the {o} passkey to the vault: ") for o in ORDINALS[:3]]
    assert at == sorted(at) and qa.startswith("Based on the content of the book, what is the first passkey")
    for o in ORDINALS[:3]:
        key = context.split(f"it's the {o} passkey to the vault: ")[1].split("\n\n")[0]
        words = key.split(" ")
        assert len(words) == 4 and set(words) <= set(PASSKEY_ALPHABET)
        assert f"what is the {o} passkey to the vault?\nPasskey: {key}\n\n" in qa
    assert "<|im_start|> This is a very long story book: <book> " in text and " </book>.\n\n" in context


def test_shipped_smollm2_pattern_has_the_models_shape() -> None:
    root = _duo_patterns.PATTERNS_DIR / "smollm2-135m"
    meta = json.loads((root / _duo_patterns.PROVENANCE_FILE).read_text())
    assert meta["model"] == "smollm2-135m" and meta["shape"] == [30, 3]
    alpha = load_pattern(str(root), 30, 3)
    raw = np.loadtxt(root / _duo_patterns.PATTERN_FILE, delimiter="\t")
    np.testing.assert_array_equal(alpha, raw)  # written in [0, 1]
    assert len(meta["distill_loss"]) == meta["steps_done"] and len(meta["fingerprint"]) == 16


def _policy(**knobs) -> DuoAttentionPolicy:
    return DuoAttentionPolicy(RuntimeConfig(method="duoattention", page_size=4, budget_tokens=24,
                                            sink_tokens=4, window_tokens=4, dense_layers=(), knobs=knobs))


def test_the_default_split_comes_from_the_pattern_shipped_for_the_model(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    model = tiny_model()
    gates = np.array([[0.9, 0.1], [0.5, 0.3], [0.05, 0.7]])
    with pytest.raises(RuntimeConfigError, match="no trained head split for this model .*duo_train"):
        _policy().prepare(model)  # no pattern ships for the tiny model
    shipped = tmp_path / "tiny"
    shipped.mkdir()
    np.savetxt(shipped / _duo_patterns.PATTERN_FILE, gates, delimiter="\t")
    meta = {"shape": [SHAPE.n_layers, SHAPE.n_kv_heads], "fingerprint": _duo_patterns.fingerprint(model)}
    (shipped / _duo_patterns.PROVENANCE_FILE).write_text(json.dumps(meta))
    monkeypatch.setattr(_duo_patterns, "PATTERNS_DIR", tmp_path)
    policy = _policy(sparsity=0.5)
    policy.prepare(model)
    np.testing.assert_allclose(policy.head_scores, gates)
    assert policy.prepared_metadata()["head_split"] == "trained gates (DuoAttention optimisation)"
    assert policy.prepared_metadata()["head_split_source"] == "freekv_runtime/patterns/tiny"
    meta["fingerprint"] = [x + 1.0 for x in meta["fingerprint"]]  # another model of the same shape
    (shipped / _duo_patterns.PROVENANCE_FILE).write_text(json.dumps(meta))
    with pytest.raises(RuntimeConfigError, match="patterns are shipped for: tiny"):
        _policy().prepare(model)


def test_the_probe_is_an_explicit_choice() -> None:
    policy = _policy(head_split="probe")
    policy.prepare(tiny_model())
    assert policy.prepared_metadata()["head_split"].startswith("deviation-probe (proxy")
    with pytest.raises(RuntimeConfigError, match="head_split=probe and pattern="):
        _policy(head_split="probe", pattern="x.tsv").prepare(tiny_model())


@pytest.mark.slow
def test_smollm2_defaults_to_its_shipped_trained_split() -> None:
    from freekv_runtime.model import ModelAdapter
    from freekv_runtime.weights import load_model

    model = ModelAdapter(load_model("smollm2-135m").model)
    policy = _policy()
    policy.prepare(model)
    root = _duo_patterns.PATTERNS_DIR / "smollm2-135m"
    np.testing.assert_array_equal(policy.head_scores, load_pattern(str(root), 30, 3))
    assert policy.prepared_metadata()["head_split"] == "trained gates (DuoAttention optimisation)"

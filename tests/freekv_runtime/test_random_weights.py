"""Random weights: seeded registry architectures without a download; traces record them; accuracy withheld."""

from __future__ import annotations

import json

import pytest
import torch

from dse.cli import main
from freekv_runtime.api import TraceRequest, run_trace
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.random_weights import (
    ByteTokenizer,
    clear_random_models,
    load_random_model,
    random_config,
)
from freekv_runtime.tasks import TaskSpec
from traces import open_trace
from traces.models import get_model

SMALL = "smollm2-135m"  # a small vocabulary: building it on 2 CPU cores takes well under a second
KNOBS = RuntimeConfig(method="freekv", page_size=16, budget_tokens=96, sink_tokens=16, window_tokens=16,
                      dense_layers=(0,), knobs={"tau": 0.9})


def _weights(loaded) -> list[torch.Tensor]:
    return [p.detach().clone() for p in loaded.model.parameters()]


def test_same_seed_same_weights_other_seed_differs() -> None:
    a = _weights(load_random_model(SMALL, 0, n_layers=2))
    clear_random_models()  # a second build from scratch, not the cached model
    b = _weights(load_random_model(SMALL, 0, n_layers=2))
    c = _weights(load_random_model(SMALL, 1, n_layers=2))
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_shape_follows_the_registry_and_the_layer_override() -> None:
    loaded = load_random_model(SMALL, 5, dtype=torch.bfloat16, n_layers=3)
    spec = get_model(SMALL)
    cfg = loaded.model.config
    assert loaded.spec.n_layers == 3 and len(loaded.model.model.layers) == 3
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (
        spec.hidden_size, spec.n_qo_heads, spec.n_kv_heads, spec.vocab_size)
    assert loaded.model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert "seed 5" in loaded.source and "first 3 of 30 layers" in loaded.source


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen-2.5-7b"])
def test_configs_of_the_large_registry_models(name: str) -> None:
    """The config alone (building 8B parameters would take minutes here): shapes and RoPE as registered."""
    spec = get_model(name)
    cfg = random_config(spec)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    assert (cfg.num_hidden_layers, cfg.intermediate_size, head_dim) == (spec.n_layers, spec.ffn_size,
                                                                        spec.head_dim)
    assert cfg.rope_parameters["rope_theta"] == spec.rope_theta
    assert cfg.rope_parameters["rope_type"] == spec.rope_scaling.get("rope_type", "default")


def test_layers_out_of_range() -> None:
    with pytest.raises(RuntimeInputError, match="--layers must be between 1 and the 30 layers"):
        load_random_model(SMALL, 0, n_layers=31)


def test_byte_tokenizer_round_trip() -> None:
    tok = ByteTokenizer()
    ids = tok("pass key 12345 é", add_special_tokens=False)["input_ids"]
    assert min(ids) >= tok.offset and tok.decode(ids + [0, 100_000]) == "pass key 12345 é"


def test_run_trace_records_random_weights_and_withholds_accuracy(tmp_path) -> None:
    task = TaskSpec("passkey", context_tokens=384, n_samples=1, decode_tokens=3)
    req = TraceRequest(model=SMALL, task=task, runtime=KNOBS, out_dir=tmp_path / "run", device="cpu",
                       random_weights=7, layers=2)
    outcome = run_trace(req)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accuracy"] == {"passkey_accuracy": None}
    assert summary["accuracy_note"].startswith("meaningless: random weights (seed 7)")
    assert set(summary["accuracy_random_weights"]) == {"passkey_accuracy"}
    assert summary["accuracy_samples"] == {}  # withheld like the values ...
    assert len(summary["accuracy_samples_random_weights"]["passkey_accuracy"]) == 1  # ... kept for debugging
    meta = open_trace(outcome.trace_dir).meta
    assert meta.extra["random_weights"] == 7 and meta.extra["layers"] == 2
    assert meta.extra["registry_layers"] == 30 and meta.model.n_layers == 2 and meta.seeds["weights"] == 7


def test_run_trace_refuses_conflicting_weight_options(tmp_path) -> None:
    task = TaskSpec("passkey", context_tokens=160, n_samples=1, decode_tokens=3)
    with pytest.raises(RuntimeInputError, match="exclude each other"):
        run_trace(TraceRequest(model=SMALL, task=task, runtime=KNOBS, out_dir=tmp_path, device="cpu",
                               random_weights=0, weights=tmp_path))
    with pytest.raises(RuntimeInputError, match="--layers shrinks a random-weights model only"):
        run_trace(TraceRequest(model=SMALL, task=task, runtime=KNOBS, out_dir=tmp_path, device="cpu",
                               layers=2))


def test_cli_random_weights(tmp_path, capsys) -> None:
    args = ["trace", "--model", SMALL, "--random-weights", "0", "--layers", "2", "--task", "fidelity",
            "--context-tokens", "160", "--samples", "1", "--decode-tokens", "4", "--budget-tokens", "96",
            "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16", "--device", "cpu"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "meaningless: random weights" in printed and "top1_agreement" in printed
    assert main([*args, "--layers", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "'--layers': must be an integer in [1, " in capsys.readouterr().err

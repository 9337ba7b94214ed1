"""Tiny random Llama- and Qwen2-shaped models on disk, offline: a Hugging Face directory (transformers'
save_pretrained, a byte-level tokenizer) and the same weights as a GGUF written with gguf's GGUFWriter,
whole or split in parts, with the keys and tensor names llama.cpp's convert_hf_to_gguf.py writes.

llama.cpp stores Llama's q/k projections with rows permuted per head (convert_hf_to_gguf.py,
LlamaModel.permute), which transformers undoes on load (modeling_gguf_pytorch_utils.py,
LlamaConverter); Qwen2's are stored as they are.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

__all__ = ["TINY_SHAPE", "tiny_hf_model", "write_gguf", "split_gguf"]

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = (("Ġ", "t"), ("h", "e"))  # a few byte-pair merges (GGUF readers expect a non-empty merge list)
EOS_ID = 256 + len(MERGES)
TINY_SHAPE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 96, "max_position_embeddings": 2048}


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (its byte-level BPE alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: i for i, ch in enumerate(_byte_chars())}
    vocab.update({a + b: 256 + i for i, (a, b) in enumerate(MERGES)})
    vocab.update({s: EOS_ID + i for i, s in enumerate(SPECIALS)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIALS[0], bos_token=SPECIALS[0],
                                   pad_token=SPECIALS[0])
    fast.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    return fast


def tiny_hf_model(arch: str, target: Path, seed: int = 0, **config: object) -> Path:
    """Save a tiny random `arch` ("llama" or "qwen2") model with a byte-level tokenizer into `target`."""
    torch.manual_seed(seed)
    tokenizer = _tokenizer()
    shape = {**TINY_SHAPE, "vocab_size": len(tokenizer), "bos_token_id": EOS_ID, "eos_token_id": EOS_ID,
             "pad_token_id": EOS_ID, **config}
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**shape))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's per-head row permutation of a Llama q/k projection (out, in)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_dir: Path, path: Path, parts: int = 1, rope: dict[str, object] | None = None) -> list[Path]:
    """The model in `hf_dir` as GGUF at `path` (F32), split into `parts` files when parts > 1 (named
    `STEM-0000I-of-0000N.gguf` by GGUFWriter); returns the files written. `rope` adds
    `{arch}.rope.scaling.*` keys (type, factor, original_context_length) or a `rope_freqs` tensor."""
    model = (LlamaForCausalLM if "llama" in (hf_dir / "config.json").read_text() else Qwen2ForCausalLM)
    hf = model.from_pretrained(hf_dir, dtype=torch.float32)
    c = hf.config
    arch = c.model_type
    tokenizer = PreTrainedTokenizerFast.from_pretrained(hf_dir)
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    tensors: list[tuple[str, np.ndarray]] = [("token_embd.weight", state["model.embed_tokens.weight"])]
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(c.num_hidden_layers):
        for hf_name, gguf_name in names.items():
            for kind in ("weight", "bias"):
                w = state.get(f"model.layers.{i}.{hf_name}.{kind}")
                if w is None:
                    continue
                if arch == "llama" and gguf_name in ("attn_q", "attn_k"):
                    w = _permute(w, c.num_attention_heads if gguf_name == "attn_q" else c.num_key_value_heads)
                tensors.append((f"blk.{i}.{gguf_name}.{kind}", w))
    tensors.append(("output_norm.weight", state["model.norm.weight"]))
    if not c.tie_word_embeddings:
        tensors.append(("output.weight", state["lm_head.weight"]))
    rope = dict(rope or {})
    if "rope_freqs" in rope:
        tensors.append(("rope_freqs.weight", np.asarray(rope.pop("rope_freqs"), dtype=np.float32)))
    per_part = -(-len(tensors) // parts)
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=per_part if parts > 1 else 0)
    writer.add_name(f"tiny random {arch}")
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    for key, value in rope.items():
        if key == "type":
            writer.add_rope_scaling_type(gguf.RopeScalingType(value))
        elif key == "factor":
            writer.add_rope_scaling_factor(float(value))
        elif key == "original_context_length":
            writer.add_rope_scaling_orig_ctx_len(int(value))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([t for t, _ in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL
                            for t, _ in vocab])
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(EOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_pad_token_id(EOS_ID)
    for name, w in tensors:
        writer.add_tensor(name, np.ascontiguousarray(w, dtype=np.float32))
    files = writer.format_shard_names(path)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return files


def split_gguf(source: Path, target: Path, parts: int) -> list[Path]:
    """`source` (any GGUF, quantised tensors included) split byte for byte into `parts` files named after
    `target` as gguf-split names them; the metadata goes to the first part."""
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, arch, split_max_tensors=-(-len(reader.tensors) // parts))
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    files = writer.format_shard_names(target)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()
    return files

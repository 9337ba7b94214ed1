"""Synthetic demand from a small statistical model, for capacity planning before any trace exists.

Spec: `"correction=0.6,hit=0.8"` (optional keys below) or a YAML/JSON file with the same keys, where
`correction` and `hit` may also be a list per layer, and `correction` a list of lists per layer and KV
head. Meaning: `correction` is the share of (step, layer, KV head) that are corrected, `hit`
the share of selected pages already resident on the GPU.

Model: per (step, layer, head) the correction probability is sigmoid(logit(c_lh) + x_l + y_lh + z_s,l)
with fixed per-layer offsets x ~ N(0, layer_sd), per-head offsets y ~ N(0, head_sd) (only when a scalar
rate is given) and a per-layer AR(1) drift over steps z (innovation sd `step_sd`, correlation
`step_rho`); the field is then shifted in logit space so that its mean equals the requested rate
exactly. Corrections are Bernoulli draws from it. The hit rate per (step, layer) follows the same
construction (no head offsets); the missed share of a head is Binomial(pages, 1 - hit) / pages.
Everything is drawn from `numpy.random.default_rng(seed)`: a fixed seed gives identical demand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.demand import Demand
from sim.errors import SimInputError
from sim.key_values import split_key_values
from sim.yaml_io import load_yaml, read_text_file
from traces.models import get_model
from traces.numbers import STANDARD_DEVIATION, SYNTHETIC_PAGES, SYNTHETIC_SEQS, SYNTHETIC_STEPS, Range
from traces.safe_load import load_json_text

__all__ = ["synthetic_demand", "parse_spec", "SPEC_DEFAULTS"]

SPEC_DEFAULTS: dict[str, float] = {
    "layer_sd": 0.5,  # logit sd of per-layer offsets
    "head_sd": 0.5,  # logit sd of per-head offsets
    "step_sd": 0.3,  # logit innovation sd of the per-layer drift over steps
    "step_rho": 0.95,  # AR(1) correlation of that drift from one step to the next
    "steps": 2048,  # steps generated per sequence (replays cycle)
    "seqs": 4,  # independent sequences (batch members replay different ones)
    "pages": 32,  # selected pages per head used for the binomial miss draws
}
_KEYS = ("correction", "hit", *SPEC_DEFAULTS)


def parse_spec(spec: str) -> dict[str, Any]:
    """`key=value,...` or a path to a YAML/JSON file -> validated dict with defaults filled in."""
    path = Path(spec)
    if "=" not in spec and path.suffix.lower() in (".yaml", ".yml", ".json"):
        raw = _read_spec_file(path, spec)
    else:
        def number(key: str, value: str) -> float:
            try:
                return float(value)
            except ValueError:
                raise SimInputError(f"synthetic spec {spec!r}: {key} must be a number") from None

        raw = split_key_values(
            spec,
            lambda part: SimInputError(
                f"synthetic spec {spec!r}: {part!r} is not key=value; e.g. 'correction=0.6,hit=0.8'"),
            lambda key: SimInputError(f"synthetic spec {spec!r}: {key!r} is given twice; give each key once"),
            convert=number)
    unknown = sorted(str(k) for k in set(raw) - set(_KEYS))
    if unknown:
        raise SimInputError(
            f"synthetic spec {spec!r}: unknown keys {unknown}; valid keys: {', '.join(_KEYS)}"
        )
    for key in ("correction", "hit"):
        if key not in raw:
            raise SimInputError(f"synthetic spec {spec!r}: '{key}' is required (a share in [0, 1])")
        arr = _shares(raw[key])
        if arr is None or arr.size == 0 or np.any(arr < 0) or np.any(arr > 1) or np.any(np.isnan(arr)):
            raise SimInputError(
                f"synthetic spec {spec!r}: '{key}' must be share(s) in [0, 1] (a number, a list per layer"
                f"{', or a list of lists per layer and head' if key == 'correction' else ''}), "
                f"got {raw[key]!r}"
            )
        raw[key] = arr.tolist()
    out = {**SPEC_DEFAULTS, **raw}
    for key, bound in _RANGES.items():
        value = out[key]
        if bound.integer and isinstance(value, float) and value.is_integer():
            value = int(value)
        out[key] = bound.check(value, f"synthetic spec {spec!r}: '{key}'", SimInputError)
    return out


_RANGES = {"layer_sd": STANDARD_DEVIATION, "head_sd": STANDARD_DEVIATION, "step_sd": STANDARD_DEVIATION,
           "step_rho": Range(0, 1, hi_open=True, unit="an AR(1) correlation"), "steps": SYNTHETIC_STEPS,
           "seqs": SYNTHETIC_SEQS, "pages": SYNTHETIC_PAGES}


def _read_spec_file(path: Path, spec: str) -> dict[Any, Any]:
    """The mapping in a YAML/JSON spec file; SimInputError naming the file when it is not one."""
    if not path.exists():
        raise SimInputError(f"synthetic spec file {spec} does not exist")
    text = read_text_file(path, "synthetic spec file")
    try:
        where = f"synthetic spec file {spec}"
        raw = load_json_text(text, where) if path.suffix.lower() == ".json" else load_yaml(text, where)
    except json.JSONDecodeError as exc:
        raise SimInputError(
            f"synthetic spec file {spec} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except yaml.YAMLError as exc:
        why = " ".join(str(exc).split())
        raise SimInputError(f"synthetic spec file {spec} is not valid YAML: {why}") from None
    if not isinstance(raw, dict):
        raise SimInputError(f"synthetic spec file {spec} must be a mapping with keys {', '.join(_KEYS)}")
    return raw


def _shares(value: Any) -> np.ndarray | None:
    """`value` as a float array (a number, a list, or a rectangular list of lists), or None."""
    def numeric(x: Any) -> bool:
        if isinstance(x, list):
            return all(numeric(y) for y in x)
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if not numeric(value):
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):  # ragged lists
        return None
    return arr if arr.ndim <= 2 else None


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _match_mean(logits: np.ndarray, target: float) -> np.ndarray:
    """Shift logits so that mean(sigmoid(logits + shift)) == target (bisection); 0/1 stay exact."""
    if target <= 0.0:
        return np.zeros_like(logits)
    if target >= 1.0:
        return np.ones_like(logits)
    shift = 0.0  # Newton on the shift (mean(sigmoid) is increasing and smooth in it), then bisection
    for _ in range(50):
        p = _sigmoid(logits + shift)
        err = float(p.mean()) - target
        slope = float((p * (1 - p)).mean())
        if abs(err) < 1e-10 or slope < 1e-12:
            break
        shift -= err / slope
        shift = float(np.clip(shift, -40.0, 40.0))
    return _sigmoid(logits + shift)


def _drift(rng: np.random.Generator, steps: int, layers: int, sd: float, rho: float) -> np.ndarray:
    """(steps, layers) stationary AR(1) with innovation sd `sd`."""
    z = np.empty((steps, layers))
    z[0] = rng.normal(0.0, sd / np.sqrt(1 - rho**2), layers)
    noise = rng.normal(0.0, sd, (steps, layers))
    for s in range(1, steps):
        z[s] = rho * z[s - 1] + noise[s]
    return z


def _rate_field(rate: Any, shape: tuple[int, int], name: str) -> np.ndarray:
    """Scalar, per-layer (L,) or per-layer-head (L, H) rate -> (L, H) array."""
    arr = np.asarray(rate, dtype=np.float64)
    layers, heads = shape
    if arr.ndim == 0:
        return np.full(shape, float(arr))
    if arr.shape == (layers,):
        return np.repeat(arr[:, None], heads, axis=1)
    if arr.shape == (layers, heads) and name == "correction":
        return arr
    raise SimInputError(
        f"synthetic '{name}' must be a scalar or a list of {layers} per-layer values"
        + (f" or {layers} lists of {heads} per-head values" if name == "correction" else "")
        + f"; got shape {arr.shape}"
    )


def synthetic_demand(spec: str, model: str, seed: int = 0) -> Demand:
    """Draw a Demand for `model` from the spec (module docstring); pure function of (spec, model, seed)."""
    params = parse_spec(spec)
    m = get_model(model)
    layers, heads = m.n_layers, m.n_kv_heads
    rng = np.random.default_rng(seed)
    corr_rate = _rate_field(params["correction"], (layers, heads), "correction")
    hit_rate = _rate_field(params["hit"], (layers, heads), "hit")[:, 0]
    scalar_corr = np.ndim(params["correction"]) == 0
    steps, seqs, pages = params["steps"], params["seqs"], params["pages"]
    layer_off = rng.normal(0.0, params["layer_sd"], layers) if scalar_corr else np.zeros(layers)
    head_off = (
        rng.normal(0.0, params["head_sd"], (layers, heads)) if scalar_corr else np.zeros((layers, heads))
    )
    scalar_hit = np.ndim(params["hit"]) == 0
    hit_off = rng.normal(0.0, params["layer_sd"], layers) if scalar_hit else np.zeros(layers)
    corrected, ratios = [], []
    for _ in range(seqs):
        drift = _drift(rng, steps, layers, params["step_sd"], params["step_rho"])  # (S, L)
        logits = _logit(corr_rate)[None] + layer_off[None, :, None] + head_off[None] + drift[:, :, None]
        if scalar_corr:
            p_corr = _match_mean(logits, float(corr_rate.mean()))
        else:
            p_corr = _per_layer_match(logits, corr_rate)
        corrected.append(rng.random(p_corr.shape) < p_corr)
        hdrift = _drift(rng, steps, layers, params["step_sd"], params["step_rho"])
        hit_logits = _logit(hit_rate)[None] + hit_off[None] + hdrift  # (S, L)
        if scalar_hit:
            p_hit = _match_mean(hit_logits, float(hit_rate.mean()))
        else:
            p_hit = _per_layer_match(hit_logits[..., None], hit_rate[:, None])[..., 0]
        missed = rng.binomial(pages, np.repeat((1.0 - p_hit)[:, :, None], heads, axis=2))
        ratios.append((missed / pages).astype(np.float32))
    return Demand(
        model=m.name,
        corrected=tuple(corrected),
        fetch_ratio=tuple(ratios),
        similarity=None,
        source=f"synthetic:{spec}",
        synthetic=spec,
    )


def _per_layer_match(logits: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Match the mean per layer (and head, where rates is (L, H)) over steps: (S, L, H) probabilities."""
    out = np.empty_like(logits)
    for idx in np.ndindex(*rates.shape):
        sl = (slice(None), *idx)
        out[sl] = _match_mean(logits[sl], float(rates[idx]))
    return out

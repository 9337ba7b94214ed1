"""How far the serving model has been off for an engine: its validation band, from the serving checks.

`serving_band(engine)` says, for the engine profile a `dse serve` answer assumed, how the request-level
serving model (schedulers, queueing, engine overheads: sim/serving) did against real serving runs replayed
on that engine, e.g. "goodput ours/measured 1.61-1.64 on DistServe's vLLM 0.2 runs (...), held out; ...",
and how it did on the published capacity numbers (within 1.3x on n of m rows, the worst). An engine no
measured run checks gets a line saying so, with what the checks found for kernels-only engines and for
engines fitted by `dse engine-fit` (the numbers read from the file, never typed here).

The numbers are read from `sim/validation/serving_bands.yaml`. Two scripts write it, each its own section:
- `published`: `benchmarks/validate_serving.py --write-bands` (the published rows of
  benchmarks/serving_published.py, each row's ours / published ratio on the engine it ran on, its
  diagnostic engines' ratios, and the tally within TARGET);
- `measured`: `benchmarks/validate_serving_measured.py --write-bands` (DistServe's measured runs replayed:
  per engine and config, the goodput ratios ours / measured at each SLO and attainment level where both
  curves cross, whether the engine is held out, which runs).
tests/sim/test_serving_validation_bands.py fails when the file no longer matches what they compute.

Torch-free (sim/ never imports torch); imports neither dse nor benchmarks/.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import SimInputError
from sim.validation_bands import off_factor
from sim.yaml_io import load_yaml, read_text_file

__all__ = [
    "GENERATED_BY",
    "KINDS",
    "SECTIONS",
    "SERVING_BANDS_FILE",
    "TARGET",
    "dump_document",
    "load_document",
    "measured_section",
    "profile_digest",
    "published_section",
    "published_tally",
    "serving_band",
    "with_section",
    "write_section",
]

SERVING_BANDS_FILE = Path(__file__).resolve().parents[1] / "validation" / "serving_bands.yaml"
TARGET = 1.3  # benchmarks/validate_serving.py TARGET: within 1/1.3 to 1.3
GENERATED_BY = {
    "published": "PYTHONPATH=. python benchmarks/validate_serving.py --implementation ideal --requests 2048 "
    "--write-bands",
    "measured": "PYTHONPATH=. python benchmarks/validate_serving_measured.py --write-bands",
}
SECTIONS = tuple(GENERATED_BY)
KINDS = {  # engine kind -> how a line names it
    "kernels only": "kernels only (the step model, no engine host time)",
    "host time": "host time per iteration added to the step model",
    "whole steps": "a profiled engine's whole iteration times",
    "fitted": "fitted by `dse engine-fit` to a measured run",
}
RATIO_DECIMALS = 4
_TP_SUFFIX = re.compile(r"-tp\d+$")
_END_SUFFIX = re.compile(r" \((low|high) end\)$")  # EngineProfile.at_end's name


def published_tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """From row records {key, engine, ratio, ...}: how many rows, how many within TARGET either way, and
    the worst row (its factor max(r, 1/r), ratio, key and engine)."""
    within = sum(1 for r in rows if off_factor(r["ratio"]) <= TARGET)
    out: dict[str, Any] = {"rows": len(rows), "within": within}
    if rows:
        worst = max(rows, key=lambda r: off_factor(r["ratio"]))
        out.update(worst_row=worst["key"], worst_ratio=worst["ratio"], worst_engine=worst["engine"],
                   worst_factor=round(off_factor(worst["ratio"]), RATIO_DECIMALS))
    return out


def published_section(results: list[dict[str, Any]], implementation: str, requests: int,
                      seed: int) -> dict[str, Any]:
    """The `published` section from benchmarks/validate_serving.py's results (rows run on their own
    engine, `--engine as-run`): each row's ratio and diagnostics, rows not run, and the tally."""
    rows, not_run = [], []
    for r in results:
        if r.get("ratio") is None:
            not_run.append({"key": r["key"], "status": r["status"]})
            continue
        rows.append({
            "key": r["key"],
            "engine": r["engine"],
            "ratio": round(float(r["ratio"]), RATIO_DECIMALS),
            "diagnostics": {d["engine"]: round(float(d["ratio"]), RATIO_DECIMALS)
                            for d in r.get("diagnostics", [])},
        })
    return {"implementation": implementation, "requests": requests, "seed": seed,
            "tally": published_tally(rows), "rows": rows, "not_run": not_run}


def _ratios(curve: dict[str, Any], slos: list[str]) -> tuple[list[dict[str, Any]], list[float]]:
    """Every goodput of one config's curve (per SLO and level) and the defined ratios among them."""
    goodputs, ratios = [], []
    for slo in slos:
        for g in curve[slo]["goodput"]:
            ratio = None if g.get("ratio") is None else round(float(g["ratio"]), RATIO_DECIMALS)
            above = None if g.get("ratio_above") is None else round(float(g["ratio_above"]), RATIO_DECIMALS)
            goodputs.append({"slo": slo, "level_pct": float(g["level_pct"]),
                             "measured": None if g["measured"] is None else round(float(g["measured"]), 4),
                             "ours": None if g.get("ours") is None else round(float(g["ours"]), 4),
                             "ratio": ratio, "ratio_above": above})
            if ratio is not None:
                ratios.append(ratio)
    return goodputs, ratios


def profile_digest(path: str) -> str:
    """sha256 of an engine profile file's text ("" for no file: `none`), so a band is only given to the
    very profile that was checked."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""


def measured_section(results: list[dict[str, Any]], kinds: dict[str, str], configs: dict[str, str],
                     slos: list[str], implementation: str, source: str,
                     digests: dict[str, str], hardware: str) -> dict[str, Any]:
    """The `measured` section from benchmarks/validate_serving_measured.py's results (one per engine):
    per engine its kind (a KINDS key, `kinds[engine name]`) and per config replayed on it the runs, whether
    held out, the goodputs and the min-max of their ratios ours / measured. `configs`: config -> the text
    naming its runs; `source`: whose runs, a phrase; `digests`: engine name -> profile_digest of its file;
    `hardware`: the hardware profile the runs were replayed on."""
    engines: dict[str, Any] = {}
    for res in results:
        checks = []
        for config, curve in res["configs"].items():
            if curve.get("measured_only"):
                continue
            goodputs, ratios = _ratios(curve, slos)
            runs = [k for k, r in res["runs"].items() if r["config"] == config and r["status"] == "ok"]
            train = [k for k in runs if res["runs"][k].get("train")]
            checks.append({
                "config": config,
                "runs_text": configs[config],
                "runs": runs,
                "rates": [float(x) for x in curve["rates"]],
                "train_runs": train,
                "held_out": str(curve.get("held_out", res["held_out"])),
                "engines": str(curve.get("engines", res["engine"])),
                "ratio_min": min(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "goodputs": goodputs,
            })
        order = list(configs)
        checks.sort(key=lambda c: order.index(c["config"]))
        engines[res["engine"]] = {"kind": kinds[res["engine"]], "profile_sha256": digests[res["engine"]],
                                  "checks": checks}
    return {"source": source, "hardware": hardware, "implementation": implementation, "slos": list(slos),
            "engines": engines}


def with_section(doc: dict[str, Any] | None, section: str, content: dict[str, Any]) -> dict[str, Any]:
    """`doc` (the bands file's content, or None) with `section` replaced; keys in a fixed order."""
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    old = dict(doc or {})
    old[section] = content
    out: dict[str, Any] = {"generated_by": dict(GENERATED_BY), "target": TARGET}
    for name in SECTIONS:
        if name in old:
            out[name] = old[name]
    return out


def dump_document(doc: dict[str, Any]) -> str:
    """The YAML text of the serving bands file: a header saying how it is made, then `doc`."""
    header = (
        "# Written by two scripts, each its own section; do not edit:\n"
        + "".join(f"#   {name}: `{cmd}`\n" for name, cmd in GENERATED_BY.items())
        + "# tests/sim/test_serving_validation_bands.py fails when it no longer matches what they compute.\n"
    )
    body = yaml.safe_dump(doc, sort_keys=False, width=200, allow_unicode=True, default_flow_style=None)
    return header + body


def write_section(section: str, content: dict[str, Any], path: str | None = None) -> Path:
    """Replace `section` of the serving bands file (default SERVING_BANDS_FILE; created if absent, the other
    section kept as it is) and return the file's path."""
    target = SERVING_BANDS_FILE if path is None else Path(path)
    old = None
    if target.is_file():
        old = load_yaml(read_text_file(target, "serving validation bands file"),
                        f"serving validation bands file {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dump_document(with_section(old if isinstance(old, dict) else None, section, content)),
                      encoding="utf-8")
    load_document.cache_clear()
    return target


@functools.cache
def load_document(path: str | None = None) -> dict[str, Any]:
    """The parsed serving bands file (default SERVING_BANDS_FILE), read once per process."""
    target = SERVING_BANDS_FILE if path is None else Path(path)
    doc = load_yaml(read_text_file(target, "serving validation bands file"),
                    f"serving validation bands file {target}")
    if not isinstance(doc, dict) or not all(s in doc for s in SECTIONS):
        raise SimInputError(
            f"serving validation bands file {target}: not a serving bands file (it needs the sections "
            f"{', '.join(SECTIONS)}); regenerate it with {GENERATED_BY['published']} and "
            f"{GENERATED_BY['measured']}"
        )
    return doc


def _range(lo: float, hi: float) -> str:
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def _check_text(check: dict[str, Any]) -> str:
    """One check as a phrase: "1.61-1.64 on <runs> (<rates>, held out ...)"."""
    rates = check["rates"]
    where = f"{check['runs_text']}, {len(check['runs'])} runs at {rates[0]:g}-{rates[-1]:g} req/s"
    text = check["held_out"]
    if text.startswith("held out"):
        held = " (held out)"
    elif text.startswith("NOT held out"):
        held = " (NOT held out: the profile was aligned with these runs)"
    elif check["train_runs"]:
        held = f" (fitted on {', '.join(check['train_runs'])}, the others held out)"
    else:
        held = f" ({text.split(':')[0].split(';')[0]})"
    if check["ratio_min"] is None:
        return f"no goodput crossed on both curves on {where}{held}"
    return f"{_range(check['ratio_min'], check['ratio_max'])} on {where}{held}"


def _published_text(pub: dict[str, Any]) -> str:
    t = pub["tally"]
    return (f"published capacities, ours/published on each run's own engine: within {TARGET:g}x on "
            f"{t['within']} of {t['rows']} rows, worst {t['worst_row']} {t['worst_ratio']:.2f} (engine "
            f"{t['worst_engine']})")


def _kind_range(measured: dict[str, Any], kind: str, config: str) -> tuple[float, float] | None:
    """The min-max goodput ratio over every engine of `kind` on `config`'s runs, or None."""
    checks = [c for e in measured["engines"].values() if e["kind"] == kind for c in e["checks"]
              if c["config"] == config and c["ratio_min"] is not None]
    ratios = [x for c in checks for x in (c["ratio_min"], c["ratio_max"])]
    return (min(ratios), max(ratios)) if ratios else None


def _unchecked_text(measured: dict[str, Any]) -> str:
    """What the checks found for kernels-only and fitted engines on the vLLM runs (the file's numbers)."""
    gpu = measured.get("hardware")
    where = f"DistServe's vLLM 0.2 runs ({gpu})" if gpu else "DistServe's vLLM 0.2 runs"
    parts = []
    kernels = _kind_range(measured, "kernels only", "tp1")
    if kernels is not None:
        verb = "over-predicted" if kernels[0] > 1 else "predicted"
        parts.append(f"on {where}, kernels-only engines {verb} capacity by "
                     f"{_range(*kernels)}x")
    fitted = _kind_range(measured, "fitted", "tp1")
    if fitted is not None:
        parts.append(f"engines fitted by `dse engine-fit` on the lowest-rate run were {_range(*fitted)}x on "
                     "the held-out runs")
    return "; ".join(parts)


def serving_band(engine: str, profile_file: str | None = None, hardware: list[str] | None = None,
                 path: str | None = None) -> dict[str, Any]:
    """The serving model's validation band for the engine profile named `engine` (EngineProfile.name; a
    `-tpN` profile falls back to its TP 1 profile's checks, and a profile at the low or high end of its
    ranges (`NAME@low`) to its measured values, each said so; `profile_file`: the profile's file, whose
    text must be the checked file's, else the engine counts as unchecked; `hardware`: the answer's hardware
    profiles, the checks counting only for the one they ran on): {engine, checked_as, kind, checks,
    hardware_checked, hardware_unchecked, published, label}, `label` the line `dse serve` prints. `path`:
    another file of the same form."""
    doc = load_document(path)
    measured, pub = doc["measured"], doc["published"]
    engines = measured["engines"]
    end = _END_SUFFIX.search(engine)
    plain = _END_SUFFIX.sub("", engine)
    key = plain if plain in engines else _TP_SUFFIX.sub("", plain)
    entry = engines.get(key)
    published = _published_text(pub)
    pricing = f"[{measured['implementation']} pricing]"
    other = (entry is not None and profile_file is not None and key == plain
             and profile_digest(profile_file) != entry.get("profile_sha256"))
    gpu = measured.get("hardware", "")
    answered = list(dict.fromkeys(hardware or []))
    unchecked_hw = [h for h in answered if h != gpu]
    checked_hw = [h for h in answered if h == gpu]
    if entry is None or not entry["checks"] or other or (answered and not checked_hw):
        unchecked = _unchecked_text(measured)
        named = f" (a profile named {key} whose file differs from the one checked)" if other else ""
        elsewhere = entry is not None and entry["checks"] and not other and answered
        on = f" on {', '.join(answered)} (its checks ran on {gpu})" if elsewhere else ""
        label = (f"no measured serving run checks this engine{named}{on}; "
                 f"{unchecked + '; ' if unchecked else ''}fit your server with `dse engine-fit`; {published} "
                 f"{pricing}")
        return {"engine": engine, "checked_as": None, "kind": None, "checks": [], "hardware_checked": [],
                "hardware_unchecked": answered, "published": pub["tally"], "label": label}
    notes = []
    if key != plain:
        itself = any(f"prefill {plain} " in c.get("engines", "") for c in entry["checks"])
        also = "; this profile priced the TP 2 prefill replica of DistServe's runs" if itself else ""
        notes.append(f"checked as {key}, its TP 1 profile{also}")
    if end is not None:
        notes.append(f"checked at its measured values, not at the {end.group(1)} end of its ranges")
    if unchecked_hw:
        notes.append(f"checked on {gpu} only, not on {', '.join(unchecked_hw)}")
    via = f" ({'; '.join(notes)})" if notes else ""
    checks = "; ".join(_check_text(c) for c in entry["checks"])
    kind = KINDS.get(entry["kind"], entry["kind"])
    label = f"{kind}{via}: goodput ours/measured on {measured['source']}: {checks}; {published} {pricing}"
    brief = [{k: v for k, v in c.items() if k not in ("runs", "goodputs")} for c in entry["checks"]]
    return {"engine": engine, "checked_as": key, "kind": entry["kind"], "checks": brief,
            "hardware_checked": checked_hw, "hardware_unchecked": unchecked_hw, "published": pub["tally"],
            "label": label}

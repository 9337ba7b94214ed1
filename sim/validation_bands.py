"""How far the simulator has been off for a method: its validation band, from benchmarks/validate_sim.py.

`band(method, mode)` says, for one simulated method and pricing mode ("as-published" or "ideal",
SimConfig.implementation), how many of the published results checked by benchmarks/validate_sim.py the
simulator predicted within 1.2x / 1.6x / 2x, and the worst one, e.g. "within 1.2x on 9 of 11 published
results (within 2x on 11 of 11); worst 1.43x (...)", or "no published result for <method> checked". For
FreeKV it adds the held-out check of benchmarks/heldout_freekv.py (the FreeKV paper's "up to 13x"),
labelled held out.

The numbers are not typed here: they are read from `sim/validation/bands.yaml`, which
`PYTHONPATH=. python benchmarks/validate_sim.py --write-bands` writes from the benchmark's rows (each
row's predicted / published ratio in both modes, then the tallies made by `summarize`);
tests/sim/test_validation_bands.py checks that the file matches the rows (fast: the tallies, the row
list and a sample of re-predicted rows; slow: the whole regeneration). A row counts toward the method it
simulates (`Row.method` of benchmarks/validate_sim_rows.py: the sparse method for a speedup over full
attention, "dense" for full attention's own throughput); only measured rows are counted, the authors'
projections (ShadowKV's "Full Attention (Inf)" column) are listed in the file but not counted.

Torch-free (sim/ never imports torch), and it does not import benchmarks/ (scripts, not a package).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.config import IMPLEMENTATIONS
from sim.errors import SimInputError
from sim.yaml_io import load_yaml, read_text_file

__all__ = [
    "BANDS",
    "BANDS_FILE",
    "GENERATED_BY",
    "HeldOut",
    "ValidationBand",
    "band",
    "build_document",
    "dump_document",
    "load_document",
    "off_factor",
    "summarize",
]

BANDS = (1.2, 1.6, 2.0)  # benchmarks/validate_sim.py BANDS
BANDS_FILE = Path(__file__).resolve().parent / "validation" / "bands.yaml"
GENERATED_BY = "PYTHONPATH=. python benchmarks/validate_sim.py --write-bands"
RATIO_DECIMALS = 4  # ratios are stored rounded; the tallies are made from the stored values


def off_factor(ratio: float) -> float:
    """How far off a predicted / published ratio is, either way: max(r, 1/r)."""
    return max(ratio, 1.0 / ratio)


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per method and mode, from row records {key, method, measured, source, ratio: {mode: r}}: the
    measured rows' count, how many are within each band (a list in BANDS order), the worst row (its
    factor max(r, 1/r), ratio, key and source) and how many projections were left out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method in sorted({r["method"] for r in rows}):
        mine = [r for r in rows if r["method"] == method]
        measured = [r for r in mine if r["measured"]]
        out[method] = {}
        for mode in IMPLEMENTATIONS:
            entry: dict[str, Any] = {
                "rows": len(measured),
                "within": [sum(1 for r in measured if off_factor(r["ratio"][mode]) <= b) for b in BANDS],
                "projections": len(mine) - len(measured),
            }
            if measured:
                worst = max(measured, key=lambda r: off_factor(r["ratio"][mode]))
                entry.update(
                    worst_factor=round(off_factor(worst["ratio"][mode]), RATIO_DECIMALS),
                    worst_ratio=worst["ratio"][mode],
                    worst_row=worst["key"],
                    worst_source=worst["source"],
                )
            out[method][mode] = entry
    return out


def build_document(rows: list[dict[str, Any]], heldout: dict[str, Any] | None = None) -> dict[str, Any]:
    """The bands file's content from row records (ratios rounded to RATIO_DECIMALS here) and the held-out
    checks {method: {source, <mode>: {predicted, published, ratio, peer, setting}}}."""
    records = [
        {
            "key": r["key"],
            "method": r["method"],
            "measured": bool(r["measured"]),
            "source": r["source"],
            "ratio": {m: round(float(r["ratio"][m]), RATIO_DECIMALS) for m in IMPLEMENTATIONS},
        }
        for r in rows
    ]
    held = {
        method: {
            "source": h["source"],
            **{
                m: {
                    "predicted": round(float(h[m]["predicted"]), RATIO_DECIMALS),
                    "published": float(h[m]["published"]),
                    "ratio": round(float(h[m]["ratio"]), RATIO_DECIMALS),
                    "peer": h[m]["peer"],
                    "setting": h[m]["setting"],
                }
                for m in IMPLEMENTATIONS
            },
        }
        for method, h in sorted((heldout or {}).items())
    }
    return {
        "generated_by": GENERATED_BY,
        "bands": list(BANDS),
        "counted": "measured rows only; the authors' projections are listed (measured: false), not counted",
        "methods": summarize(records),
        "heldout": held,
        "rows": records,
    }


def dump_document(doc: dict[str, Any]) -> str:
    """The YAML text of the bands file (a header saying how it is made, then `doc`, keys in order)."""
    header = (
        f"# Written by `{GENERATED_BY}` from the benchmark's rows; do not edit.\n"
        "# tests/sim/test_validation_bands.py fails when it no longer matches them.\n"
    )
    body = yaml.safe_dump(doc, sort_keys=False, width=200, allow_unicode=True, default_flow_style=None)
    return header + body


@functools.cache
def load_document(path: str | None = None) -> dict[str, Any]:
    """The parsed bands file (default BANDS_FILE), read once per process."""
    target = BANDS_FILE if path is None else Path(path)
    doc = load_yaml(read_text_file(target, "validation bands file"), f"validation bands file {target}")
    if not isinstance(doc, dict) or "methods" not in doc:
        raise SimInputError(f"validation bands file {target}: not a bands file (no 'methods'); "
                            f"regenerate it with {GENERATED_BY}")
    return doc


@dataclass(frozen=True)
class HeldOut:
    """A held-out published figure (never tuned to) and the simulator's prediction of it."""

    source: str
    predicted: float
    published: float
    ratio: float  # predicted / published
    peer: str
    setting: str

    def label(self) -> str:
        return (f"held out: {self.source}; predicted up to {self.predicted:.3g}x (over {self.peer}, "
                f"{self.setting}), {self.ratio:.2f}x the published {self.published:g}x")


@dataclass(frozen=True)
class ValidationBand:
    """How the simulator did on the published results checked for one method in one pricing mode.

    rows: measured published results counted; within: band -> rows within it (max(r, 1/r) <= band);
    worst_*: the row furthest off (None when no row); projections: the authors' projections left out;
    heldout: the held-out check, if the method has one; generated_by: the command that made the data."""

    method: str
    mode: str
    rows: int
    within: dict[float, int]
    worst_factor: float | None
    worst_ratio: float | None
    worst_row: str | None
    worst_source: str | None
    projections: int
    heldout: HeldOut | None
    generated_by: str

    @property
    def checked(self) -> bool:
        """Whether any published result (counted or held out) was checked for the method."""
        return self.rows > 0 or self.heldout is not None

    def label(self) -> str:
        """One line: 'within 1.2x on 9 of 11 published results (within 2x on 11 of 11); worst 1.43x
        (...)', the held-out check after it, or 'no published result for <method> checked (...)'."""
        parts = []
        if self.rows:
            lo, hi = BANDS[0], BANDS[-1]
            source = (self.worst_source or "").split(";")[0]
            parts.append(
                f"within {lo:g}x on {self.within[lo]} of {self.rows} published results (within {hi:g}x "
                f"on {self.within[hi]} of {self.rows}); worst {self.worst_factor:.2f}x "
                f"(predicted/published {self.worst_ratio:.2f}, {self.worst_row}: {source})"
            )
        else:
            parts.append(f"no published result for {self.method} checked by benchmarks/validate_sim.py")
        if self.heldout is not None:
            parts.append(self.heldout.label())
        return f"{'; '.join(parts)} [{self.mode} pricing]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "mode": self.mode,
            "rows": self.rows,
            "within": {f"{b:g}x": n for b, n in self.within.items()},
            "worst_factor": self.worst_factor,
            "worst_ratio": self.worst_ratio,
            "worst_row": self.worst_row,
            "worst_source": self.worst_source,
            "projections": self.projections,
            "heldout": None if self.heldout is None else {
                "source": self.heldout.source, "predicted": self.heldout.predicted,
                "published": self.heldout.published, "ratio": self.heldout.ratio,
                "peer": self.heldout.peer, "setting": self.heldout.setting,
            },
            "label": self.label(),
            "generated_by": self.generated_by,
        }


def band(method: str, mode: str, path: str | None = None) -> ValidationBand:
    """The validation band of `method` priced `mode` ("as-published" or "ideal"), from the bands file
    (`path`: another file written by the same command, for tests)."""
    if mode not in IMPLEMENTATIONS:
        raise SimInputError(f"pricing mode must be one of {', '.join(IMPLEMENTATIONS)}, got {mode!r}")
    doc = load_document(path)
    entry = doc["methods"].get(method, {}).get(mode, {})
    held = doc.get("heldout", {}).get(method)
    heldout = None if held is None else HeldOut(source=held["source"], **held[mode])
    rows = int(entry.get("rows", 0))
    within = entry.get("within", [0] * len(BANDS))
    return ValidationBand(
        method=method,
        mode=mode,
        rows=rows,
        within=dict(zip(BANDS, (int(n) for n in within), strict=True)),
        worst_factor=entry.get("worst_factor"),
        worst_ratio=entry.get("worst_ratio"),
        worst_row=entry.get("worst_row"),
        worst_source=entry.get("worst_source"),
        projections=int(entry.get("projections", 0)),
        heldout=heldout,
        generated_by=str(doc.get("generated_by", GENERATED_BY)),
    )

"""Train DuoAttention's head gates on a model and write its pattern (CLI).

    python -m freekv_runtime.duo_train --model smollm2-135m --out freekv_runtime/patterns/smollm2-135m \
        --steps 36 --lr 0.1 --sink 16 --recent 112 --context-min 256 --context-max 512 --passkeys 4 \
        --passkey-words 8

Writes OUT/full_attention_heads.tsv (DuoAttention's format: one row per layer, one tab-separated gate value
per KV head, np.savetxt as duo_attn/utils.py 376-381) and OUT/provenance.json (model and its weight
fingerprint, settings, data spec, seed, per-step losses, wall time, gate summary). The optimisation is
freekv_runtime.duo_gates, the data freekv_runtime.duo_data; every default here is the published run's
unless its help says otherwise. Bad flags: one paragraph naming the flag, exit 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from freekv_runtime.duo_data import PasskeyDataSpec, PasskeySamples
from freekv_runtime.duo_gates import GateTraining, TrainedGates, train_gates
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.model import ModelAdapter
from freekv_runtime.policies._duo_patterns import PATTERN_FILE, PROVENANCE_FILE, fingerprint

__all__ = ["main", "gate_summary"]

log = logging.getLogger(__name__)


def gate_summary(alpha: np.ndarray) -> dict[str, Any]:
    """Share of gates above 0.5 overall and per layer, and their quartiles."""
    return {"share_above_0_5": float((alpha > 0.5).mean()),
            "per_layer_above_0_5": [int(x) for x in (alpha > 0.5).sum(axis=1)],
            "quartiles": [float(x) for x in np.quantile(alpha, [0.0, 0.25, 0.5, 0.75, 1.0])]}


def _parser() -> argparse.ArgumentParser:
    d, s = PasskeyDataSpec(), GateTraining()
    p = argparse.ArgumentParser(prog="python -m freekv_runtime.duo_train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="registry name or model path")
    p.add_argument("--weights", default=None, help="weights path (as `dse trace --weights`)")
    p.add_argument("--out", type=Path, required=True, help="directory for the pattern and provenance")
    p.add_argument("--steps", type=int, default=s.steps, help="optimizer steps (published 2000)")
    p.add_argument("--lr", type=float, default=s.lr, help="AdamW learning rate (published 0.02)")
    p.add_argument("--reg-weight", type=float, default=s.reg_weight, help="L1 weight (published 0.05)")
    p.add_argument("--sink", type=int, default=s.sink, help="streaming sink tokens (published 128)")
    p.add_argument("--recent", type=int, default=s.recent, help="streaming recent tokens (published 256)")
    p.add_argument("--context-min", type=int, default=d.context_min_tokens, help="haystack tokens, min")
    p.add_argument("--context-max", type=int, default=d.context_max_tokens, help="haystack tokens, max")
    p.add_argument("--context-intervals", type=int, default=d.context_intervals)
    p.add_argument("--passkeys", type=int, default=d.n_passkeys, help="passkeys per sample (published 10)")
    p.add_argument("--passkey-words", type=int, default=d.passkey_words, help="words per passkey (32)")
    p.add_argument("--seed", type=int, default=42, help="seed of the samples (utils.py 78: 42)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--max-wall-s", type=float, default=float("inf"),
                   help="stop after this many seconds (recorded in the provenance)")
    return p


def _samples(data: PasskeySamples, rng: np.random.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    while True:
        sample = data.draw(rng)
        yield torch.tensor([sample.token_ids]), torch.tensor([sample.labelled])


def _provenance(args: argparse.Namespace, loaded: Any, adapter: ModelAdapter, settings: GateTraining,
                spec: PasskeyDataSpec, result: TrainedGates) -> dict[str, Any]:
    return {
        "format": "DuoAttention full_attention_heads.tsv: layers x KV heads gate values in [0, 1]",
        "model": loaded.spec.name, "model_source": loaded.source,
        "shape": [adapter.shape.n_layers, adapter.shape.n_kv_heads],
        "fingerprint": fingerprint(adapter),
        "optimisation": "freekv_runtime.duo_gates (mit-han-lab/duo-attention train.py, read at fe93c31)",
        "settings": asdict(settings), "data": spec.describe(), "seed": args.seed,
        "steps_done": len(result.distill), "stopped_early": result.stopped_early,
        "wall_s": round(result.wall_s, 1), "device": "cpu", "dtype": "float32",
        "torch_threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
        "sample_tokens": result.sample_tokens,
        "distill_loss": [round(x, 6) for x in result.distill],
        "reg_loss": [round(x, 6) for x in result.reg],
        "gates": gate_summary(result.alpha),
        "written": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m freekv_runtime.duo_train " + " ".join(sys.argv[1:]),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        if args.steps < 1 or args.sink < 0 or args.recent < 1 or args.lr <= 0 or args.reg_weight < 0:
            raise RuntimeInputError(
                f"--steps must be >= 1, --sink >= 0, --recent >= 1, --lr > 0 and --reg-weight >= 0; got "
                f"{args.steps}, {args.sink}, {args.recent}, {args.lr}, {args.reg_weight}")
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        spec = PasskeyDataSpec(context_min_tokens=args.context_min, context_max_tokens=args.context_max,
                               context_intervals=args.context_intervals, n_passkeys=args.passkeys,
                               passkey_words=args.passkey_words)
        settings = GateTraining(steps=args.steps, lr=args.lr, reg_weight=args.reg_weight, sink=args.sink,
                                recent=args.recent)
        from freekv_runtime.weights import load_model

        loaded = load_model(args.model, args.weights, "cpu", torch.float32)
        data = PasskeySamples(spec, loaded.tokenizer)
    except (RuntimeInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    adapter = ModelAdapter(loaded.model)
    torch.manual_seed(args.seed)

    def report(step: int, distill: float, reg: float, n_tokens: int) -> None:
        log.info("step %d/%d  tokens %d  distill %.5f  reg %.4f", step + 1, args.steps, n_tokens, distill,
                 reg)

    result = train_gates(adapter, _samples(data, np.random.default_rng(args.seed)), settings, report,
                         args.max_wall_s)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savetxt(args.out / PATTERN_FILE, result.alpha, delimiter="\t")
    provenance = _provenance(args, loaded, adapter, settings, spec, result)
    (args.out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n")
    log.info("wrote %s (%d steps, %.0f s): %s", args.out, len(result.distill), result.wall_s,
             provenance["gates"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

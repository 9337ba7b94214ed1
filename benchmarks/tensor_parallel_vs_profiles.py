"""The tensor-parallel step model against DistServe's profiled whole steps at TP 1-8 (a held-out check).

    PYTHONPATH=. python benchmarks/tensor_parallel_vs_profiles.py [--implementation ideal|as-published]

DistServe profiled vLLM and its own engine serving OPT-13B at tensor parallel 1, 2 and 4 and OPT-66B at 2,
4 and 8 on A100 80GB GPUs (sim/engine_profiles/distserve-*-a100[-tpN].yaml, from LLMServe/DistServe
simdistserve/estimators/profile_data/profiler-a100-80g.*.json@82831f1). For each, this prints one prefill
of 1024 tokens and one decode step of 32 sequences at 1024 tokens, ours (one GPU's shard through the step
model plus the measured all-reduces, engine none: sim/serving/tensor_parallel.py) against the profile's
forward (its fitted iteration less its simulator's Ray overhead, simdistserve/base/worker.py:145-149), and
each side's time at TP t over its own smallest degree: how the two scale with t. Nothing was fitted to
these profiles. Simulated on CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = (("opt-13b", (1, 2, 4)), ("opt-66b", (2, 4, 8)))
PREFILL_TOKENS, BATCH, CONTEXT = 1024, 32, 1024


def rows(implementation: str) -> list[dict[str, object]]:
    from sim.config import SimConfig
    from sim.serving import StepCosts
    from sim.serving.engine import load_engine

    out: list[dict[str, object]] = []
    for model, degrees in CASES:
        cfg = SimConfig(model=model, hardware="a100-80g-sxm", method="dense", input_tokens=PREFILL_TOKENS,
                        output_tokens=64, implementation=implementation)
        for engine in ("distserve-vllm", "distserve"):
            base: dict[str, float] = {}
            for t in degrees:
                ours = StepCosts(cfg, None, tensor_parallel=t)
                name = f"{engine}-{model.replace('-', '')}-a100" + ("" if t == 1 else f"-tp{t}")
                st = load_engine(name).step_time
                assert st is not None
                per_token_ms = st.iteration_per_context_token_ms
                ray_prefill = (st.iteration_fixed_ms + per_token_ms * PREFILL_TOKENS) / 1e3
                ray_decode = (st.iteration_fixed_ms + per_token_ms * BATCH * CONTEXT) / 1e3
                values = {
                    "ours_prefill_s": ours.prefill_s(PREFILL_TOKENS),
                    "profile_prefill_s": st.prefill_s([PREFILL_TOKENS]) - ray_prefill,
                    "ours_decode_s": ours.decode_s(BATCH, CONTEXT),
                    "profile_decode_s": st.decode_s(BATCH, CONTEXT) - ray_decode,
                }
                base = base or values
                out.append({"model": model, "engine": name, "tp": t, **values,
                            **{f"{k}_scaling": v / base[k] for k, v in values.items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--implementation", choices=("ideal", "as-published"), default="ideal")
    args = parser.parse_args(argv)
    print(f"{'profile':34} {'TP':>2}  {'prefill ours / profile ms (ratio; scaling ours, profile)':58}  "
          "decode 32 @ 1024: ours / profile ms (ratio; scaling)")
    for r in rows(args.implementation):
        op, pp = r["ours_prefill_s"], r["profile_prefill_s"]
        od, pd = r["ours_decode_s"], r["profile_decode_s"]
        print(f"{r['engine']:34} {r['tp']:>2}  {op * 1e3:7.1f} / {pp * 1e3:7.1f} ({op / pp:.2f}; "  # type: ignore[operator]
              f"{r['ours_prefill_s_scaling']:.2f}, {r['profile_prefill_s_scaling']:.2f}){'':13}  "
              f"{od * 1e3:6.1f} / {pd * 1e3:6.1f} ({od / pd:.2f}; "  # type: ignore[operator]
              f"{r['ours_decode_s_scaling']:.2f}, {r['profile_decode_s_scaling']:.2f})")
    print("simulated on CPU (engine none, the step model's kernels and the all-reduces); profiles: "
          "DistServe's fitted whole iterations less simdistserve's Ray overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())

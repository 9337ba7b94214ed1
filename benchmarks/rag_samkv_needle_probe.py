"""Is the asked fact among SamKV's kept tokens? rag_facts with the default model, one prompt at a time.

    python benchmarks/rag_samkv_needle_probe.py --documents 2 --samples 12 --context-tokens 2048

Per prompt (the same prompts as benchmarks/rag_table.py with the same settings and seed): the position of
the asked 7-digit value in the joined prompt, at how many layers SamKV's plan keeps all of its tokens
(and any of them), the kept share of the prompt at layer 0, and SamKV's greedy answer against the gold
value. The plans are read from the real SamKV policy (freekv_runtime/policies/samkv.py) by wrapping its
`layer_plan`; nothing about its decisions is changed. Batch size 1, so positions are the prompt's own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies import make_policy, samkv
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.rag_table import add_rag_facts_arguments, rag_facts_spec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rag_facts_arguments(ap, samples=12, context_tokens=2048, decode_tokens=8)
    args = ap.parse_args()
    seen: list[samkv.SamKVPlan] = []
    layer_plan = samkv.SamKVPlan.layer_plan

    def recording(self: samkv.SamKVPlan, *a, **kw):  # noqa: ANN002, ANN003, ANN202
        out = layer_plan(self, *a, **kw)
        if not any(p is self for p in seen):
            seen.append(self)
        return out

    samkv.SamKVPlan.layer_plan = recording  # type: ignore[method-assign]
    device = torch.device("cpu")
    loaded = load_model("smollm2-135m", None, device, torch.float32)
    spec, task = rag_facts_spec(args)
    runner = PolicyRunner(loaded, make_policy(RuntimeConfig(method="samkv", knobs={})), None,
                          OpTimer(device), batch_size=1)
    tok = loaded.tokenizer
    whole = 0
    for i, sample in enumerate(task.samples(spec, tok, args.seed)):
        seen.clear()
        tokens, _, _ = runner.multi_context_batch([sample.token_ids], [sample.segments],
                                                  args.decode_tokens)[0]
        ids = sample.token_ids
        value = tok.encode(sample.answers[0], add_special_tokens=False)
        end = len(ids) - len(sample.query)
        at = [p for p in range(end - len(value) + 1) if ids[p:p + len(value)] == value]
        if not at or len(seen) != 1 or seen[0].plans is None:
            print(f"prompt {i}: needle or plan not found", flush=True)
            continue
        p, plans = at[0], seen[0].plans
        kept_all = sum(bool(pl.keep[0, p:p + len(value)].all()) for pl in plans)
        kept_any = sum(bool(pl.keep[0, p:p + len(value)].any()) for pl in plans)
        whole += kept_all == len(plans)
        doc = next(d for d, (s, e) in enumerate(zip(sample.segments.starts, sample.segments.ends,
                                                    strict=True)) if s <= p < e)
        start = sample.segments.starts[doc]
        print(f"prompt {i}: needle at {p} (document {doc + 1}, offset {p - start} of "
              f"{sample.segments.ends[doc] - start}), kept whole at {kept_all}/{len(plans)} layers, "
              f"partly at {kept_any}; kept share at layer 0 {float(plans[0].keep[0].float().mean()):.2f}; "
              f"answer {answer_text(tok, tokens)!r}, gold {sample.answers[0]}", flush=True)
    print(f"needle kept at every layer in {whole} of {args.samples} prompts")


if __name__ == "__main__":
    main()

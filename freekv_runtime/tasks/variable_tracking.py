"""RULER variable tracking (multi-hop tracing), on the offline prose.

As NVIDIA/RULER's `scripts/data/synthetic/variable_tracking.py` builds it: `num_chains` chains of
`num_hops` hops, "VAR ABCDE = 12345" then "VAR FGHIJ = VAR ABCDE" ..., variable names of 5 random
capitals; the chains' lines are interleaved (each chain in order) and inserted into the haystack at
sorted random depths; the prompt
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n
    Question: Find all variables that are assigned the value {value} in the text above." + answer prefix
    " Answer: According to the chain(s) of variable assignment in the text above, {hops+1} variables are
    assigned the value {value}, they are: "
The answer: the first chain's variables. Score: string_match_all. Params: num_chains (1), num_hops (4),
haystack (prose | noise; RULER's default is noise). Metric: `vt_score`.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.ruler_common import (
    HAYSTACKS,
    RULER_TOKENS_TO_GENERATE,
    chat_wrap,
    check_params,
    haystack_prompt,
    int_param,
    score_samples,
    template_param,
)

__all__ = ["VariableTrackingTask"]

VT_HAYSTACKS = tuple(h for h in HAYSTACKS if h != "needles")  # distractor needles are niah's

HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
TAIL = "\nQuestion: Find all variables that are assigned the value {value} in the text above."
ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {n} variables are "
    "assigned the value {value}, they are: "
)


def _chains(
    num_chains: int, num_hops: int, rng: np.random.Generator
) -> tuple[list[list[str]], list[list[str]]]:
    """(variables per chain, lines per chain); names unique."""
    names: list[str] = []
    while len(names) < num_chains * (num_hops + 1):
        name = "".join(rng.choice(list(string.ascii_uppercase), size=5))
        if name not in names:
            names.append(name)
    variables, lines = [], []
    for c in range(num_chains):
        vs = names[c * (num_hops + 1) : (c + 1) * (num_hops + 1)]
        chain = [f"VAR {vs[0]} = {int(rng.integers(10000, 99999))}"]
        chain += [f"VAR {vs[j + 1]} = VAR {vs[j]}" for j in range(num_hops)]
        variables.append(vs)
        lines.append(chain)
    return variables, lines


def _interleave(lines: list[list[str]], rng: np.random.Generator) -> list[str]:
    """The chains' lines merged in random order, each chain keeping its own order (RULER's heap shuffle)."""
    pos = [0] * len(lines)
    out = []
    while any(p < len(chain) for p, chain in zip(pos, lines, strict=True)):
        live = [i for i, chain in enumerate(lines) if pos[i] < len(chain)]
        i = live[int(rng.integers(len(live)))]
        out.append(lines[i][pos[i]])
        pos[i] += 1
    return out


class VariableTrackingTask:
    name = "vt"
    metrics = ("vt_score",)
    default_decode_tokens = RULER_TOKENS_TO_GENERATE["variable_tracking"]  # 30
    needs_attention_mass = False

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"num_chains", "num_hops", "haystack", "template"})
        haystack = spec.params.get("haystack", "prose")
        if haystack not in VT_HAYSTACKS:
            raise RuntimeInputError(f"vt haystack must be one of {VT_HAYSTACKS}, got {haystack!r}")
        return {
            "num_chains": int_param(self.name, spec.params, "num_chains", 1, 1, 16),
            "num_hops": int_param(self.name, spec.params, "num_hops", 4, 1, 32),
            "haystack": haystack,
            "template": template_param(self.name, spec.params),
        }

    def check(self, spec: TaskSpec) -> None:
        self._params(spec)
        if spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens) < 128:
            raise RuntimeInputError(
                f"vt context_tokens ({spec.context_tokens}) must exceed decode_tokens by 128"
            )

    def samples(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[tuple[list[int], list[str]]]:
        """(prompt ids, the first chain's variables) per sample, deterministic in seed."""
        p = self._params(spec)
        rng = np.random.default_rng(seed)
        prompt_tokens = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens)
        before, after = chat_wrap(tokenizer, p["template"])
        out = []
        for _ in range(spec.n_samples):
            variables, lines = _chains(p["num_chains"], p["num_hops"], rng)
            flat = _interleave(lines, rng)
            depths = np.sort(rng.uniform(0.0, 1.0, size=len(flat)))
            value = lines[0][0].split("=")[-1].strip()
            tail = TAIL.format(value=value) + after + ANSWER_PREFIX.format(n=p["num_hops"] + 1, value=value)
            inserts = [(float(d), line + ".") for d, line in zip(depths, flat, strict=True)]
            ids = haystack_prompt(tokenizer, prompt_tokens, before + HEAD, inserts, tail, p["haystack"], rng)
            out.append((ids, variables[0]))
        return out

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        samples = self.samples(spec, runner.tokenizer, seed)
        outputs = runner.generate_batch(
            [ids for ids, _ in samples], spec.decode_tokens or self.default_decode_tokens
        )
        preds = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        ids = [sample_id(spec, seed, i) for i in range(len(samples))]
        return {"vt_score": score_samples(preds, [answer for _, answer in samples], "all", seed, ids)}

"""How much of each query head's own Quest selection a pooled (per-KV-head) selection keeps.

Usage: `.venv/bin/python benchmarks/quest_selection_overlap.py [--samples 2] [--context 2048] [--budget 256]
[--sink 32] [--window 64] [--task niah_single] [--out runs/quest-overlap]`.

Runs Quest with `selection: per-query-head` on the real default model and, at every sparse selection,
also takes the max-pooled per-KV-head top-k under the same query (`kernels.page_scores`, "max"), then
prints: the share of a query head's own pages that the pooled set of its KV head holds (mean, median)
and the size of the group's union per KV head in units of k. Read-only on the selection (the run
itself is per query head).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from freekv_runtime.api import TraceRequest, run_trace
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies.quest import QuestState
from freekv_runtime.tasks import TaskSpec
from kernels import page_scores, topk_pages


class _Measured(QuestState):
    """Quest per query head that also records the pooled selection under the same query."""

    overlaps: list[float] = []
    unions: list[float] = []

    def _select(self, store: PagedKVStore, q):  # noqa: ANN001, ANN202
        top, resident = super()._select(store, q)
        if store.query_pages is not None:
            _, hi = store.candidate_range()
            page_lo, page_hi = store.candidate_bounds()
            pooled = page_scores(q, store.kmin[:, :, :hi], store.kmax[:, :, :hi], page_lo, page_hi, "max")
            k = store.query_pages.shape[2]
            shared = topk_pages(pooled, k).cpu().numpy()  # (b, Hkv, k)
            group = store.query_pages.shape[1] // shared.shape[1]
            for i, seq in enumerate(store.query_pages):
                _Measured.overlaps.extend(len(np.intersect1d(own, shared[i, j // group])) / k
                                          for j, own in enumerate(seq))
                _Measured.unions.extend(float((row >= 0).sum()) / k for row in top[i])
        return top, resident


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--sink", type=int, default=32)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--task", default="niah_single")
    parser.add_argument("--out", type=Path, default=Path("runs/quest-overlap"))
    args = parser.parse_args()
    from freekv_runtime.policies import quest

    quest.QuestPolicy.state_class = _Measured
    runtime = RuntimeConfig(method="quest", budget_tokens=args.budget, sink_tokens=args.sink,
                            window_tokens=args.window, knobs={"selection": "per-query-head"})
    run_trace(TraceRequest(model="smollm2-135m", task=TaskSpec(args.task, context_tokens=args.context,
                                                               n_samples=args.samples),
                           runtime=runtime, out_dir=args.out, device="cpu", overwrite=True))
    o, u = np.asarray(_Measured.overlaps), np.asarray(_Measured.unions)
    print("| query-head selections | own pages in the pooled set (mean / median) | union per KV head / k |")
    print("|---|---|---|")
    print(f"| {len(o)} | {o.mean():.3f} / {np.median(o):.3f} | {u.mean():.2f} |")


if __name__ == "__main__":
    main()

"""Backend choice: Triton when forced (or on CUDA); on CPU tensors the references and the compiled loops."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from kernel_inputs import ragged_page_table, randn, summaries

import kernels
from kernels._common import FORCE_TRITON_ENV, use_triton


@pytest.fixture
def launches(triton_interpreter) -> Iterator[list[str]]:
    """Names of the Triton kernels launched during the test (via the interpreter's pre-run hooks)."""
    from triton_mode import jit_objects

    log: list[str] = []
    hooked = []
    for module in triton_interpreter:
        for fn in jit_objects(module):
            if fn.__name__.endswith("_kernel"):
                hook = (lambda name: lambda *a, **k: log.append(name))(fn.__name__)
                fn.add_pre_run_hook(hook)
                hooked.append((fn, hook))
    yield log
    for fn, hook in hooked:
        fn.pre_run_hooks.remove(hook)


def test_use_triton_rule(monkeypatch):
    cpu = torch.zeros(2)
    monkeypatch.delenv(FORCE_TRITON_ENV, raising=False)
    assert not use_triton(cpu)
    monkeypatch.setenv(FORCE_TRITON_ENV, "1")
    assert use_triton(cpu)


def _all_ops(gen: torch.Generator) -> None:
    q = randn(gen, 2, 4, 16)
    kmin, kmax = summaries(gen, 2, 2, 6, 16, torch.float32)
    lo = torch.tensor([1, 0], dtype=torch.int32)
    hi = torch.tensor([5, 6], dtype=torch.int32)
    scores = kernels.page_scores(q, kmin, kmax, lo, hi)
    kernels.topk_pages(scores, 3)
    k_cache, v_cache = randn(gen, 5, 8, 2, 16), randn(gen, 5, 8, 2, 16)
    table, n_pages, last = ragged_page_table(gen, 2, 2, 3, 5, 8)
    kernels.sparse_decode_attention(q, k_cache, v_cache, table, n_pages, last)
    kernels.query_similarity(q, q, 2)
    kernels.summarize_pages(k_cache)
    staging = randn(gen, 2, 2, 8, 16)
    kernels.recall_hnd_to_nhd(staging, torch.tensor([0, 1], dtype=torch.int32),
                              torch.tensor([3, 3], dtype=torch.int32), k_cache, v_cache)


EXPECTED = {"_page_scores_kernel", "_topk_pages_kernel", "_sparse_decode_kernel", "_query_similarity_kernel",
            "_summarize_pages_kernel", "_recall_hnd_to_nhd_kernel"}


def test_forced_dispatch_launches_every_triton_kernel(gen, launches, monkeypatch):
    monkeypatch.setenv(FORCE_TRITON_ENV, "1")
    _all_ops(gen)
    assert set(launches) == EXPECTED


def test_cpu_dispatch_runs_no_triton_kernel_and_the_compiled_loops(gen, launches, monkeypatch):
    """On CPU float32 tensors: no Triton launch; top-k and the query similarity run their compiled loops
    (the other ops the references)."""
    import importlib

    monkeypatch.delenv(FORCE_TRITON_ENV, raising=False)
    ran: list[str] = []
    for module, loop in (("kernels.topk_pages", "topk_pages_loop"),
                         ("kernels.query_similarity", "query_similarity_loop")):
        mod = importlib.import_module(module)
        real = getattr(mod, loop)
        monkeypatch.setattr(mod, loop, lambda *a, real=real, loop=loop: (ran.append(loop), real(*a))[1])
    _all_ops(gen)
    assert launches == []
    assert sorted(ran) == ["query_similarity_loop", "topk_pages_loop"]

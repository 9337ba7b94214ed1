"""The paged KV store and the recall engine on the CPU: layouts, page life cycle, recall bytes.

The truth is kept beside the store (all keys and values, (b, Hkv, n, d)); every check reads the store's
own buffers (host pool HND, device slots NHD, summaries) and compares them with the truth.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.recall import DeviceStreams, RecallEngine

CPU = torch.device("cpu")
B, HKV, D = 2, 3, 16


def make_store(p: int, sink: int, window: int, selected: int, chunk: int = 64) -> PagedKVStore:
    return PagedKVStore(B, HKV, D, p, sink, window, selected, CPU, torch.float32, DeviceStreams(CPU),
                        pool_chunk_pages=chunk)


def random_kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, HKV, n, D, generator=g), torch.randn(B, HKV, n, D, generator=g)


def check_host_pool(store: PagedKVStore, k: torch.Tensor, v: torch.Tensor) -> None:
    """Every full page is in the pool as HND runs and has its min/max summary."""
    p = store.p
    for page in range(store.n_full_pages):
        tok = slice(page * p, (page + 1) * p)
        assert torch.equal(store.pool[:, page, :, 0], k[:, :, tok])  # (b, Hkv, p, d)
        assert torch.equal(store.pool[:, page, :, 1], v[:, :, tok])
        assert torch.equal(store.kmin[:, :, page], k[:, :, tok].amin(dim=2))
        assert torch.equal(store.kmax[:, :, page], k[:, :, tok].amax(dim=2))


def check_page_table(store: PagedKVStore, k: torch.Tensor, v: torch.Tensor) -> None:
    """The slots listed for each (sequence, head) hold exactly the tokens of the pages it claims."""
    table = store.page_table()
    p, n = store.p, store.n_tokens
    for i in range(B):
        for h in range(HKV):
            count = int(table.n_pages[i, h])
            slots = table.table[i, h, :count].long()
            pages = table.pages[i][h]
            assert len(pages) == count and len(set(pages.tolist())) == count
            assert pages[-1] == store.cur_page  # the newest page is listed last
            tok = torch.as_tensor(np.concatenate([np.arange(pg * p, min(n, (pg + 1) * p)) for pg in pages]))
            got_k = store.k_slots[slots, :, h].reshape(count * p, D)[: len(tok)]
            got_v = store.v_slots[slots, :, h].reshape(count * p, D)[: len(tok)]
            assert torch.equal(got_k, k[i, h, tok]) and torch.equal(got_v, v[i, h, tok])
            assert table.attended_tokens[i, h] == len(tok)


@pytest.mark.parametrize("p", [8, 16, 64])
@pytest.mark.parametrize("extra_tokens", [0, 1, 5])
def test_prefill_layout(p: int, extra_tokens: int) -> None:
    sink, window, selected = 1, 2, 2
    n = 6 * p + extra_tokens
    k, v = random_kv(n, seed=p + extra_tokens)
    store = make_store(p, sink, window, selected)
    store.prefill(k, v)
    assert store.n_full_pages == 6 and store.cur_page == (n - 1) // p
    assert store.candidate_range() == (1, store.cur_page - 1)
    check_host_pool(store, k, v)
    assert (store.resident == -1).all()
    pages = np.array([[[2, 3], [3, 1], [1, 2]]] * B)  # heads hold different pages in the same slot index
    store.place_from_prompt(k, v, pages)
    np.testing.assert_array_equal(store.resident, pages)
    check_page_table(store, k, v)


def test_short_prompt_lives_in_sink_and_window() -> None:
    """A prompt shorter than sink + window: no candidates; the partial page is the last one listed."""
    p = 8
    k, v = random_kv(13, seed=0)
    store = make_store(p, sink=1, window=2, selected=2)
    store.prefill(k, v)
    lo, hi = store.candidate_range()
    assert hi == lo
    assert list(store.sink_page_ids()) == [0] and list(store.window_page_ids()) == [1]
    check_page_table(store, k, v)


@pytest.mark.parametrize("sink", [0, 1])
@pytest.mark.parametrize("selected", [2, 5])
def test_window_life_cycle(selected: int, sink: int) -> None:
    """Pages fill, are offloaded, join the window and leave it as candidates, one token at a time.

    selected=2: the cache is full after prefill, the leaving page leaves the device. selected=5: a free
    slot per head keeps the leaving page (fewer candidates than slots: all are selected).
    """
    p, window = 8, 2
    k, v = random_kv(5 * p + 3, seed=1)
    store = make_store(p, sink, window, selected)
    store.prefill(k, v)
    assert store.candidate_range() == (sink, 4)
    initial = np.full((B, HKV, selected), -1)
    initial[:, :, :2] = [1, 2]
    store.place_from_prompt(k, v, initial)
    g = torch.Generator().manual_seed(2)
    offloaded = []
    for _ in range(2 * p + 1):
        k1, v1 = torch.randn(B, HKV, 1, D, generator=g), torch.randn(B, HKV, 1, D, generator=g)
        before_hi = store.candidate_range()[1]
        opens_page = store.n_tokens % p == 0
        page = store.append(k1, v1)
        k, v = torch.cat([k, k1], dim=2), torch.cat([v, v1], dim=2)
        if page is not None:
            offloaded.append(page)
            assert store.n_tokens == (page + 1) * p
        lo, hi = store.candidate_range()
        if opens_page:
            left = before_hi  # the oldest window page left and is now the newest candidate
            assert hi == before_hi + 1 and left not in store.window_page_ids()
            kept = (store.resident == left).any(axis=2)
            assert kept.all() if selected == 5 else not kept.any()
        else:
            assert hi == before_hi
        check_host_pool(store, k, v)
        check_page_table(store, k, v)
    assert offloaded == [5, 6]


def test_pool_grows_with_headroom_in_chunks_and_keeps_pages() -> None:
    """Capacity = n + n // 4 pages rounded up to whole chunks (2 here): 3 -> 4, 5 -> 6, 7 -> 8, 9 -> 12."""
    p = 8
    k, v = random_kv(3 * p + 2, seed=3)
    store = make_store(p, sink=1, window=1, selected=1, chunk=2)
    store.prefill(k, v)
    assert store.pool.shape[1] == 4
    g = torch.Generator().manual_seed(4)
    caps = set()
    for _ in range(6 * p):
        k1, v1 = torch.randn(B, HKV, 1, D, generator=g), torch.randn(B, HKV, 1, D, generator=g)
        store.append(k1, v1)
        caps.add(store.pool.shape[1])
        k, v = torch.cat([k, k1], dim=2), torch.cat([v, v1], dim=2)
    assert store.n_full_pages == 9 and caps == {4, 6, 8, 12}
    assert store.kmin.shape[2] == store.kmax.shape[2] == 12
    check_host_pool(store, k, v)


@pytest.mark.parametrize(("staging_pages", "staged"),
                         [(1, True), (2, True), (3, True), (64, True), (64, None)])
def test_recall_moves_exactly_the_requested_runs(staging_pages: int, staged: bool | None) -> None:
    """Runs land in the right (slot, head); nothing else changes; bytes = runs x 2 x p x d x 4. Through the
    staging double buffer (the GPU path, run synchronously) and the CPU's direct copy (staged=None)."""
    p, n_slots = 16, 6
    g = torch.Generator().manual_seed(5)
    pool = torch.randn(B, 5, HKV, 2, p, D, generator=g)
    k_slots = torch.randn(n_slots, p, HKV, D, generator=g)
    v_slots = torch.randn(n_slots, p, HKV, D, generator=g)
    k_before, v_before = k_slots.clone(), v_slots.clone()
    seq = np.array([0, 1, 1, 0, 1, 0, 1])
    head = np.array([0, 2, 1, 1, 0, 2, 2])
    page = np.array([4, 0, 3, 2, 1, 0, 2])
    slot = np.array([5, 0, 0, 3, 1, 2, 4])
    engine = RecallEngine(DeviceStreams(CPU), HKV, p, D, torch.float32, staging_pages=staging_pages,
                          staged=staged)
    assert engine.recall(pool, k_slots, v_slots, seq, head, page, slot) is None  # CPU: synchronous
    touched = torch.zeros(n_slots, HKV, dtype=torch.bool)
    for s, h, pg, sl in zip(seq, head, page, slot, strict=True):
        assert torch.equal(k_slots[sl, :, h], pool[s, pg, h, 0])
        assert torch.equal(v_slots[sl, :, h], pool[s, pg, h, 1])
        touched[sl, h] = True
    untouched = ~touched[:, None, :].expand(n_slots, p, HKV)
    assert torch.equal(k_slots[untouched], k_before[untouched])
    assert torch.equal(v_slots[untouched], v_before[untouched])
    assert engine.stats.head_pages == 7 and engine.stats.recalled_bytes == 7 * 2 * p * D * 4
    empty = np.zeros(0, dtype=np.int64)
    assert engine.recall(pool, k_slots, v_slots, empty, empty, empty, empty) is None
    assert engine.stats.recalls == 1

"""Paged KV store of one layer for a batch: host pool in HND, GPU pages in NHD, page summaries.

Pages and their homes (p = page size, S/W/K = sink/window/selected pages, all sequences of a batch have
the same length n_tokens, so every page id below is the same for all of them):

- cur = (n_tokens - 1) // p is the newest page (partial, or just filled). Page `cur` is the newest
  window page: the window is the W newest pages [max(S, cur - W + 1), cur], so attended tokens never
  exceed the budget (`budget_tokens` counts sink and window, see RuntimeConfig).
- sink pages [0, min(S, cur + 1)) stay on the device for good.
- candidates [S, cur - W + 1): full pages that left the window; only these can be selected.

A page that fills is offloaded at once: transposed NHD->HND (`kernels.offload_nhd_to_hnd`), copied to
the host pool, its min/max key summary computed (`kernels.summarize_pages`). It stays in the window until
W newer pages exist, then leaves the device (its ring slot takes the newest page) and becomes a candidate.
Exception: a KV head whose selected-page cache still has an empty slot keeps the leaving page there
(device copy). That only happens while there are fewer candidates than slots, when every candidate is
selected anyway ("contexts shorter than the budget: all candidate pages are selected").

Device memory (NHD, what projections produce): k_slots, v_slots (b * (S + W + K), p, Hkv, d). Slots of
sequence i start at i * (S + W + K): [0, S) sink pages, [S, S + W) the window ring (page n at
S + n % W), [S + W, S + W + K) the cache of selected pages. A selected slot holds a different page for
each KV head: `resident` (b, Hkv, K) int64 (host) maps slot -> page id, -1 = empty.
Host memory (HND, one contiguous (2, p, d) run per KV head and page): pool (b, cap, Hkv, 2, p, d),
pinned on CUDA, grown to a quarter more than it must hold, in whole `pool_chunk_pages` (amortised O(1)
copies per page). Summaries (device): key_bounds (b, Hkv, cap, 2, d), [..., 0, :] the max and [..., 1, :] the
min of each key dimension over the page (`page_summary="box"`: centre +- mean radius, ArkVale style, see
`kernels.summarize_pages`); `kmax`, `kmin` are (b, Hkv, cap, d) views of the two halves.
Keeping a page's two bounds side by side lets page scoring read both in one pass (one GEMM).
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.recall import DeviceStreams, host_empty
from kernels import offload_nhd_to_hnd, summarize_pages

__all__ = ["DenseKVStore", "PagedKVStore", "PageTable"]


class PageTable:
    """What one sparse attention call reads, per (sequence, KV head).

    table (b, Hkv, M) int32 slot ids (device), n_pages (b, Hkv) int32 (device), last_page_tokens (b,) int32
    (device); attended_tokens (b, Hkv) int32 (host); pages[i][h]: int64 page ids attended (host), in table
    order, built on first access from a snapshot of the residency (the hot path never reads them).
    """

    def __init__(self, table: torch.Tensor, n_pages: torch.Tensor, n_pages_host: np.ndarray,
                 last_page_tokens: torch.Tensor, last_page_tokens_host: int, page_size: int, sink: np.ndarray,
                 resident: np.ndarray, window: np.ndarray) -> None:
        self.table, self.n_pages, self.last_page_tokens = table, n_pages, last_page_tokens
        self.attended_tokens = ((n_pages_host - 1) * page_size + last_page_tokens_host).astype(np.int32)
        self._parts = (sink, resident, window)
        self._pages: list[list[np.ndarray]] | None = None

    @property
    def pages(self) -> list[list[np.ndarray]]:
        if self._pages is None:
            sink, resident, window = self._parts
            self._pages = [[np.concatenate((sink, row[row >= 0], window)) for row in seq] for seq in resident]
        return self._pages


class PagedKVStore:
    """One sparse layer's KV for a batch; see the module docstring for the layout."""

    def __init__(
        self, batch_size: int, n_kv_heads: int, head_dim: int, page_size: int, sink_pages: int,
        window_pages: int, selected_pages: int, device: torch.device, dtype: torch.dtype,
        streams: DeviceStreams, pool_chunk_pages: int = 64, keep_full_keys: bool = False,
        page_summary: str = "minmax",
    ) -> None:
        if window_pages < 1:
            raise ValueError(f"window_pages must be >= 1, got {window_pages}")
        self.b, self.n_kv, self.d, self.p = batch_size, n_kv_heads, head_dim, page_size
        self.sink, self.window, self.k_sel = sink_pages, window_pages, selected_pages
        self.device, self.dtype, self.streams = device, dtype, streams
        self.pool_chunk_pages = pool_chunk_pages
        self.page_summary = page_summary  # "minmax" or "box": see kernels.summarize_pages
        self.slots_per_seq = sink_pages + window_pages + selected_pages
        n_slots = batch_size * self.slots_per_seq
        self.k_slots = torch.zeros((n_slots, page_size, n_kv_heads, head_dim), dtype=dtype, device=device)
        self.v_slots = torch.zeros_like(self.k_slots)
        self.resident = np.full((batch_size, n_kv_heads, selected_pages), -1, dtype=np.int64)
        self._seq_base = torch.arange(batch_size, device=device) * self.slots_per_seq
        self.pool = host_empty((batch_size, 0, n_kv_heads, 2, page_size, head_dim), dtype, device)
        self.key_bounds = torch.empty((batch_size, n_kv_heads, 0, 2, head_dim), dtype=dtype, device=device)
        self.offload_event: torch.cuda.Event | None = None
        # (b, Hq, k) int64 pages of each query head's own selection, when the method selects per query head
        # (freekv_runtime.policies._query_head_selection); None: attention reads every resident slot.
        self.query_pages: np.ndarray | None = None
        self.n_tokens = 0
        self._bounds: tuple[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] | None = None
        self._steady_table: tuple | None = None  # (cur_page, table, n_pages, n_pages host, sink, window)
        self._last_page_tokens: dict[int, torch.Tensor] = {}
        # (b, Hkv, n_tokens, d) copy of every key, only to measure the dense attention mass.
        self.full_keys = torch.empty((batch_size, n_kv_heads, 0, head_dim), dtype=dtype, device=device) \
            if keep_full_keys else None

    @property
    def kmax(self) -> torch.Tensor:
        """(b, Hkv, cap, d) view: per page, the largest value of each key dimension."""
        return self.key_bounds[:, :, :, 0]

    @property
    def kmin(self) -> torch.Tensor:
        """(b, Hkv, cap, d) view: per page, the smallest value of each key dimension."""
        return self.key_bounds[:, :, :, 1]

    # ---- page bookkeeping (host ints, identical for every sequence of the batch) ----
    @property
    def cur_page(self) -> int:
        return (self.n_tokens - 1) // self.p

    @property
    def n_full_pages(self) -> int:
        return self.n_tokens // self.p

    @property
    def last_page_tokens(self) -> int:
        return self.n_tokens - self.cur_page * self.p

    def sink_page_ids(self) -> range:
        return range(min(self.sink, self.cur_page + 1))

    def window_page_ids(self) -> range:
        return range(max(self.sink, self.cur_page - self.window + 1), self.cur_page + 1)

    def candidate_range(self) -> tuple[int, int]:
        """[lo, hi): pages that may be selected (full, offloaded, outside sink and window)."""
        lo = self.sink
        return lo, max(lo, self.cur_page - self.window + 1)

    def candidate_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """page_lo, page_hi (b,) int32 on the device, as `kernels.page_scores` takes them (made once per
        candidate range: they change once per p tokens)."""
        key = self.candidate_range()
        if self._bounds is None or self._bounds[0] != key:
            bounds = torch.tensor([[key[0]] * self.b, [key[1]] * self.b], dtype=torch.int32,
                                  device=self.device)
            self._bounds = (key, (bounds[0], bounds[1]))
        return self._bounds[1]

    def local_slot(self, page: int) -> int:
        """Slot (within a sequence) of a sink or window page."""
        return page if page < self.sink else self.sink + page % self.window

    def selected_slot(self, j: np.ndarray | int) -> np.ndarray | int:
        return self.sink + self.window + j

    def global_slots(self, seq: np.ndarray, local: np.ndarray) -> np.ndarray:
        return seq * self.slots_per_seq + local

    # ---- writes ----
    def prefill(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store a prompt. k, v (b, Hkv, T, d): full pages offloaded with summaries, sink/window kept."""
        b, h, t, d = k.shape
        p = self.p
        self.n_tokens = t
        n_full = t // p
        self._ensure_capacity(n_full)
        if n_full:
            k_pages = k[:, :, : n_full * p].reshape(b, h, n_full, p, d)
            v_pages = v[:, :, : n_full * p].reshape(b, h, n_full, p, d)
            k_nhd = k_pages.permute(0, 2, 3, 1, 4).reshape(b * n_full, p, h, d)  # (b * F, p, Hkv, d)
            v_nhd = v_pages.permute(0, 2, 3, 1, 4).reshape(b * n_full, p, h, d)
            kmin, kmax = summarize_pages(k_nhd, summary=self.page_summary)
            self.kmin[:, :, :n_full] = kmin.view(b, n_full, h, d).transpose(1, 2)
            self.kmax[:, :, :n_full] = kmax.view(b, n_full, h, d).transpose(1, 2)
            hnd = offload_nhd_to_hnd(k_nhd, v_nhd)  # (b * F, Hkv, 2, p, d)
            self._to_host(hnd.view(b, n_full, h, 2, p, d), 0)
        k_tok, v_tok = k.transpose(1, 2), v.transpose(1, 2)  # (b, T, Hkv, d)
        for page in [*self.sink_page_ids(), *self.window_page_ids()]:
            lo, hi = page * p, min(t, (page + 1) * p)
            idx = self._seq_base + self.local_slot(page)
            self.k_slots[idx, : hi - lo] = k_tok[:, lo:hi]
            self.v_slots[idx, : hi - lo] = v_tok[:, lo:hi]
        if self.full_keys is not None:
            self.full_keys = k.clone()

    def place_from_prompt(self, k: torch.Tensor, v: torch.Tensor, pages: np.ndarray) -> None:
        """Fill the selected-page cache from the prompt still on the device (no host link).

        k, v (b, Hkv, T, d) the prompt; pages (b, Hkv, K) int64 page ids, -1 = leave empty.
        """
        seq, head, j = np.nonzero(pages >= 0)
        self.resident[:] = -1
        if len(seq) == 0:
            return
        page = pages[seq, head, j]
        self.resident[seq, head, j] = page
        p = self.p
        tok = torch.as_tensor(page[:, None] * p + np.arange(p)[None, :]).to(self.device)  # (n, p)
        seq_t, head_t = torch.as_tensor(seq).to(self.device), torch.as_tensor(head).to(self.device)
        slots = torch.as_tensor(self.global_slots(seq, self.selected_slot(j))).to(self.device)
        self.k_slots[slots, :, head_t] = k[seq_t[:, None], head_t[:, None], tok]  # (n, p, d)
        self.v_slots[slots, :, head_t] = v[seq_t[:, None], head_t[:, None], tok]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> int | None:
        """Append one token. k, v (b, Hkv, 1, d). Returns the page id offloaded (it filled) or None.

        When the token opens a new page, the oldest window page leaves the window; a KV head whose
        selected-page cache still has an empty slot (fewer candidates than slots: the context is shorter
        than the budget, so every candidate is selected) keeps it there, copied on the device.
        """
        pos = self.n_tokens
        page, offset = divmod(pos, self.p)
        if offset == 0 and page - self.window >= self.sink:
            self._keep_leaving_page(page - self.window)
        local = self.local_slot(page)
        shape = (self.b, self.slots_per_seq, *self.k_slots.shape[1:])
        self.k_slots.view(shape)[:, local, offset] = k[:, :, 0]  # basic indexing: no index tensors
        self.v_slots.view(shape)[:, local, offset] = v[:, :, 0]
        self.n_tokens += 1
        if self.full_keys is not None:
            self.full_keys = torch.cat([self.full_keys, k], dim=2)
        if offset + 1 < self.p:
            return None
        self._ensure_capacity(page + 1)
        idx = self._seq_base + local
        k_pages, v_pages = self.k_slots[idx], self.v_slots[idx]  # (b, p, Hkv, d)
        kmin, kmax = summarize_pages(k_pages, summary=self.page_summary)
        self.kmin[:, :, page], self.kmax[:, :, page] = kmin, kmax
        self._to_host(offload_nhd_to_hnd(k_pages, v_pages)[:, None], page)  # (b, 1, Hkv, 2, p, d)
        return page

    def _keep_leaving_page(self, page: int) -> None:
        """Move `page` (leaving the window ring) to the first empty selected slot of heads that have one."""
        empty = self.resident < 0  # (b, Hkv, K)
        seq, head = np.nonzero(empty.any(axis=2))
        if len(seq) == 0:
            return
        j = empty[seq, head].argmax(axis=1)
        self.resident[seq, head, j] = page
        src = torch.as_tensor(self.global_slots(seq, self.local_slot(page))).to(self.device)
        dst = torch.as_tensor(self.global_slots(seq, self.selected_slot(j))).to(self.device)
        head_t = torch.as_tensor(head).to(self.device)
        self.k_slots[dst, :, head_t] = self.k_slots[src, :, head_t]
        self.v_slots[dst, :, head_t] = self.v_slots[src, :, head_t]

    def _to_host(self, hnd: torch.Tensor, first_page: int) -> None:
        """Copy hnd (b, n, Hkv, 2, p, d) into pool pages [first_page, first_page + n) (offload stream)."""
        st = self.streams
        n = hnd.shape[1]
        if not st.is_cuda:
            self.pool[:, first_page : first_page + n].copy_(hnd)
            return
        ready = st.record()
        with torch.cuda.stream(st.offload):
            st.wait(ready, st.offload)
            for i in range(self.b):  # per sequence: one contiguous pinned destination each
                self.pool[i, first_page : first_page + n].copy_(hnd[i], non_blocking=True)
            hnd.record_stream(st.offload)
            self.offload_event = st.record(st.offload)

    def _ensure_capacity(self, n_pages: int) -> None:
        """Grow the host pool and the summaries to hold n_pages pages plus a quarter (in whole chunks)."""
        cap = self.pool.shape[1]
        if n_pages <= cap:
            return
        chunk = self.pool_chunk_pages
        new_cap = -(-(n_pages + n_pages // 4) // chunk) * chunk  # 25% headroom: amortised O(1) per page
        if self.streams.is_cuda:  # in-flight offloads/recalls use the old pool: let them finish (rare)
            torch.cuda.synchronize(self.device)
        pool = host_empty((self.b, new_cap, *self.pool.shape[2:]), self.dtype, self.device)
        pool[:, :cap] = self.pool
        self.pool = pool
        shape = (self.b, self.n_kv, new_cap, 2, self.d)
        key_bounds = torch.zeros(shape, dtype=self.dtype, device=self.device)
        key_bounds[:, :, :cap] = self.key_bounds
        self.key_bounds = key_bounds

    # ---- reads ----
    def page_table(self) -> PageTable:
        """Sink + resident selected + window pages per (sequence, KV head); the newest page last.

        Built with whole-array numpy ops over (b, Hkv): row [i, h] = sink slots, the selected slots j with
        resident[i, h, j] >= 0 in slot order, window slots; zeros past n_pages[i, h]. When every selected
        slot is held (the steady state once the context exceeds the budget) all rows are the same slots
        whatever pages they hold, so that table is made once per newest page and reused.
        """
        held = self.resident >= 0  # (b, Hkv, K)
        steady = bool(held.all())
        if steady and self._steady_table is not None and self._steady_table[0] == self.cur_page:
            _, table_t, n_pages_t, n_pages, sink, window = self._steady_table
        else:
            sink = np.arange(min(self.sink, self.cur_page + 1), dtype=np.int64)
            window = np.asarray(self.window_page_ids(), dtype=np.int64)
            table, n_pages = self._build_table(held, sink, window)
            table_t = torch.from_numpy(table).to(self.device)
            n_pages_t = torch.from_numpy(n_pages).to(self.device)
            if steady:
                self._steady_table = (self.cur_page, table_t, n_pages_t, n_pages, sink, window)
        last = self.last_page_tokens
        if last not in self._last_page_tokens:
            self._last_page_tokens[last] = torch.full((self.b,), last, dtype=torch.int32, device=self.device)
        return PageTable(table_t, n_pages_t, n_pages, self._last_page_tokens[last], last, self.p, sink,
                         self.resident.copy(), window)

    def query_head_table(self, query_pages: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """Per-query-head tables of a per-query-head selection: row [i, j] = sink slots, the selected slots
        of KV head j // G holding one of query head j's pages query_pages[i, j] (int64 page ids, -1 =
        none; (b, Hq, k)), window slots. Returns table (b, Hq, M) int32 and n_pages (b, Hq) int32 (device)
        and the attended tokens (b, Hq) int32 (host)."""
        group = query_pages.shape[1] // self.n_kv
        resident = np.repeat(self.resident, group, axis=1)  # (b, Hq, K)
        held = (resident[..., :, None] == query_pages[..., None, :]).any(-1) & (resident >= 0)
        sink = np.arange(min(self.sink, self.cur_page + 1), dtype=np.int64)
        table, n_pages = self._build_table(held, sink, np.asarray(self.window_page_ids(), dtype=np.int64))
        attended = ((n_pages - 1) * self.p + self.last_page_tokens).astype(np.int32)
        return torch.from_numpy(table).to(self.device), torch.from_numpy(n_pages).to(self.device), attended

    def _build_table(
        self, held: np.ndarray, sink: np.ndarray, window: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(table (b, H, M) int32 slot ids, n_pages (b, H) int32) for the residency mask held (b, H, K):
        H = Hkv, or Hq for per-query-head tables (row j reads KV head j // G's slots)."""
        rows = held.shape[1]
        n_sink, n_window = len(sink), len(window)
        base = (np.arange(self.b, dtype=np.int64) * self.slots_per_seq)[:, None, None]  # (b, 1, 1)
        window_slots = self.sink + window % self.window
        if held.all():
            row = np.concatenate((sink, self.selected_slot(np.arange(self.k_sel)), window_slots))
            table = np.repeat(base + row, rows, axis=1)  # (b, H, M)
            return table.astype(np.int32), np.full((self.b, rows), len(row), dtype=np.int32)
        n_held = held.sum(axis=2)  # (b, Hkv)
        held_first = np.argsort(~held, axis=2, kind="stable")  # held slot indices first, in slot order
        table = np.zeros((self.b, rows, n_sink + n_window + self.k_sel), dtype=np.int64)
        table[:, :, :n_sink] = base + sink  # sink pages sit in local slots [0, S)
        selected = base + self.selected_slot(held_first)
        table[:, :, n_sink : n_sink + self.k_sel] = np.where(np.arange(self.k_sel) < n_held[..., None],
                                                               selected, 0)
        window_at = n_sink + n_held[..., None] + np.arange(n_window)  # (b, Hkv, W') positions
        np.put_along_axis(table, window_at, np.broadcast_to(base + window_slots, window_at.shape), axis=2)
        return table.astype(np.int32), (n_sink + n_held + n_window).astype(np.int32)


class DenseKVStore:
    """A dense layer's KV kept whole on the device: k, v (b, Hkv, n_tokens, d), grown by doubling."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.n_tokens = 0

    def prefill(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self._k, self._v = k.clone(), v.clone()
        self.n_tokens = k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v (b, Hkv, 1, d)."""
        assert self._k is not None and self._v is not None, "prefill must run before decode"
        if self.n_tokens == self._k.shape[2]:
            b, h, n, d = self._k.shape
            pad = torch.zeros((b, h, max(64, n), d), dtype=self.dtype, device=self.device)
            self._k = torch.cat([self._k, pad], dim=2)
            self._v = torch.cat([self._v, pad], dim=2)
        self._k[:, :, self.n_tokens] = k[:, :, 0]
        self._v[:, :, self.n_tokens] = v[:, :, 0]
        self.n_tokens += 1

    def keys(self) -> torch.Tensor:
        return self._k[:, :, : self.n_tokens]

    def values(self) -> torch.Tensor:
        return self._v[:, :, : self.n_tokens]

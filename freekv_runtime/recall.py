"""Recall of (sequence, KV head, page) runs from the host pool into GPU cache slots, double-buffered.

A host page of one KV head is one contiguous HND run `(2, p, d)` (K then V). A recall of n such runs
goes through two device staging buffers of `staging_pages` runs each: while one buffer is being filled
by host->device copies (one `copy_(non_blocking=True)` per head-page from pinned memory, on the copy
stream) the other is converted HND->NHD into the cache slots by `kernels.recall_hnd_to_nhd` (on the
convert stream). Events order the two streams (a buffer is refilled only after its conversion ran) and
one final event per recall lets exactly the layer that needs the pages wait for them
(`RecallEngine.wait`), so no other work waits on a recall.

On the CPU host and "device" memory are one: a recall copies each run straight from the pool into its
cache slot, HND->NHD, in one compiled pass (`kernels.recall_runs_cpu`) with no staging copy. Every
decision and every count (head-pages, bytes) is the same as on a GPU; only the overlap is absent. The CUDA
stream/event/pinned-memory path is written for a GPU but was NOT run on one during development (no GPU
on the build machine).

Shapes: pool (b, n_page, Hkv, 2, p, d) on the host; k_slots, v_slots (n_slots, p, Hkv, d) on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kernels import recall_hnd_to_nhd, recall_runs_cpu

__all__ = ["DeviceStreams", "RecallEngine", "RecallStats", "host_empty"]


def host_empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised host tensor; page-locked (pinned) when the compute device is CUDA."""
    return torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")


class DeviceStreams:
    """The side streams of one request: offload (device->host), recall copy and recall convert.

    On the CPU every stream is None and every helper is a no-op, so callers need no branches.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.offload = torch.cuda.Stream(device) if self.is_cuda else None
        self.copy = torch.cuda.Stream(device) if self.is_cuda else None
        self.convert = torch.cuda.Stream(device) if self.is_cuda else None

    def record(self, stream: torch.cuda.Stream | None = None) -> torch.cuda.Event | None:
        """An event recorded now on `stream` (default: the current stream); None on the CPU."""
        if not self.is_cuda:
            return None
        event = torch.cuda.Event()
        event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return event

    def wait(self, event: torch.cuda.Event | None, stream: torch.cuda.Stream | None = None) -> None:
        """Make `stream` (default: the current stream) wait for `event`; no-op for None or on the CPU."""
        if event is None or not self.is_cuda:
            return
        (stream if stream is not None else torch.cuda.current_stream(self.device)).wait_event(event)


@dataclass
class RecallStats:
    """What crossed the host->device link for recalls since the state was made."""

    head_pages: int = 0
    recalled_bytes: int = 0
    recalls: int = 0  # recall() calls that moved at least one head-page


class RecallEngine:
    """Double-buffered recall into cache slots; see the module docstring.

    staging: two device buffers (staging_pages, 2, p, d) of the model dtype.
    """

    def __init__(
        self, streams: DeviceStreams, n_kv_heads: int, page_size: int, head_dim: int, dtype: torch.dtype,
        staging_pages: int = 64, staged: bool | None = None,
    ) -> None:
        """staged: recall through the staging double buffer (None: on CUDA only; True on the CPU runs that
        path synchronously, e.g. to test it there)."""
        if staging_pages < 1:
            raise ValueError(f"staging_pages must be >= 1, got {staging_pages}")
        self.staged = streams.is_cuda if staged is None else staged
        if streams.is_cuda and not self.staged:
            raise ValueError("a CUDA recall goes through the staging buffers: staged must not be False")
        self.streams = streams
        self.page_size = page_size
        self.head_dim = head_dim
        self.dtype = dtype
        self.staging_pages = staging_pages
        self.head_page_bytes = 2 * page_size * head_dim * torch.empty((), dtype=dtype).element_size()
        shape = (staging_pages, 2, page_size, head_dim)
        self._staging = [torch.empty(shape, dtype=dtype, device=streams.device)
                         for _ in range(2 if self.staged else 0)]
        self._buffer_free: list[torch.cuda.Event | None] = [None, None]
        self.stats = RecallStats()

    def recall(
        self,
        pool: torch.Tensor,
        k_slots: torch.Tensor,
        v_slots: torch.Tensor,
        seq_ids: np.ndarray,
        head_ids: np.ndarray,
        page_ids: np.ndarray,
        slot_ids: np.ndarray,
        after: list[torch.cuda.Event | None] | None = None,
        convert_after: torch.cuda.Event | None = None,
    ) -> torch.cuda.Event | None:
        """Copy pool[seq, page, head] (HND) into slot `slot` of head `head` of k_slots/v_slots (NHD).

        seq_ids, head_ids, page_ids, slot_ids: (n,) integer arrays (slot ids index k_slots' first dim).
        after: events the copies wait for (e.g. the offload that wrote the pool pages).
        convert_after: event the first write into the cache waits for (e.g. the attention that still
            reads the evicted slots). Returns the event that marks the recall complete (None on the CPU).
        """
        n = len(seq_ids)
        if n == 0:
            return None
        st = self.streams
        self.stats.head_pages += n
        self.stats.recalled_bytes += n * self.head_page_bytes
        self.stats.recalls += 1
        if not self.staged:  # CPU, host to host: one pass
            _, cap, hkv = pool.shape[:3]
            runs = (np.asarray(seq_ids, np.int64) * cap + page_ids) * hkv + head_ids
            # the ids come from the store's own bookkeeping: skip the value checks
            recall_runs_cpu(pool.view(-1, *pool.shape[3:]), runs, head_ids, slot_ids, k_slots, v_slots,
                            validate=False)
            return None
        for event in after or []:
            st.wait(event, st.copy)
        st.wait(convert_after, st.convert)
        with _on(st.convert):  # index tensors live (and are freed) on the convert stream
            head_dev = torch.as_tensor(np.asarray(head_ids, dtype=np.int32)).to(st.device)
            slot_dev = torch.as_tensor(np.asarray(slot_ids, dtype=np.int32)).to(st.device)
        for chunk, start in enumerate(range(0, n, self.staging_pages)):
            stop = min(n, start + self.staging_pages)
            buf = chunk % 2
            staging = self._staging[buf]
            with _on(st.copy):
                st.wait(self._buffer_free[buf], st.copy)  # its previous conversion has read it
                for j in range(start, stop):
                    staging[j - start].copy_(pool[int(seq_ids[j]), int(page_ids[j]), int(head_ids[j])],
                                             non_blocking=True)
                filled = st.record(st.copy)
            with _on(st.convert):
                st.wait(filled, st.convert)
                # the ids come from the store's own bookkeeping: skip the reference's value checks
                recall_hnd_to_nhd(staging[: stop - start], head_dev[start:stop], slot_dev[start:stop],
                                  k_slots, v_slots, validate=False)
                self._buffer_free[buf] = st.record(st.convert)
        return st.record(st.convert)

    def wait(self, event: torch.cuda.Event | None) -> None:
        """Make the current (compute) stream wait for one recall; no-op on the CPU or for None."""
        self.streams.wait(event)


class _on:
    """`torch.cuda.stream(s)` when s is a stream, nothing otherwise (CPU)."""

    def __init__(self, stream: torch.cuda.Stream | None) -> None:
        self._ctx = torch.cuda.stream(stream) if stream is not None else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)

"""Host-side (software) costs of the as-published method models, from counts of what their code does.

Every as-published model (FreeKV, its baselines, Quest, ArkVale, ShadowKV, InfiniGen) counts, per layer
or per step, what its public implementation does on the host thread: eager PyTorch ops (each dispatches
one kernel), Python-level calls, calls into C++ extensions and the kernels they launch, copy calls by
API path, syncs, read-backs of GPU values to Python (`.item()`, `.tolist()`, indexing with a CUDA
scalar), thread hand-offs. `HostOps` holds such counts and `HostOps.seconds(software)` prices them with
a software profile (sim/software.py; docs/hardware.md, "Software profiles and implementation modes");
`host_s(ctx, ops)` does the same and is 0 in the "ideal" implementation mode. The counts and the
file:line they come from are in each method's module docstring and docs/methods.md; shared decoder
recipes are in sim/methods/eager.py.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.methods.base import CostContext
    from sim.software import SoftwareProfile

__all__ = ["HostOps", "host_s"]


@dataclass(frozen=True)
class HostOps:
    """Counts of host-thread operations; `seconds(sw)` prices them with a software profile."""

    torch_ops: float = 0.0  # eager torch ops that launch one kernel (torch_op_dispatch_s)
    python_ops: float = 0.0  # Python-level calls launching nothing: views, slices, nvtx, loop iterations
    ext_calls: float = 0.0  # Python calls into a C++ extension (python_op_s; launches counted apart)
    cpp_launches: float = 0.0  # kernel launches (or cudaMemsetAsync) issued from C++
    memcpy_calls: float = 0.0  # cudaMemcpyAsync calls
    memcpy2d_calls: float = 0.0  # cudaMemcpy2DAsync calls
    torch_copies: float = 0.0  # torch dst.copy_(src, non_blocking=True)
    stream_syncs: float = 0.0  # cudaStreamSynchronize (host cost beyond the wait)
    event_records: float = 0.0
    stream_waits: float = 0.0  # cudaStreamWaitEvent / torch Stream.wait_event
    readbacks: float = 0.0  # small device-to-host read-backs (.item(), .to(kCPU), CUDA-scalar indexing)
    handoffs: float = 0.0  # tasks handed to a host worker thread
    python_layers: float = 0.0  # HF decoder-layer module overheads
    managed_faults: float = 0.0  # host touches of managed memory the GPU wrote last (page migrates back)

    def seconds(self, sw: SoftwareProfile) -> float:
        return (
            self.torch_ops * sw.torch_op_dispatch_s
            + (self.python_ops + self.ext_calls) * sw.python_op_s
            + self.cpp_launches * sw.cpp_kernel_launch_s
            + self.memcpy_calls * sw.memcpy_async_call_s
            + self.memcpy2d_calls * sw.memcpy2d_async_call_s
            + self.torch_copies * sw.torch_copy_call_s
            + self.stream_syncs * sw.stream_sync_s
            + self.event_records * sw.event_record_s
            + self.stream_waits * sw.stream_wait_event_s
            + self.readbacks * sw.readback_s
            + self.handoffs * sw.thread_handoff_s
            + self.python_layers * sw.python_layer_s
            + self.managed_faults * sw.managed_page_fault_s
        )

    def __add__(self, other: HostOps) -> HostOps:
        return HostOps(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __mul__(self, k: float) -> HostOps:
        return HostOps(**{f.name: getattr(self, f.name) * k for f in fields(self)})

    __rmul__ = __mul__


def host_s(ctx: CostContext, ops: HostOps) -> float:
    """Host seconds of `ops` with the context's software profile; 0 in "ideal" mode (ctx.as_published)."""
    if not ctx.as_published:
        return 0.0
    assert ctx.software is not None
    return ops.seconds(ctx.software)

"""The CUDA runtime's copy calls through ctypes, on the libcudart that torch itself loaded.

Host->device copies by API path, as the simulator's software profile distinguishes them:
cudaMemcpyAsync, cudaMemcpy2DAsync (rows) and cudaMemcpyBatchAsync (CUDA >= 12.8; its signature lost
`failIdx` in CUDA 13.0). Each call pays ctypes' own overhead (a fraction of a microsecond), which the
microbenchmark reports beside the figures. Error codes are raised as CudaError with the runtime's text.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["Cudart", "CudaError", "H2D"]

H2D = 1  # cudaMemcpyHostToDevice
_ORDER_STREAM = 1  # cudaMemcpySrcAccessOrderStream


class CudaError(RuntimeError):
    pass


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", _MemLocation),
        ("dstLocHint", _MemLocation),
        ("flags", ctypes.c_uint),
    ]


def _loaded_cudart() -> str:
    """Path of the libcudart mapped into this process (torch loads it when CUDA is initialised)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "libcudart.so" in Path(path).name:
            return path
    raise CudaError("no libcudart mapped into this process (initialise CUDA through torch first)")


class Cudart:
    def __init__(self) -> None:
        self.path = _loaded_cudart()
        self.lib = ctypes.CDLL(self.path)
        version = ctypes.c_int()
        self._check(self.lib.cudaRuntimeGetVersion(ctypes.byref(version)), "cudaRuntimeGetVersion")
        self.version = version.value  # e.g. 13000
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.lib.cudaMemcpyAsync.argtypes = [vp, vp, sz, ctypes.c_int, vp]
        self.lib.cudaMemcpy2DAsync.argtypes = [vp, sz, vp, sz, sz, sz, ctypes.c_int, vp]
        self.has_batch = hasattr(self.lib, "cudaMemcpyBatchAsync") and self.version >= 12080
        self._attr = _MemcpyAttributes(_ORDER_STREAM, _MemLocation(0, 0), _MemLocation(0, 0), 0)
        self._attr_idx = (ctypes.c_size_t * 1)(0)
        self._fail_idx = ctypes.c_size_t()

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            self.lib.cudaGetErrorString.restype = ctypes.c_char_p
            raise CudaError(f"{what} returned {code}: {self.lib.cudaGetErrorString(code).decode()}")

    def malloc_managed(self, n_bytes: int) -> int:
        """cudaMallocManaged(n_bytes, cudaMemAttachGlobal): the address, to free with `free`."""
        ptr = ctypes.c_void_p()
        out_ptr = ctypes.POINTER(ctypes.c_void_p)
        self.lib.cudaMallocManaged.argtypes = [out_ptr, ctypes.c_size_t, ctypes.c_uint]
        self._check(self.lib.cudaMallocManaged(ctypes.byref(ptr), n_bytes, 1), "cudaMallocManaged")
        return int(ptr.value or 0)

    def free(self, ptr: int) -> None:
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]
        self._check(self.lib.cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def memcpy_async(self, dst: int, src: int, n_bytes: int, stream: int) -> None:
        self._check(self.lib.cudaMemcpyAsync(dst, src, n_bytes, H2D, stream), "cudaMemcpyAsync")

    def memcpy2d_async(
        self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, stream: int
    ) -> None:
        code = self.lib.cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, H2D, stream)
        self._check(code, "cudaMemcpy2DAsync")

    def batch_arrays(self, dsts: list[int], srcs: list[int], sizes: list[int]) -> tuple:
        """ctypes arrays for `memcpy_batch_async` (built once, outside the timed loop)."""
        n = len(dsts)
        return (ctypes.c_void_p * n)(*dsts), (ctypes.c_void_p * n)(*srcs), (ctypes.c_size_t * n)(*sizes), n

    def memcpy_batch_async(self, arrays: tuple, stream: int) -> None:
        if not self.has_batch:
            raise CudaError(f"cudaMemcpyBatchAsync needs CUDA runtime >= 12.8 (this is {self.version})")
        dsts, srcs, sizes, n = arrays
        attr = ctypes.byref(self._attr)
        args = [dsts, srcs, sizes, ctypes.c_size_t(n), attr, self._attr_idx, ctypes.c_size_t(1)]
        if self.version < 13000:  # CUDA 12.8-12.9 also take a failure-index out-parameter
            args.append(ctypes.byref(self._fail_idx))
        code = self.lib.cudaMemcpyBatchAsync(*args, ctypes.c_void_p(stream))
        self._check(code, "cudaMemcpyBatchAsync")

"""Host arrays as libdist sees them: an address, an element count and a dtype, never a copy.

numpy arrays and torch CPU tensors are read directly; any other object that speaks DLPack or
the buffer protocol is viewed through numpy (np.from_dlpack / memoryview: views, not copies).
An array libdist would have to copy (non-contiguous) or must not write (read-only) is refused
with a TypeError that says what to do: a silent copy would leave the caller's array unchanged.
"""

import numpy as np

from . import _cohort

# What libdist reduces: float32/64, int32/64, float16 and bfloat16 (ml_dtypes, looked up by name:
# ml_dtypes is optional). Keyed by dtype object: dtype.name costs more than the whole call.
_NUMPY_DTYPES = {np.dtype(name): name for name in ("float32", "float64", "int32", "int64",
                                                     "float16")}
_TORCH_DTYPES = {
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.int32": "int32",
    "torch.int64": "int64",
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
}
_SUPPORTED = "float32, float64, int32, int64, float16 or bfloat16"


class HostArray:
    """One array as passed to a collective: the original object (kept alive for the call)."""

    __slots__ = ("obj", "view", "address", "count", "dtype", "shape", "is_torch", "np_dtype")

    def __init__(self, obj, address, count, dtype, shape, is_torch, np_dtype=None, view=None):
        self.obj = obj
        # The numpy view of a DLPack or buffer-protocol object holds its export: while it lives,
        # the object cannot be resized (its memory moved) under the call.
        self.view = view
        self.address = address
        self.count = count
        self.dtype = dtype
        self.shape = shape
        self.is_torch = is_torch
        self.np_dtype = np_dtype

    def buffer(self):
        return _cohort.Buffer(self.address, self.count, self.dtype)

    def empty(self, shape):
        """A new array of the same kind (numpy or torch) and dtype."""
        if self.is_torch:
            import torch

            return torch.empty(shape, dtype=self.obj.dtype)
        return np.empty(shape, dtype=self.np_dtype)


def _is_torch_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "data_ptr")


def host_array(obj, what, writable=True):
    """The HostArray for obj, or TypeError naming the problem and the fix."""
    if type(obj) is np.ndarray:  # the common case first: every check below costs
        arr = obj
    elif _is_torch_tensor(obj):
        return _torch_array(obj, what)
    elif isinstance(obj, np.ndarray):
        arr = obj
    elif hasattr(obj, "__dlpack__"):
        try:
            arr = np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError) as e:
            raise TypeError(f"{what}: cannot view {type(obj).__name__} through DLPack "
                            f"without a copy ({e}); pass a numpy array") from None
    else:
        try:
            arr = np.asarray(memoryview(obj))
        except TypeError:
            raise TypeError(
                f"{what}: {type(obj).__name__} is not an array: pass a numpy array, a torch "
                "CPU tensor, or an object with __dlpack__ or the buffer protocol") from None
    dtype = _NUMPY_DTYPES.get(arr.dtype)
    if dtype is None:
        dtype = arr.dtype.name
        if dtype != "bfloat16":
            raise TypeError(f"{what}: dtype {arr.dtype} is not supported: use {_SUPPORTED}"
                            + (" (bfloat16: ml_dtypes.bfloat16)" if dtype == "uint16" else ""))
    flags = arr.flags
    if not flags.c_contiguous:
        raise TypeError(
            f"{what}: the array is not C-contiguous, so the result could not be written into it "
            "without a copy you would never see: pass np.ascontiguousarray(array) (and use the "
            "returned array)")
    if writable and not flags.writeable:
        raise TypeError(
            f"{what}: the array is read-only and this call writes its result into it: pass a "
            "writable copy (array.copy())")
    address = _cohort.address_of(arr) if arr.size else 0
    if address < 0:
        address = arr.ctypes.data
    return HostArray(obj, address, arr.size, dtype, arr.shape, False, arr.dtype, arr)


def _torch_array(obj, what):
    if obj.device.type != "cpu":
        raise TypeError(
            f"{what}: the tensor is on {obj.device}; the cohort package runs host "
            "collectives only: pass a CPU tensor (tensor.cpu()), or use NCCL through "
            "torch.distributed for GPU tensors")
    dtype = _TORCH_DTYPES.get(str(obj.dtype))
    if dtype is None:
        raise TypeError(f"{what}: dtype {obj.dtype} is not supported: use {_SUPPORTED}")
    if not obj.is_contiguous():
        raise TypeError(
            f"{what}: the tensor is not contiguous, so the result could not be written "
            "into it: pass tensor.contiguous() (and use the returned tensor)")
    return HostArray(obj, obj.data_ptr(), obj.numel(), dtype, tuple(obj.shape), True)

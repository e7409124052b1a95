"""webgpu_kernels: manifest-driven WebGPU compute kernels, run natively through wgpu-py."""

from .api import get_kernel, list_kernels, load_kernel, synchronize, to_gpu
from .device import choose_adapter, get_device, list_adapters
from .errors import (
    DeviceLimitError, DTypeError, ExpressionError, GPUError, InputError, KernelError, ManifestError,
    MissingInputError, PackageError, RankError, SelectionError, ShaderCompileError, TemplateError,
    UnknownInputError, VariantRejectedError,
)  # fmt: skip
from .kernel import Explanation, Kernel, TensorMeta
from .tensor import GpuTensor

__version__ = "0.1.0"

__all__ = [
    "get_kernel", "load_kernel", "list_kernels", "to_gpu", "synchronize", "list_adapters", "choose_adapter", "get_device",
    "Kernel", "Explanation", "TensorMeta", "GpuTensor",
    "KernelError", "PackageError", "ManifestError", "ExpressionError", "InputError", "UnknownInputError",
    "MissingInputError", "RankError", "DTypeError", "DeviceLimitError", "SelectionError",
    "VariantRejectedError", "TemplateError", "GPUError", "ShaderCompileError", "__version__",
]  # fmt: skip

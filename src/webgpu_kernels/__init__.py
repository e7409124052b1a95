"""webgpu_kernels: manifest-driven WebGPU compute kernels, run natively through wgpu-py."""

from .api import empty_cache, get_kernel, list_kernels, load_kernel, synchronize, test_case_inputs, to_gpu
from .call_inputs import TensorMeta
from .device import choose_adapter, get_device, list_adapters
from .errors import (
    AdapterNotFoundError,
    AttributeValueError,
    BroadcastError,
    CaseFileError,
    DeviceError,
    DeviceLimitError,
    DeviceLostError,
    DigestError,
    DTypeError,
    ExpressionError,
    ExpressionSandboxError,
    GPUError,
    GpuWaitWarning,
    HubError,
    InputError,
    KernelError,
    LayoutError,
    ManifestError,
    MissingInputError,
    NotPicklableError,
    PackageError,
    RankError,
    SandboxError,
    SelectionError,
    ShaderCompileError,
    ShapeError,
    TemplateError,
    TemplateSandboxError,
    TensorReleasedError,
    TrustError,
    TuningFileWarning,
    UncomputedTensorError,
    UnknownInputError,
    VariantRejectedError,
)  # fmt: skip
from .kernel import Explanation, Kernel
from .tensor import GpuTensor

__version__ = "0.1.0"

__all__ = [
    "get_kernel", "load_kernel", "list_kernels", "test_case_inputs", "to_gpu", "synchronize", "empty_cache", "list_adapters", "choose_adapter",
    "get_device", "Kernel", "Explanation", "TensorMeta", "GpuTensor", "__version__", "KernelError",
    "PackageError", "CaseFileError", "DigestError", "HubError", "TrustError", "ManifestError", "ExpressionError",
    "BroadcastError", "SandboxError", "ExpressionSandboxError", "InputError", "UnknownInputError", "MissingInputError",
    "RankError", "DTypeError", "ShapeError", "AttributeValueError", "DeviceLimitError", "SelectionError",
    "VariantRejectedError", "TemplateError", "TemplateSandboxError", "LayoutError", "GPUError",
    "AdapterNotFoundError", "ShaderCompileError", "DeviceError", "DeviceLostError", "TensorReleasedError",
    "UncomputedTensorError", "NotPicklableError", "GpuWaitWarning", "TuningFileWarning",
]  # fmt: skip

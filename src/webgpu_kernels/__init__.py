"""webgpu_kernels: manifest-driven WebGPU compute kernels, run natively through wgpu-py.

The errors are imported with the package; the rest of what it exports (the engine, numpy,
jsonschema: most of a command's start-up) on first use, so that the command line's entry
(``__main__.py``) is running before that import begins and Ctrl-C during it ends as Ctrl-C in a
command does. What ``import webgpu_kernels`` and its first use cost together is unchanged.
"""

from typing import TYPE_CHECKING, Any

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
    HubCommitNotServedError,
    HubError,
    HubNotCachedError,
    InputError,
    KernelError,
    LayoutError,
    ManifestError,
    MissingInputError,
    MissingOutputError,
    NotPicklableError,
    OutOfMemoryError,
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

if TYPE_CHECKING:  # type checkers see plain imports (and no __getattr__, which would hide a misspelt name)
    from .api import (
        empty_cache,
        from_wgpu_buffer,
        get_kernel,
        list_kernels,
        load_kernel,
        synchronize,
        test_case_inputs,
        to_gpu,
    )
    from .call_inputs import TensorMeta
    from .device import choose_adapter, get_device, list_adapters
    from .explanation import Explanation
    from .hub_lock import get_locked_kernel
    from .kernel import Kernel
    from .tensor import GpuTensor
else:
    #: Exported name -> the module that defines it, imported on first use.
    _LAZY = {
        **dict.fromkeys(["empty_cache", "from_wgpu_buffer", "get_kernel", "list_kernels", "load_kernel",
                         "synchronize", "test_case_inputs", "to_gpu"], "api"),
        "TensorMeta": "call_inputs",
        **dict.fromkeys(["choose_adapter", "get_device", "list_adapters"], "device"),
        "Explanation": "explanation", "Kernel": "kernel", "get_locked_kernel": "hub_lock",
        "GpuTensor": "tensor",
    }  # fmt: skip

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # later reads find it without this call
        return value

__version__ = "0.1.0"

__all__ = [
    "get_kernel", "get_locked_kernel", "load_kernel", "list_kernels", "test_case_inputs", "to_gpu", "from_wgpu_buffer", "synchronize", "empty_cache", "list_adapters", "choose_adapter",
    "get_device", "Kernel", "Explanation", "TensorMeta", "GpuTensor", "__version__", "KernelError",
    "PackageError", "CaseFileError", "DigestError", "HubError", "HubNotCachedError", "HubCommitNotServedError", "TrustError", "ManifestError", "ExpressionError",
    "BroadcastError", "SandboxError", "ExpressionSandboxError", "InputError", "UnknownInputError", "MissingInputError", "MissingOutputError",
    "RankError", "DTypeError", "ShapeError", "AttributeValueError", "DeviceLimitError", "SelectionError",
    "VariantRejectedError", "TemplateError", "TemplateSandboxError", "LayoutError", "GPUError",
    "AdapterNotFoundError", "ShaderCompileError", "DeviceError", "DeviceLostError", "OutOfMemoryError", "TensorReleasedError",
    "UncomputedTensorError", "NotPicklableError", "GpuWaitWarning", "TuningFileWarning",
]  # fmt: skip


def __dir__() -> list[str]:
    """The public API and the module's dunders: the lazy exports before their first use, and not
    the names that build the module (TYPE_CHECKING, Any, _LAZY) or the submodules imports leave here."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__") and name.endswith("__"))})

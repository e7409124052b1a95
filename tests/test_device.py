"""Adapter choice and the per-process devices (webgpu_kernels.device)."""

from __future__ import annotations

import pytest

import webgpu_kernels as wk
from webgpu_kernels import device as device_module
from webgpu_kernels import errors


def test_a_request_string_chooses_its_adapter_once(device, monkeypatch):
    """``adapter="vulkan"`` on every call must not list every adapter's info, features and limits
    every time (about 15 us a call)."""
    request = f" {device.adapter.name.upper()} "  # a string no other test asks for, same adapter
    listed = []
    real = device_module.list_adapters
    monkeypatch.setattr(device_module, "list_adapters", lambda: listed.append(1) or real())
    assert wk.get_device(request) is device
    assert wk.get_device(request) is device
    assert len(listed) == 1


def test_an_unknown_or_mistyped_request_is_refused_every_time():
    for _ in range(2):
        with pytest.raises(errors.AdapterNotFoundError, match="no-such-gpu"):
            wk.get_device("no-such-gpu")
        with pytest.raises(errors.InputError, match="adapter"):
            wk.get_device(["vulkan"])  # type: ignore[arg-type]

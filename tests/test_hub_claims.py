"""docs/hub.md as a contract: one test per checkable claim that tests/test_hub.py does not pin,
organised by the document's headings; each docstring quotes the line it pins.

Same local Hub as test_hub.py (tests/hub_server.py, its ``hub_root`` and ``server`` fixtures).
"""

from __future__ import annotations

import pytest
import test_hub
from test_hub import OFFICIAL

import webgpu_kernels as wk

# test_hub.py's local Hub (its repositories and the server), shared.
hub_root = test_hub.hub_root
server = test_hub.server

hf_constants = pytest.importorskip("huggingface_hub.constants")


# --- the cache, offline use and the environment ---------------------------------------------------


def test_the_hugging_face_token_goes_to_the_configured_hub_only(server, monkeypatch):
    """Pins "(credentials in the URL ... are refused: set `HF_TOKEN` or log in with huggingface_hub)";
    the token is sent to the Hub that `HF_ENDPOINT` names, never to another one a kernel URL names
    (it had been sent to any host)."""
    import hub_server

    seen: list[tuple[str, str | None]] = []
    dispatch = hub_server._Handler._dispatch

    def spy(self, method: str) -> None:
        seen.append((self.headers.get("Host", "").partition(":")[0], self.headers.get("Authorization")))
        dispatch(self, method)

    monkeypatch.setattr(hub_server._Handler, "_dispatch", spy)
    monkeypatch.setenv("HF_TOKEN", "hf_claimstokenclaimstoken")
    other = server.url.replace("127.0.0.1", "localhost")
    wk.get_kernel(f"{other}/kernels/{OFFICIAL}", version=1, trust_remote_code=True)
    wk.get_kernel(OFFICIAL, version=1)
    hosts = {host for host, _ in seen}
    assert hosts == {"localhost", "127.0.0.1"}
    assert {auth for host, auth in seen if host == "localhost"} == {None}
    assert {auth for host, auth in seen if host == "127.0.0.1"} == {"Bearer hf_claimstokenclaimstoken"}

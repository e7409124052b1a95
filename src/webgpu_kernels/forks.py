"""Module state a forked child must get fresh.

Only the forking thread exists in a child of ``os.fork``: a lock another thread of the parent held
at that moment stays held in the child for good, and the child's first ``get_kernel`` or load
waited for it forever. Modules name such globals here; the child gets new ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def fresh_in_child(namespace: dict[str, Any], **factories: Callable[[], Any]) -> None:
    """After a fork, in the child, set ``namespace[name] = factory()`` for each name given."""
    if hasattr(os, "register_at_fork"):  # POSIX
        os.register_at_fork(after_in_child=lambda: namespace.update({n: f() for n, f in factories.items()}))

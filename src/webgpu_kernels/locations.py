"""What a kernel name designates, and whether it needs trust.

``get_kernel`` and the command line take an embedded op id (``com.microsoft.QuickGelu``), a Hub
repository (``org/op``, or ``https://<hub>/kernels/org/op``) or a local folder (a path or a
``file://`` URL). :func:`classify` sorts a name into one of those without touching the network or
the disk; :func:`check_trust` refuses, before anything is fetched or read, what needs
``trust_remote_code``: a repository outside the official organisation, any path or URL.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import url2pathname

from .errors import PackageError, TrustError, type_name

#: The organisation whose repositories load without ``trust_remote_code``.
OFFICIAL_ORG = "webgpu-kernels"

#: An 'org/name' that huggingface_hub's validate_repo_id accepts too (each part at most 96 characters,
#: the name starting and ending with a letter, digit or '_'; no '--', '..' or '.git' end: checked
#: in is_repo_id). A name it refuses had raised its HFValidationError, no KernelError.
_REPO_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?"
                      r"/[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?\Z")  # fmt: skip


@dataclass(frozen=True)
class Location:
    """What a ``get_kernel`` name designates.

    ``kind`` is ``"embedded"`` (an op id), ``"hub"`` (a repository id, ``value``) or ``"path"``
    (a local folder, ``value``). ``url_like`` is true for paths and URLs, which always need trust.
    ``endpoint`` is set for a Hub repository given by its URL.
    """

    kind: str
    value: str
    url_like: bool = False
    endpoint: str | None = None


def classify(name: str | os.PathLike[str]) -> Location:
    """Sort a name into an embedded op id, a Hub repository or a local path.

    * ``"com.microsoft.BiasAdd"`` (no slash): an embedded package;
    * ``"org/op"`` (one slash, a valid repository id): a Hub kernel repository;
    * ``"https://host/kernels/org/op"``: the same, on that endpoint (URL-like);
    * ``"file:///abs/pkg"``, ``"./pkg"``, ``"../pkg"``, ``"/abs/pkg"``, ``"~/pkg"``, a name with two
      or more slashes or a backslash, or a ``Path``: a local folder (URL-like).
    """
    if isinstance(name, os.PathLike):
        return Location("path", os.fspath(name), url_like=True)
    if not isinstance(name, str):
        raise PackageError(f"a kernel name must be a string or a path, got {type_name(name)}")
    if not name.strip():
        raise PackageError("empty kernel name")
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", name)
    if scheme and len(scheme.group(1)) > 1:  # not a Windows drive letter
        return _classify_url(name, scheme.group(1).lower())
    if (
        name.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or name in (".", "..")
        or "\\" in name
        or re.match(r"^[A-Za-z]:", name)
        or name.count("/") >= 2
    ):
        return Location("path", name, url_like=True)
    if "/" in name:
        return Location("hub", checked_repo_id(name))
    return Location("embedded", name)


def is_repo_id(repo_id: object) -> bool:
    """Whether ``repo_id`` is a valid Hub repository id, ``org/name`` (checked_repo_id says why not)."""
    return (isinstance(repo_id, str) and bool(_REPO_ID.match(repo_id)) and ".." not in repo_id and "--" not in repo_id
            and not repo_id.endswith(".git"))  # fmt: skip


def checked_repo_id(repo_id: str) -> str:
    if not is_repo_id(repo_id):
        base, _, pin = repo_id.partition("@") if isinstance(repo_id, str) else ("", "", "")
        # `org/op@v2` and `org/op@REVISION` are the command line's spelling; a Python user copying
        # it needs the keyword (`@<commit sha>` or `@main` had no advice); as kernel_arguments.hub_pin
        keyword = f"version={int(pin[1:])}" if re.fullmatch(r"v[0-9]+", pin) else f"revision={pin!r}"
        hint = f": in Python write get_kernel({base!r}, {keyword})" if pin and is_repo_id(base) else ""
        raise PackageError(f"{repo_id!r} is not a valid Hub repository id (expected 'org/name' of letters, digits, "
                           "'_', '-' and '.', each part at most 96 characters, the name starting and ending with a "
                           f"letter, digit or '_', no '--' or '..', not ending in '.git'){hint}")  # fmt: skip
    return repo_id


def slashed_repo_id(name: object) -> str | None:
    """The Hub repository id ``name`` would be without one trailing slash (``org/op/`` as pasted from a
    browser's URL path), else None."""
    if not isinstance(name, str) or not name.endswith("/"):
        return None
    repo_id = name[:-1]
    return repo_id if is_repo_id(repo_id) else None


def refuse_slashed_repo_id(name: str) -> None:
    """Refuse ``org/op/`` where nothing of that name is here, asking whether the Hub repository
    ``org/op`` was meant: get_kernel's refusal and every command's (kernel_arguments.kernel_folder), in
    the one wording cli.md documents.

    It stays a path (two slashes: security.md and cli.md's rule), not read as the repository: what
    a name loads, a verified Hub package or an unverified folder, must not turn on what the disk
    holds (the command line refuses ``org/op`` naming both for the same reason; shell completion
    writes ``org/op/`` for a folder). Only a stat, before anything is read or fetched.
    """
    repo_id = slashed_repo_id(name)
    if repo_id is None:
        return
    try:
        present = os.path.lexists(name)
    except (OSError, ValueError):
        present = False
    if not present:
        raise PackageError(f"no such folder (did you mean the Hub repository {repo_id}?)", path=name)


def _classify_url(name: str, scheme: str) -> Location:
    parts = urlsplit(name)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise PackageError(f"{name!r}: only local file:// URLs can be loaded")
        return Location("path", url2pathname(unquote(parts.path)), url_like=True)
    if scheme in ("http", "https"):
        if parts.username is not None or parts.password is not None:
            # They would name the endpoint's cache folder and appear in every message and log; the
            # message shows the URL without them.
            shown = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
            raise PackageError(f"{shown!r} with credentials in the URL: set HF_TOKEN (or log in with huggingface_hub) "
                               "instead, so that the token is kept out of the cache folder's name and the messages; "
                               "the token goes only to the Hub HF_ENDPOINT names, so set HF_ENDPOINT to this one "
                               "if it is not the configured Hub")  # fmt: skip
        segments = [unquote(s) for s in parts.path.split("/") if s]
        if len(segments) == 3 and segments[0] == "kernels" and parts.netloc:
            repo_id = checked_repo_id(f"{segments[1]}/{segments[2]}")
            return Location("hub", repo_id, url_like=True, endpoint=f"{parts.scheme}://{parts.netloc}")
        # Anything else at an http(s) URL is still refused for lack of trust first (check_trust),
        # then as an unsupported shape.
        return Location("url", name, url_like=True)
    return Location("url", name, url_like=True)


def check_trust(location: Location, *, trust_remote_code: bool, shown: str) -> bool:
    """Refuse (TrustError) a location that needs trust without ``trust_remote_code``.

    Returns whether the location needed trust (``KernelPackage.needs_trust`` for what it loads).
    A Hub id with a trailing slash and no such folder is a PackageError asking for the id
    (:func:`refuse_slashed_repo_id`), trusted or not.
    """
    if location.kind == "embedded":
        return False
    if location.kind == "path":  # the repository it means, not a trust question about a folder not there
        refuse_slashed_repo_id(shown)
    if location.url_like:
        reason = "it is a local path or URL-like location, not a repository of the official organisation"
    elif location.value.split("/", 1)[0] != OFFICIAL_ORG:
        reason = f"repository {location.value!r} is outside the {OFFICIAL_ORG!r} organisation"
    else:
        return False
    if not trust_remote_code:
        # A folder of one's own is load_kernel's; the command line opens a folder without the flag,
        # so its flag is named only for what needs it there (a folder's refusal had named the CLI flag).
        if location.kind == "path":
            advice = ("a folder of your own opens with load_kernel(path); else pass trust_remote_code=True and "
                      "expected_op_id=...")
        else:
            advice = ("pass trust_remote_code=True and expected_op_id=... (on the command line: webgpu-kernels "
                      "--trust-remote-code COMMAND ..., and download's --expected-op-id)")
            org, _, name = location.value.partition("/")
            if not location.url_like and difflib.get_close_matches(org.lower(), [OFFICIAL_ORG], cutoff=0.75):
                # a typo of the official name must not be steered to trust: that is where a squatter waits
                reason += f" (did you mean {OFFICIAL_ORG}/{name}?)"
        raise TrustError(
            f"refusing to load {shown!r}: {reason}. Its templates become shaders that run on your GPU; "
            f"{advice}, if you trust its author",
            location=shown, reason=reason,
        )  # fmt: skip
    return True

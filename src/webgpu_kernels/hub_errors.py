"""huggingface_hub's answers and errors in this library's words: the one translation of them
into :class:`~webgpu_kernels.errors.HubError` that download (hub.py) and ``webgpu-kernels lock``
(hub_lock.py) share, and the wording helpers they and upload (hub_upload.py) use (an HTTP answer,
which token was sent, why the cache's copy was served). What an endpoint said is quoted cut short
and printable. Imports no hub.py: the downloader uses it, not the other way round.
"""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any

from .errors import HubError, printable, shorten
from .hub_cache import DEFAULT_ENDPOINT, REPO_TYPE, hub_endpoint, hub_offline


def no_revision(repo_id: str, rev: str, *, endpoint: str | None, token: Any, version: int | None) -> HubError:
    """The endpoint has no revision ``rev`` of the repository: the error, with its published versions."""
    what = f"contract version {version} (revision {rev!r})" if version is not None else f"revision {rev!r}"
    published = _published_versions(repo_id, endpoint, token)
    # The endpoint's list, of any length: the last few (the newest) are the ones to name.
    shown = ", ".join(published[-12:]) + (f" ({len(published)} in all)" if len(published) > 12 else "")
    hint = f"; published versions: {shown}" if published else ""
    if re.fullmatch(r"[0-9a-f]{4,39}", rev):  # `git log --oneline`'s sha: the Hub resolves only the full one
        hint += f"; a commit is named by its full 40-hex sha (the Hub does not resolve an abbreviated one like {rev!r})"
    return HubError(f"{repo_id} has no {what} on {endpoint or DEFAULT_ENDPOINT}{hint}", repo_id=repo_id, revision=rev)


def request_error(exc: BaseException, repo_id: str, rev: str, *, endpoint: str | None, token: Any,
                  version: int | None, lock: bool = False) -> HubError:  # fmt: skip
    """huggingface_hub's error for a request about revision ``rev`` of ``repo_id``, in this library's
    words: the one translation that download and ``webgpu-kernels lock`` (``lock``, hub_lock.py)
    share. ``version``: the contract version asked (vN), for the words of a missing revision."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    where = endpoint or DEFAULT_ENDPOINT
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, RevisionNotFoundError):  # a commit the endpoint does not have, not cached, or a vN branch
        return no_revision(repo_id, rev, endpoint=endpoint, token=token, version=version)
    if isinstance(exc, GatedRepoError):  # a RepositoryNotFoundError too: a repository just listed had read "no kernel repository"
        return HubError(f"{repo_id} on {where} is gated: its files are served only to accounts granted access; "
                        f"{token_hint(token, endpoint, gated=True)}", repo_id=repo_id, revision=rev)  # fmt: skip
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(f"no kernel repository {repo_id!r} on {where} (or it is private and "
                        f"{token_hint(token, endpoint)})", repo_id=repo_id, revision=rev)  # fmt: skip
    if isinstance(exc, HfHubHTTPError):
        return HubError(f"{repo_id} revision {rev!r}: the Hub answered {http_answer(exc)}", repo_id=repo_id, revision=rev)
    if {"ConnectError", "TimeoutException"} & {c.__name__ for c in type(exc).__mro__}:  # httpx's (httpx2's)
        return HubError(f"{repo_id} revision {rev!r}: {where} cannot be reached ({type(exc).__name__}: "
                        f"{first_line(exc)}), so {'the lock cannot be made' if lock else 'it cannot be downloaded'}",
                        repo_id=repo_id, revision=rev)  # fmt: skip
    doing = f"asking {where}" if lock else f"download from {where}"
    return HubError(f"{repo_id} revision {rev!r}: {doing} failed: {type(exc).__name__}: {first_line(exc)}",
                    repo_id=repo_id, revision=rev)  # fmt: skip


#: What a 401 says to do, after "refused the token this process sent, " (answer: the Hub's words, or "").
_TOKEN_ADVICE = "HF_TOKEN or huggingface_hub's login{answer}: renew it, or unset HF_TOKEN for a public repository"


def cache_reason(where: str, *, offline: bool, unreached: Exception | None, unlisted: Exception | None) -> str:
    """Why the cache's copy was served, in words (HubPackage.from_cache_reason)."""
    if offline:
        return "offline mode is on (HF_HUB_OFFLINE)"
    if unreached is not None:
        return f"{where} cannot be reached ({type(unreached).__name__}: {first_line(unreached)})"
    if unlisted is not None:
        status = http_status(unlisted)
        if status == 401:  # a revoked or mistyped HF_TOKEN: the cache's copy goes on loading, so say it here
            response = getattr(unlisted, "response", None)
            said = getattr(unlisted, "server_message", None)
            answer = f"401 {getattr(response, 'reason_phrase', '') or 'Unauthorized'}"
            if isinstance(said, str) and said.strip():
                answer += f": {_said(said)}"
            return f"{where} refused the token this process sent, {_TOKEN_ADVICE.format(answer=f' ({answer})')}"
        if status is not None:
            return f"{where} answered {http_answer(unlisted)}"
        return f"{where} did not list it ({type(unlisted).__name__}: {first_line(unlisted)})"
    return f"{where} did not list it"


#: The most of an endpoint's words one message quotes: they are its to choose, of any length.
MAX_SERVER_WORDS = 300


def _said(text: str) -> str:
    """The first line of what an endpoint (or its client's error) said, cut to MAX_SERVER_WORDS
    characters and its control characters replaced: a hostile Hub's 401 or 503 body had reached
    from_cache_reason, HubError and download's output whole, escape sequences included."""
    text = text.strip()
    return printable(shorten(text.splitlines()[0] if text else "", MAX_SERVER_WORDS))


def first_line(exc: BaseException) -> str:
    return _said(str(exc)) or type(exc).__name__


def http_answer(exc: Exception, *, token_advice: bool = True) -> str:
    """An HTTP error's first line, and the URL asked when that line does not name it (huggingface_hub's
    404 for a listed file the server then did not have read "404 Client Error.", no file named), then
    what the Hub said and, for a 401 (unless ``token_advice`` is off: a writer's advice differs), what
    to do about the token."""
    first = first_line(exc)
    with suppress(Exception):  # no response, or one without its request
        url = str(exc.response.request.url)  # type: ignore[attr-defined]
        if url and url not in first:
            first = f"{first.rstrip('.')} (for {url})"
    # The Hub's own words (X-Error-Message) are on a later line: "Invalid credentials in Authorization
    # header" had been dropped, a revoked HF_TOKEN reading as a bare "401 Unauthorized".
    said = getattr(exc, "server_message", None)
    if isinstance(said, str) and said.strip() and _said(said) not in first:
        first = f"{first}: {_said(said)}"
    if token_advice and http_status(exc) == 401:
        first += f" (the Hub refused the token this process sent, {_TOKEN_ADVICE.format(answer='')})"
    return first


def token_kept_from(endpoint: str | None) -> str:
    """Why no token went to ``endpoint``: the Hugging Face token goes only to HF_ENDPOINT's Hub."""
    return (f"no token was sent: the Hugging Face token goes only to the Hub HF_ENDPOINT names "
            f"({hub_endpoint() or DEFAULT_ENDPOINT}); set HF_ENDPOINT={endpoint} to send it to this one")  # fmt: skip


def token_sent(token: Any) -> bool:
    """Whether a request made with huggingface_hub's ``token=`` carried one: a string or True, or
    for None the one HF_TOKEN or the login gives (False sends none)."""
    if token is None:
        from huggingface_hub import get_token

        with suppress(Exception):  # best effort: only words of an error message
            return get_token() is not None
        return False
    return isinstance(token, str) or token is True


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an error huggingface_hub raised for an answer (None: no answer came)."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def token_hint(token: Any, endpoint: str | None, *, gated: bool = False) -> str:
    """Which token went with the request (none, HF_TOKEN or a login) and what to do, for a private or
    gated repository: it had read "no valid token was sent" whether one was sent or not."""
    if token is False:  # download() sends the token only to HF_ENDPOINT's Hub
        return token_kept_from(endpoint)
    if not token_sent(token):
        return "no token was sent: set HF_TOKEN, or log in with `hf auth login`, as an account that may read it"
    if gated:
        return "the token sent (HF_TOKEN or huggingface_hub's login) has not been granted access: ask for it on the repository's page"
    return "the token sent (HF_TOKEN or huggingface_hub's login) may not read it"


def fallback_reason(exc: BaseException, where: str) -> str:
    """Why huggingface_hub fell back to the cache, in words: an HTTP answer it counted as the Hub
    being down (a 5xx, a 403, a 429) is named with its status, not as "cannot be reached" (a rate
    limit or a refusal had read as a network problem)."""
    from huggingface_hub.errors import HfHubHTTPError

    cause: BaseException | None = exc
    for _ in range(8):  # the chain snapshot_download and hf_hub_download raise from
        if cause is None:
            break
        if isinstance(cause, HfHubHTTPError) and getattr(cause, "response", None) is not None:
            return f"{where} answered {http_answer(cause)}"
        cause = cause.__cause__ or cause.__context__
    return f"{where} cannot be reached"


def revision_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` (a HubError, say) comes of the endpoint's answer that it has no such revision
    (huggingface_hub's RevisionNotFoundError, somewhere in the chain it was raised from)."""
    from huggingface_hub.errors import RevisionNotFoundError

    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None:
            break
        if isinstance(cause, RevisionNotFoundError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _published_versions(repo_id: str, endpoint: str | None, token: Any) -> list[str]:
    """The ``vN`` branches and tags of a repository, best effort (empty when it cannot be asked)."""
    if hub_offline():
        return []
    try:
        from huggingface_hub import HfApi

        refs = HfApi(endpoint=endpoint, token=token).list_repo_refs(repo_id, repo_type=REPO_TYPE)
        names = {r.name for r in [*refs.branches, *refs.tags]}
    except Exception:  # noqa: BLE001 - only a hint for an error message
        return []
    versions = sorted((n for n in names if re.fullmatch(r"v[1-9][0-9]*", n)), key=lambda n: int(n[1:]))
    return versions

"""A small stand-in for the Hugging Face Hub on 127.0.0.1, for testing the real huggingface_hub client.

It serves **kernel repositories** (``repo_type="kernel"``) from a folder laid out as::

    ROOT/<org>/<name>/<ref>/<files of the repository at that ref>

for example ``ROOT/webgpu-kernels/com.microsoft.QuickGelu/v1/build/webgpu/manifest.json``. Each
``<ref>`` folder is one commit: its 40-hex sha is derived from the file names and contents when the
server scans the folder (at start, or on :meth:`HubServer.rescan`), like a git tree hash. A ref
``main`` that has no folder of its own points at the highest ``vN``. A request may name a ref or
a commit sha.

Routes (those huggingface_hub 2.x calls for ``snapshot_download``/``hf_hub_download``, plus the
metadata ones around them)::

    GET  /api/kernels/<org>/<name>[/revision/<rev>]        repo info: {"id", "sha", ...}
    GET  /api/kernels/<org>/<name>/tree/<rev>[/<path>]     listing (?recursive=true)
    POST /api/kernels/<org>/<name>/paths-info/<rev>        form: paths=...&paths=...
    GET  /api/kernels/<org>/<name>/refs                     branches (the ref folders)
    HEAD /kernels/<org>/<name>/resolve/<rev>/<path>         X-Repo-Commit, ETag, Content-Length
    GET  /kernels/<org>/<name>/resolve/<rev>/<path>         the bytes

and the write routes huggingface_hub 2.x calls for ``create_repo``/``create_branch``/``create_commit``
(what ``webgpu-kernels upload`` uses; each needs a token, and writes into ``ROOT`` and rescans)::

    POST /api/repos/create                                  JSON {name, organization, type: "kernel",
                                                            visibility}: ROOT/<org>/<name>/main/ with a
                                                            .gitattributes, as the Hub's first commit;
                                                            409 if it exists; "private": in `private`
    POST /api/kernels/<org>/<name>/branch/<branch>          JSON {startingPoint}: a copy of that revision
                                                            (main by default); 409 if it exists
    POST /api/kernels/<org>/<name>/preupload/<rev>          JSON {files: [{path, sample, size}]}: "lfs"
                                                            for a name the revision's .gitattributes
                                                            marks filter=lfs (as the Hub's default one
                                                            marks *.npy, *.npz), else "regular"; with
                                                            the oid of the file the revision holds at
                                                            that path (sha256 for LFS, else the git blob
                                                            sha: the client skips equal ones), and
                                                            shouldIgnore for a name the revision's
                                                            .gitignore ignores (the client leaves it
                                                            out of the commit, as it does on the Hub)
    POST /kernels/<org>/<name>.git/info/lfs/objects/batch   the git LFS batch API (basic transfer): an
                                                            upload href for each object not stored yet
    PUT  /lfs-upload/<sha256>                               the object's bytes (checked against the oid)
    POST /api/kernels/<org>/<name>/commit/<rev>             NDJSON: a header line {summary, description,
                                                            parentCommit}, then file (base64 content),
                                                            lfsFile (an uploaded object: {path, oid,
                                                            size}), deletedFile and deletedFolder lines,
                                                            applied to the branch's folder; 412 when
                                                            parentCommit is no longer the branch's commit

The Xet protocol (which huggingface_hub uses instead of LFS when hf_xet is installed) is not served:
a test that uploads an LFS file sets ``HF_HUB_DISABLE_XET``. A write without a token is answered 401; :attr:`HubServer.writers` limits who may write where (403
for another token); a repository is "private" to the token that created it so.

A repository in :attr:`HubServer.private` is answered only to its token, as the Hub answers a private
one (401, ``RepoNotFound``); one in :attr:`HubServer.gated` lists its files to anyone but serves them
only to its token (``GatedRepo``); with :attr:`HubServer.tokens` set, another token is "Invalid credentials".
:attr:`HubServer.commits` records every commit the write routes made (repository, branch, header, operations).

Errors carry the Hub's ``X-Error-Code`` header (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``), which the client turns into its typed errors. Files are read at request time
and their ETag is their git blob sha1, so a file changed on disk after the scan is served under
the *same* commit: that is how the tests simulate a tampered server. Every file, one
committed through LFS included, is served straight from ``resolve`` (no redirect to a CDN, no
X-Linked-Etag, no Xet).

Standard library only. Run it by hand: ``python tests/hub_server.py ROOT [--port N]``.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import json
import re
import shutil
import threading
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_VERSION = re.compile(r"^v([1-9][0-9]*)$")
#: An organisation, repository or branch name the write routes take (one plain path segment).
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")


#: The .gitattributes of a new repository: the LFS lines of the Hub's default one that a package's files may match.
DEFAULT_GITATTRIBUTES = "".join(f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n" for ext in ("bin", "npy", "npz", "safetensors"))


def _lfs_patterns(folder: Path) -> list[str]:
    """The patterns a revision's .gitattributes stores in LFS."""
    attributes = folder / ".gitattributes"
    lines = attributes.read_text(encoding="utf-8").splitlines() if attributes.is_file() else []
    return [line.split()[0] for line in lines if "filter=lfs" in line.split()[1:]]


def _stored_in_lfs(folder: Path, path: str) -> bool:
    return any(fnmatch.fnmatchcase(path if "/" in pattern else path.rsplit("/", 1)[-1], pattern)
               for pattern in _lfs_patterns(folder))  # fmt: skip


def _ignored(folder: Path, path: str) -> bool:
    """Whether a revision's .gitignore ignores ``path`` (its simple patterns: ``name``, ``*.ext``,
    ``folder/``, ``a/b*``)."""
    ignore = folder / ".gitignore"
    lines = ignore.read_text(encoding="utf-8").splitlines() if ignore.is_file() else []
    parts = path.split("/")
    for line in (line.strip() for line in lines):
        if not line or line.startswith(("#", "!")):
            continue
        if line.endswith("/"):  # a folder: any folder segment of the path
            if any(fnmatch.fnmatchcase(part, line.rstrip("/").lstrip("/")) for part in parts[:-1]):
                return True
        elif "/" in line.strip("/"):
            if fnmatch.fnmatchcase(path, line.lstrip("/")):
                return True
        elif any(fnmatch.fnmatchcase(part, line.lstrip("/")) for part in parts):
            return True
    return False


def _plain_path(path: str) -> bool:
    """A repository file path the write routes take: relative, no empty, '.' or '..' segment, no backslash."""
    parts = path.split("/")
    return bool(path) and "\\" not in path and "\x00" not in path and all(p not in ("", ".", "..") for p in parts)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's bytes (what the Hub sends as ETag of a non-LFS file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Revision:
    ref: str
    folder: Path
    commit: str


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: huggingface_hub's 8 download threads, each opening a
    # connection per request (HTTP/1.0 here), overflowed it, and Linux dropped the SYN that did not
    # fit, which the client sent again 1 s later (its first retransmission timeout): most downloads
    # of a package took 1.2 s instead of 0.2.
    request_queue_size = 128


class HubServer:
    """A threaded HTTP server speaking enough of the Hub API for downloads. Use as a context manager
    or with :meth:`start`/:meth:`stop`; :attr:`url` is the endpoint to put in ``HF_ENDPOINT``."""

    def __init__(self, root: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.root = Path(root)
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, in order
        #: repository -> the token that may read it (``Authorization: Bearer <token>``); without it the
        #: repository is answered as the Hub answers a private one: 401, ``X-Error-Code: RepoNotFound``.
        self.private: dict[str, str] = {}
        #: When not empty, the only tokens the server knows: another one is answered as the Hub answers a
        #: revoked or mistyped token, 401 "Invalid credentials in Authorization header", on every route.
        self.tokens: set[str] = set()
        #: repository -> the token granted access to it: its listing is public, its files are answered
        #: to another token as the Hub answers a gated repository (403, or 401 with no token; ``GatedRepo``).
        self.gated: dict[str, str] = {}
        #: organisation -> the tokens that may write to its repositories (create one, a branch, a
        #: commit); another token is answered 403, as the Hub answers a token without write access.
        #: An organisation not in it takes any token. A write without a token is answered 401.
        self.writers: dict[str, set[str]] = {}
        #: (repository, branch, header, [(operation, path)]) of every commit the commit route made.
        self.commits: list[tuple[str, str, dict, list[tuple[str, str]]]] = []
        #: write route ("create", "branch", "preupload", "commit", "lfs") -> (status, message) it answers
        #: instead (after the token is checked): a Hub that fails midway through an upload.
        self.failing: dict[str, tuple[int, str]] = {}
        #: sha256 -> the bytes of every LFS object uploaded (the LFS storage, shared by the repositories).
        self.lfs_objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._repos: dict[str, list[Revision]] = {}
        self.rescan()
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = _Server((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hub-server", daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the repositories -------------------------------------------------------------------------

    def rescan(self) -> None:
        """Recompute the refs and commit shas from the folder (after adding or changing revisions)."""
        repos: dict[str, list[Revision]] = {}
        if self.root.is_dir():
            for org in sorted(p for p in self.root.iterdir() if p.is_dir()):
                for repo in sorted(p for p in org.iterdir() if p.is_dir()):
                    revisions = [
                        Revision(ref.name, ref, self._tree_sha(f"{org.name}/{repo.name}", ref))
                        for ref in sorted(p for p in repo.iterdir() if p.is_dir())
                    ]
                    repos[f"{org.name}/{repo.name}"] = revisions
        with self._lock:
            self._repos = repos

    def revisions(self, repo_id: str) -> dict[str, str]:
        """{ref: commit sha} of a repository, ``main`` included."""
        with self._lock:
            revs = list(self._repos.get(repo_id, []))
        out = {r.ref: r.commit for r in revs}
        main = self._main(revs)
        if main is not None:
            out.setdefault("main", main.commit)
        return out

    def commit_of(self, repo_id: str, ref: str) -> str:
        return self.revisions(repo_id)[ref]

    @staticmethod
    def _tree_sha(repo_id: str, folder: Path) -> str:
        h = hashlib.sha1(repo_id.encode())
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            h.update(b"\0" + path.relative_to(folder).as_posix().encode() + b"\0")
            h.update(git_blob_sha1(path.read_bytes()).encode())
        return h.hexdigest()

    @staticmethod
    def _main(revs: list[Revision]) -> Revision | None:
        by_name = {r.ref: r for r in revs}
        if "main" in by_name:
            return by_name["main"]
        versions = [r for r in revs if _VERSION.match(r.ref)]
        return max(versions, key=lambda r: int(r.ref[1:])) if versions else None

    def _lookup(self, repo_id: str, rev: str) -> Revision | None | bool:
        """The revision, None if the repository is unknown, False if the revision is."""
        with self._lock:
            revs = self._repos.get(repo_id)
        if revs is None:
            return None
        for r in revs:
            if r.ref == rev or r.commit == rev:
                return r
        if rev == "main":
            return self._main(revs) or False
        return False


def _entries(folder: Path, path: str, *, recursive: bool) -> list[dict] | None:
    """Tree entries under ``path`` of a revision folder (None if there is no such folder)."""
    base = folder / path if path else folder
    if not base.is_dir() or (path and ".." in Path(path).parts):
        return None
    items = base.rglob("*") if recursive else base.iterdir()
    out = []
    for p in sorted(items):
        out.append(_entry(folder, p))
    return out


def _entry(folder: Path, p: Path) -> dict:
    rel = p.relative_to(folder).as_posix()
    if p.is_dir():
        return {"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": 0, "path": rel}
    data = p.read_bytes()
    return {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": rel}


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    server_version = "hub-server/1"
    # HTTP/1.0: one request per connection, so that stop() really ends the service.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        pass

    # --- dispatch ---------------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        with self.hub._lock:
            self.hub.requests.append((method, url.path))
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        query = parse_qs(url.query)
        try:
            if self._refused(segments):
                return
            if segments == ["api", "repos", "create"] and method == "POST":
                self._create_repo()
            elif segments[:2] == ["api", "kernels"] and len(segments) >= 4:
                self._api(method, f"{segments[2]}/{segments[3]}", segments[4:], query)
            elif (method == "POST" and segments[:1] == ["kernels"] and len(segments) == 7 and segments[2].endswith(".git")
                  and segments[3:] == ["info", "lfs", "objects", "batch"]):  # fmt: skip
                self._lfs_batch(f"{segments[1]}/{segments[2].removesuffix('.git')}")
            elif method == "PUT" and len(segments) == 2 and segments[0] == "lfs-upload":
                self._lfs_upload(segments[1])
            elif segments[:1] == ["kernels"] and len(segments) >= 6 and segments[3] == "resolve":
                self._resolve(method, f"{segments[1]}/{segments[2]}", segments[4], "/".join(segments[5:]))
            elif segments[:1] == ["api"]:
                self._error(404, "RepoNotFound", "Repository not found")
            else:
                self._error(404, None, "Not found")
        except BrokenPipeError:  # the client went away
            pass

    def _refused(self, segments: list[str]) -> bool:
        """Answer as the Hub does a token it does not know, or a private repository asked without its
        token (True: answered)."""
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        if self.hub.tokens and token is not None and token not in self.hub.tokens:
            self._error(401, None, "Invalid credentials in Authorization header")
            return True
        offset = 2 if segments[:2] == ["api", "kernels"] else 1 if segments[:1] == ["kernels"] else None
        repo_id = "/".join(segments[offset : offset + 2]) if offset is not None else ""
        needed = self.hub.private.get(repo_id)
        if needed is not None and token != needed:
            self._error(401, "RepoNotFound", "Repository not found")
            return True
        granted = self.hub.gated.get(repo_id)
        if granted is not None and offset == 1 and token != granted:
            self._error(401 if token is None else 403, "GatedRepo", f"Access to kernel {repo_id} is restricted")
            return True
        return False

    # --- /api/kernels/... -------------------------------------------------------------------------

    def _api(self, method: str, repo_id: str, rest: list[str], query: dict) -> None:
        if method == "POST" and len(rest) == 2 and rest[0] in ("branch", "preupload", "commit"):
            return self._write(rest[0], repo_id, rest[1])
        if rest == ["refs"] and method == "GET":
            revs = self.hub.revisions(repo_id)
            if not revs:
                return self._error(404, "RepoNotFound", "Repository not found")
            branches = [{"name": r, "ref": f"refs/heads/{r}", "targetCommit": c} for r, c in sorted(revs.items())]
            return self._json({"branches": branches, "tags": [], "converts": [], "pullRequests": []})
        if method == "POST" and len(rest) == 2 and rest[0] == "paths-info":
            rev = self._revision(repo_id, rest[1])
            if rev is None:
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode()) if length else {}
            out = []
            for path in form.get("paths", []):
                p = rev.folder / path
                if path and ".." not in Path(path).parts and p.exists():
                    out.append(_entry(rev.folder, p))
            return self._json(out, commit=rev.commit)
        if method != "GET":
            return self._error(405, None, "Method not allowed")
        if rest == [] or (len(rest) == 2 and rest[0] == "revision"):
            rev = self._revision(repo_id, rest[1] if rest else "main")
            if rev is None:
                return
            # Like the Hub's kernel info: no "siblings" (clients list files with the tree route).
            info = {
                "id": repo_id, "author": repo_id.split("/")[0], "sha": rev.commit, "private": False,
                "gated": False, "downloads": 0, "likes": 0, "lastModified": "2026-09-01T00:00:00.000Z",
            }  # fmt: skip
            return self._json(info, commit=rev.commit)
        if len(rest) >= 2 and rest[0] == "tree":
            rev = self._revision(repo_id, rest[1])
            if rev is None:
                return
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            entries = _entries(rev.folder, "/".join(rest[2:]), recursive=recursive)
            if entries is None:
                return self._error(404, "EntryNotFound", "Entry not found", commit=rev.commit)
            return self._json(entries, commit=rev.commit)
        return self._error(404, None, "Not found")

    # --- /kernels/<repo>/resolve/<rev>/<path> -----------------------------------------------------

    def _resolve(self, method: str, repo_id: str, rev_name: str, path: str) -> None:
        if method not in ("GET", "HEAD"):
            return self._error(405, None, "Method not allowed")
        rev = self._revision(repo_id, rev_name)
        if rev is None:
            return
        file = rev.folder / path
        if not path or ".." in Path(path).parts or not file.is_file():
            return self._error(404, "EntryNotFound", f"{path} does not exist at {rev_name}", commit=rev.commit)
        data = file.read_bytes()
        etag = git_blob_sha1(data)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", rev.commit)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Last-Modified", formatdate(usegmt=True))
        self.end_headers()
        if method == "GET":
            self.wfile.write(data)

    # --- the write routes -------------------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _may_write(self, org: str) -> bool:
        """Answer a write without a token (401) or by a token without write access there (403);
        True: it may go on."""
        token = self._token()
        if token is None:
            self._error(401, None, "You must be authenticated to write to a repository")
            return False
        allowed = self.hub.writers.get(org)
        if allowed is not None and token not in allowed:
            self._error(403, None, f"You don't have the rights to write to {org}")
            return False
        return True

    def _create_repo(self) -> None:
        try:
            payload = json.loads(self._body() or b"{}")
        except ValueError:
            return self._error(400, None, "Invalid JSON")
        org, name = payload.get("organization"), payload.get("name")
        if payload.get("type") != "kernel" or not isinstance(org, str) or not isinstance(name, str):
            return self._error(400, None, "This server creates kernel repositories of an organisation only")
        if not _SEGMENT.match(org) or not _SEGMENT.match(name):
            return self._error(400, None, "Invalid repository name")
        if not self._may_write(org) or self._failed("create"):
            return None
        repo_id = f"{org}/{name}"
        folder = self.hub.root / org / name
        if folder.exists():
            return self._error(409, None, "You already created this kernel repository", body={"url": self._repo_url(repo_id)})
        (folder / "main").mkdir(parents=True)
        (folder / "main" / ".gitattributes").write_text(DEFAULT_GITATTRIBUTES, encoding="utf-8")
        if payload.get("visibility") == "private":
            self.hub.private[repo_id] = self._token() or ""
        self.hub.rescan()
        return self._json({"url": self._repo_url(repo_id), "name": repo_id, "id": repo_id})

    def _repo_url(self, repo_id: str) -> str:
        return f"{self.hub.url}/kernels/{repo_id}"

    def _failed(self, route: str) -> bool:
        """Answer with the error :attr:`HubServer.failing` names for this route (True: answered)."""
        failure = self.hub.failing.get(route)
        if failure is not None:
            self._error(failure[0], None, failure[1])
        return failure is not None

    def _write(self, route: str, repo_id: str, rev_name: str) -> None:
        if not self._may_write(repo_id.split("/")[0]) or self._failed(route):
            return None
        if route == "branch":
            return self._create_branch(repo_id, rev_name)
        rev = self._revision(repo_id, rev_name)
        if rev is None:
            return None
        if route == "preupload":
            try:
                files = json.loads(self._body() or b"{}").get("files", [])
            except (ValueError, AttributeError):
                return self._error(400, None, "Invalid JSON")
            out = []
            for f in files:
                path = f.get("path", "") if isinstance(f, dict) else ""
                target = rev.folder / path
                lfs = _plain_path(path) and _stored_in_lfs(rev.folder, path)
                oid = None
                if _plain_path(path) and target.is_file():
                    data = target.read_bytes()
                    oid = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
                out.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "oid": oid,
                            "shouldIgnore": _plain_path(path) and _ignored(rev.folder, path)})  # fmt: skip
            return self._json({"files": out, "commitOid": rev.commit})
        return self._commit(repo_id, rev_name, rev)

    def _lfs_batch(self, repo_id: str) -> None:
        """The LFS batch API's upload operation: where to PUT each object the storage lacks."""
        if not self._may_write(repo_id.split("/")[0]) or self._failed("lfs"):
            return None
        try:
            payload = json.loads(self._body() or b"{}")
        except ValueError:
            return self._error(400, None, "Invalid JSON")
        if payload.get("operation") != "upload" or "basic" not in payload.get("transfers", ["basic"]):
            return self._error(400, None, "This server takes basic LFS uploads only")
        objects = []
        for obj in payload.get("objects", []):
            oid, size = obj.get("oid"), obj.get("size")
            entry = {"oid": oid, "size": size, "authenticated": True}
            if oid not in self.hub.lfs_objects:
                entry["actions"] = {"upload": {"href": f"{self.hub.url}/lfs-upload/{oid}"}}
            objects.append(entry)
        return self._json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def _lfs_upload(self, oid: str) -> None:
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            return self._error(400, None, "The object's bytes do not match its oid")
        with self.hub._lock:
            self.hub.lfs_objects[oid] = data
        return self._json({})

    def _create_branch(self, repo_id: str, branch: str) -> None:
        found = self.hub._lookup(repo_id, "main")
        if found is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if not _SEGMENT.match(branch):
            return self._error(400, None, f"Invalid branch name: {branch}")
        try:
            start = json.loads(self._body() or b"{}").get("startingPoint") or "main"
        except (ValueError, AttributeError):
            return self._error(400, None, "Invalid JSON")
        target = self.hub.root / repo_id / branch
        if target.exists() or branch in self.hub.revisions(repo_id):
            return self._error(409, None, f"Reference already exists: refs/heads/{branch}")
        source = self.hub._lookup(repo_id, start)
        if isinstance(source, Revision):
            shutil.copytree(source.folder, target)
        elif start == "main":
            target.mkdir(parents=True)  # a repository with no commit yet
        else:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {start}")
        self.hub.rescan()
        return self._json({})

    def _commit(self, repo_id: str, rev_name: str, rev: Revision) -> None:
        if rev.ref != rev_name:  # a commit sha, or main with no folder of its own
            return self._error(400, None, f"Cannot commit to {rev_name}: not a branch of its own")
        try:
            lines = [json.loads(line) for line in self._body().decode().splitlines() if line.strip()]
        except ValueError:
            return self._error(400, None, "Invalid NDJSON")
        header = next((line["value"] for line in lines if line.get("key") == "header"), None)
        if not isinstance(header, dict) or not header.get("summary"):
            return self._error(400, None, "A commit needs a header line with a summary")
        parent = header.get("parentCommit")
        if parent is not None and parent != rev.commit:
            return self._error(412, None, "A commit has happened since. Please refresh and try again.")
        operations: list[tuple[str, str, bytes | None]] = []
        for line in lines:
            key, value = line.get("key"), line.get("value") or {}
            if key == "header":
                continue
            path = value.get("path", "") if isinstance(value, dict) else ""
            if key not in ("file", "lfsFile", "deletedFile", "deletedFolder"):
                return self._error(400, None, f"This server takes no {key!r} lines (no copies)")
            if not _plain_path(path.rstrip("/") if key == "deletedFolder" else path):
                return self._error(400, None, f"Invalid path: {path!r}")
            if key == "file":
                if value.get("encoding") != "base64":
                    return self._error(400, None, "file content must be base64")
                operations.append((key, path, base64.b64decode(value.get("content", ""))))
            elif key == "lfsFile":
                data = self.hub.lfs_objects.get(value.get("oid", ""))
                if data is None or value.get("algo") != "sha256" or value.get("size") != len(data):
                    return self._error(400, None, f"LFS object {value.get('oid')} of {path} was not uploaded")
                operations.append((key, path, data))
            else:
                target = rev.folder / path.rstrip("/")
                if not (target.is_dir() if key == "deletedFolder" else target.is_file()):
                    return self._error(404, "EntryNotFound", "A file with this name doesn't exist")
                operations.append((key, path.rstrip("/"), None))
        for key, path, data in operations:  # all checked: applied together
            target = rev.folder / path
            if key in ("file", "lfsFile"):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data or b"")
            elif key == "deletedFolder":
                shutil.rmtree(target)
            else:
                target.unlink()
                for parent_dir in target.parents:  # git keeps no empty folder
                    if parent_dir == rev.folder or any(parent_dir.iterdir()):
                        break
                    parent_dir.rmdir()
        with self.hub._lock:
            self.hub.commits.append((repo_id, rev_name, header, [(k, p) for k, p, _ in operations]))
        self.hub.rescan()
        commit = self.hub.commit_of(repo_id, rev_name)
        return self._json({"success": True, "commitOid": commit, "commitUrl": f"{self._repo_url(repo_id)}/commit/{commit}",
                           "hookOutput": ""}, commit=commit)  # fmt: skip

    # --- helpers ----------------------------------------------------------------------------------

    def _revision(self, repo_id: str, rev: str) -> Revision | None:
        found = self.hub._lookup(repo_id, rev)
        if found is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if found is False:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return found

    def _json(self, value: object, *, commit: str | None = None) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None, message: str, *, commit: str | None = None,
               body: dict | None = None) -> None:  # fmt: skip
        data = json.dumps({"error": message, **(body or {})}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def main() -> None:  # pragma: no cover - manual use
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="folder of <org>/<name>/<ref>/ repositories")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = HubServer(args.root, host=args.host, port=args.port)
    for repo in sorted(server._repos):
        for ref, commit in sorted(server.revisions(repo).items()):
            print(f"{repo}@{ref} = {commit}", flush=True)
    print(f"serving {args.root} at {server.url} (HF_ENDPOINT={server.url})", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":  # pragma: no cover
    main()

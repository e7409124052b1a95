"""`webgpu-kernels download` and `upload`: a kernel package from and to the Hugging Face Hub.

The same path as ``get_kernel("org/op", version=N)``: huggingface_hub downloads ``build/webgpu/``
of the kernel repository at revision ``vN`` (or ``--revision``) into the Hugging Face cache
(``HF_HOME``/``HF_HUB_CACHE``; ``HF_ENDPOINT`` picks the Hub; ``HF_HUB_OFFLINE=1`` uses the cache
only), every file is checked against ``metadata.json`` and the manifest is parsed. It prints where
the package landed, its op id and the verified digests.

``download --lock`` fetches every commit a project's ``webgpu-kernels.lock`` pins, and ``lock
[PROJECT_DIR]`` writes that file from the project's pyproject.toml (hub_lock.py).

``upload PATH REPO`` publishes a package folder as revision vN of a kernel repository
(hub_upload.py): refused before any request unless it validates and its metadata.json is current.
"""

from __future__ import annotations

import click
from rich.text import Text

from . import hub, hub_lock, hub_upload, locations
from .cli import adapter_option, adapter_request_of
from .command_output import echo_json, safe_console
from .errors import PackageError
from .kernel import Kernel
from .kernel_arguments import hub_pin, hub_source, served_from, source_text, split_pin, trust_option, trusting


@click.command("download")
@click.argument("repo", required=False)
@click.option("--version", "version", type=click.IntRange(min=1), default=None, metavar="N",
              help="Contract version: fetches revision vN.")  # fmt: skip
@click.option("--revision", default=None, metavar="REV",
              help="A branch, tag or commit sha to pin instead (overrides --version).")  # fmt: skip
@trust_option
@click.option("--expected-op-id", default=None, metavar="OP_ID",
              help="Refuse the package unless its manifest is this op.")  # fmt: skip
@click.option("--lock", "lock", is_flag=False, flag_value="", default=None, metavar="[PROJECT_DIR]",
              help="Instead of REPO: fetch every commit the project's webgpu-kernels.lock pins (PROJECT_DIR's, or "
                   "a lock file; without it, the first one in this folder or above).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def download_cmd(repo: str | None, version: int | None, revision: str | None, expected_op_id: str | None,
                 lock: str | None, as_json: bool) -> None:  # fmt: skip
    """Download kernel repository REPO ('org/op', 'org/op@vN' or https://<hub>/kernels/org/op) from the Hub.

    With --lock instead of REPO: every commit a project's webgpu-kernels.lock pins (written by `lock`),
    for a cache that later runs offline.

    Example: webgpu-kernels download webgpu-kernels/com.microsoft.QuickGelu --version 1
    """
    if lock is not None:
        if repo is not None or version is not None or revision is not None or expected_op_id is not None:
            raise click.UsageError("--lock fetches what the lock file pins: leave out REPO, --version, --revision and "
                                   "--expected-op-id (a project folder goes after --lock: --lock PROJECT_DIR)")  # fmt: skip
        _download_locked(lock, as_json=as_json)
        return
    if repo is None:
        raise click.UsageError("give REPO ('org/op'), or --lock for the kernels a project's lock file pins")
    # org/op@vN or org/op@REV, as every KERNEL argument takes it; a URL's too (an @ in its path, not
    # in a user@host): https://<hub>/kernels/org/op@v1 had been refused with advice for Python
    given = repo
    repo, pin = split_pin(repo)
    location = locations.classify(repo)  # first: it refuses credentials in a URL without showing them
    if repo != given:  # an @ part was there
        if version is not None or revision is not None:
            raise click.UsageError(f"{given!r} names its revision: leave out --version and --revision, or the @ part")
        version, revision = hub_pin(pin)
    if location.kind != "hub":
        meant = locations.slashed_repo_id(repo)  # `org/op/`, from a browser's URL path: a folder or not, download
        hint = f" (did you mean {meant}?)" if meant else ""  # takes only a repository
        raise click.BadParameter(f"expected a Hub kernel repository 'org/op' or https://<hub>/kernels/org/op{hint}",
                                 param_hint="REPO")  # fmt: skip
    if version is None and revision is None:
        raise click.UsageError("give --version N (revision vN) or --revision REV")
    trust_remote_code = trusting()  # before the command or after it
    locations.check_trust(location, trust_remote_code=trust_remote_code, shown=repo)
    kernel = hub.load(location.value, version=version, revision=revision, trust_remote_code=trust_remote_code,
                      endpoint=location.endpoint, url_like=location.url_like)  # fmt: skip
    hub.check_op_id(kernel, expected_op_id, repo)
    info = _info(kernel, offline=hub.hub_offline())
    if as_json:
        echo_json(info)
        return
    console = safe_console()

    def print_(text: str) -> None:
        console.print(text, soft_wrap=True)

    print_(source_text(info))
    print_(f"package: {info['path']}")
    print_(f"op: {info['op']} (contract version {info['version']}), variants: {', '.join(info['variants'])}")
    if info["needsTrust"]:
        print_("trust: loaded with trust_remote_code (`test` runs its GPU work in a child process by default; "
               "`run`, `bench` and `tune` in their own)")
    print_(f"sha256 verified against metadata.json ({len(info['digests'])} files):")
    for name, digest in info["digests"].items():
        print_(f"  {digest}  {name}")


def _download_locked(lock: str, *, as_json: bool) -> None:
    path, kernels = hub_lock.download_locked(lock or None, trust_remote_code=trusting())
    offline = hub.hub_offline()
    infos = [_info(kernel, offline=offline) for kernel in kernels]
    if as_json:
        echo_json({"lockfile": str(path), "kernels": infos})
        return
    console = safe_console()
    for info in infos:
        console.print(Text(f"{info['repo']} v{info['version']} -> commit {info['commit']} (from {served_from(info)})"),
                      soft_wrap=True)  # fmt: skip
        console.print(Text(f"  package: {info['path']}"), soft_wrap=True)
    console.print(Text(f"{len(infos)} locked kernel{'s' if len(infos) != 1 else ''} of {path} in the cache, "
                       "sha256 verified"), soft_wrap=True)  # fmt: skip


@click.command("lock")
@click.argument("project_dir", default=".", metavar="[PROJECT_DIR]")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 unless the lock file lists what pyproject.toml lists and each branch vN "
                   "is still the locked commit on the Hub (with HF_HUB_OFFLINE, the Hub is not asked).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def lock_cmd(project_dir: str, check: bool, as_json: bool) -> None:
    """Pin the Hub kernels of PROJECT_DIR's pyproject.toml in PROJECT_DIR/webgpu-kernels.lock.

    Each "org/op" = N of [tool.webgpu-kernels.dependencies] is resolved to the commit its branch vN
    is now; the lock file records it with the sha256 of that commit's metadata.json.
    get_locked_kernel("org/op") then opens exactly that commit. --check, for CI, only compares.

    Example: webgpu-kernels lock .
    """
    if check:
        _check_lock(project_dir, as_json=as_json)
        return
    result = hub_lock.lock_project(project_dir)
    if as_json:
        echo_json({"path": str(result.path), "changed": result.changed,
                    "kernels": [entry.as_dict() for entry in result.entries]})  # fmt: skip
        return
    console = safe_console()
    for entry in result.entries:
        console.print(Text(f"{entry.repo} v{entry.version} -> commit {entry.commit} "
                           f"({hub_lock.METADATA_FILE} sha256 {entry.metadata_sha256})"), soft_wrap=True)  # fmt: skip
    console.print(Text(f"{'wrote' if result.changed else 'unchanged:'} {result.path}"), soft_wrap=True)


def _check_lock(project_dir: str, *, as_json: bool) -> None:
    result = hub_lock.check_lock(project_dir)
    if as_json:
        echo_json({"path": str(result.path), "upToDate": result.up_to_date, "lockFound": result.lock_found,
                    "hubAsked": result.hub_asked, "endpoint": result.endpoint,
                    "differences": [d.as_dict() for d in result.differences]})  # fmt: skip
    else:
        console = safe_console()
        # what was compared: a CI log must not read "matches" as "matches the Hub" when it was not asked
        against = f"{hub_lock.PYPROJECT} and {result.endpoint}" if result.hub_asked else hub_lock.PYPROJECT
        not_asked = "" if result.hub_asked else "; the Hub was not asked (HF_HUB_OFFLINE is set): a moved branch is not seen"
        if result.up_to_date:
            count = len(result.entries)
            console.print(Text(f"{result.path} matches {against} ({count} kernel{'s' if count != 1 else ''})"
                               f"{not_asked}"), soft_wrap=True)  # fmt: skip
            return
        head = (f"{result.path} does not match {against}{not_asked}:" if result.lock_found else
                f"no lock file {result.path}{not_asked}:")  # fmt: skip
        console.print(Text(head), soft_wrap=True)
        for difference in result.differences:
            console.print(Text(f"  {difference.describe(result.endpoint or '')}"), soft_wrap=True)
        console.print(Text(f"run `webgpu-kernels lock {project_dir}` to lock what {hub_lock.PYPROJECT} lists now "
                           "(and review what changed)"), soft_wrap=True)  # fmt: skip
    if not result.up_to_date:
        click.get_current_context().exit(1)


def _info(kernel: Kernel, *, offline: bool) -> dict:
    package = kernel.package
    if not isinstance(package, hub.HubPackage):  # pragma: no cover - hub.load only makes HubPackages
        raise PackageError("not a Hub package")
    return {
        **hub_source(package), "offline": offline, "path": str(package.root), "op": kernel.op_id,
        "version": kernel.contract_version, "variants": kernel.variants,
        "needsTrust": package.needs_trust, "digests": dict(sorted(package.digests.items())),
    }  # fmt: skip


@click.command("upload")
@adapter_option
@click.argument("path", metavar="PATH")
@click.argument("repo", metavar="REPO")
@click.option("--version", "version", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse unless metadata.json's contract version is N (it is published as revision vN).")  # fmt: skip
@click.option("--private", is_flag=True, help="Create the repository private (an existing one keeps its visibility).")
@click.option("--message", default=None, metavar="TEXT", help="The commit message (default: names the op and version).")
@click.option("--any-name", is_flag=True, help="Allow a repository name other than the package's op id.")
@click.option("--dry-run", is_flag=True, help="Check the package and list what would be uploaded; send nothing.")
@click.option("--follow-outside-links", is_flag=True,
              help="Publish files that lead outside PATH, symbolic links to files outside it and hard links with a "
                   "name outside it (refused by default; a Hugging Face cache snapshot is made of such symbolic "
                   "links); the output names them.")  # fmt: skip
@click.option("--allow-incompatible", is_flag=True,
              help="Replace the contract revision vN holds with an incompatible one (a call that worked may now be "
                   "refused or compute something else), with a warning; refused by default: publish it as N+1.")  # fmt: skip
@click.option("--gpu/--no-gpu", default=True, show_default=True,
              help="Validate with the GPU stage (render and compile every variant x dtype), as validate does.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def upload_cmd(ctx: click.Context, path: str, repo: str, version: int | None, private: bool, message: str | None,
               any_name: bool, dry_run: bool, follow_outside_links: bool, allow_incompatible: bool, gpu: bool,
               as_json: bool) -> None:  # fmt: skip
    """Publish the package folder PATH as revision vN of the Hub kernel repository REPO ('org/op').

    N is metadata.json's contract version. Refused, before anything is sent, unless `validate PATH`
    finds no error, metadata.json is current (`digest PATH`), REPO's name is the op id and no file
    leads outside PATH, a symbolic link to a file outside it or a hard link with a name outside it
    (unless --follow-outside-links, whose files are then listed). Where vN holds a package, a
    contract change that may break its users' calls is refused (unless --allow-incompatible). Uploads
    the files metadata.json lists, and metadata.json, to build/webgpu/ in one commit (deleting what
    else was there), then downloads that commit and checks its digests. HF_ENDPOINT picks the Hub;
    the token is HF_TOKEN or huggingface_hub's login.

    Example: webgpu-kernels upload ./com.example.MyOp my-org/com.example.MyOp
    """
    result = hub_upload.upload_package(path, repo, version=version, private=private, message=message,
                                       any_name=any_name, dry_run=dry_run, gpu=gpu, adapter=adapter_request_of(ctx),
                                       follow_outside_links=follow_outside_links,
                                       allow_incompatible=allow_incompatible)  # fmt: skip
    if as_json:
        echo_json(result.as_dict())
        return
    for warning in result.warnings:  # validate's: they do not stop the upload
        safe_console(stderr=True).print(Text("warning: " + warning, style="yellow"), soft_wrap=True)
    console = safe_console()
    for line in hub_upload.describe(result):
        console.print(Text(line), soft_wrap=True)


COMMANDS = [download_cmd, lock_cmd, upload_cmd]

"""`patchkit workspace`: a git repository of a release's stock files with its series applied."""

from __future__ import annotations

import shlex
from pathlib import Path

from patchkit import fetch
from patchkit.base.errors import BadInput, Conflict
from patchkit.maintainer.gitrepo import commit_all, init_repo
from patchkit.maintainer.meta import META, STOCK_TAG, WorkspaceMeta, record_of
from patchkit.maintainer.reports import WorkspaceReport
from patchkit.maintainer.series import series_directory, series_for, shared_releases, why_not_applied
from patchkit.maintainer.stock import Progress, stock_paths
from patchkit.maintainer.workdir import fresh_dir, write_file
from patchkit.releases.files import lay_out
from patchkit.series.library import load_chosen, refuse_the_installed
from patchkit.series.plan import plan_apply
from patchkit.tree.version import parse


def create_workspace(
    version: str,
    directory: str | None = None,
    *,
    library: str | None = None,
    set_name: str | None = None,
    all_python: bool = False,
    progress: Progress | None = None,
) -> WorkspaceReport:
    patch_set = load_chosen(library, set_name)
    ver = parse(version, "VERSION")
    # before the fetch and the directory: the same command on a copy then runs as printed
    again = ["workspace", version, *([directory] if directory else []), "--set", patch_set.name]
    refuse_the_installed(patch_set.directory, again + (["--all"] if all_python else []))
    selection = series_for(patch_set, ver)
    series_dir = series_directory(selection)
    paths = stock_paths(selection.patches)
    tree = fetch.release_tree(str(ver), paths, all_python=all_python, progress=progress)
    names = [p.name for p in selection.patches]
    with fresh_dir(Path(directory or f"vllm-{ver}-workspace")) as dest:
        wanted = paths + ([f.relative_to(tree).as_posix() for f in (tree / "vllm").rglob("*.py")] if all_python else [])
        copied = sum(1 for rel in lay_out(tree, dest, wanted) if rel.startswith("vllm/"))
        plan = plan_apply(dest, selection.patches)
        if plan.conflicts:
            raise Conflict(
                f"the library's series does not apply to stock vLLM {ver}: {why_not_applied(plan.conflicts[0])}"
            )
        repo = init_repo(dest)
        stock = commit_all(repo, f"stock vllm {ver}")
        repo.create_tag(STOCK_TAG, ref=stock)
        for path, (_, after) in plan.changes.items():
            write_file(dest, path, after)
        patched = commit_all(repo, f"{patch_set.name} series for vllm {ver}\n\n" + "\n".join(names) + "\n")
        WorkspaceMeta(
            patch_set.name,
            str(patch_set.directory.resolve()),
            str(ver),
            list(patch_set.roots),
            str(series_dir.resolve()),
            stock,
            [record_of(p) for p in selection.patches],
            all_python=all_python,
        ).save(dest)
    return WorkspaceReport(
        str(dest),
        patch_set.name,
        str(ver),
        str(series_dir),
        copied,
        stock,
        patched,
        names,
        shared_releases(patch_set, series_dir, ver),
    )


def find_workspace(directory: str | None) -> Path:
    """The workspace holding DIR (DIR itself or a parent), by its record file."""
    start = Path(directory or ".").resolve()
    for candidate in (start, *start.parents):
        if (candidate / META).is_file():
            return candidate
    below = _workspaces_in(start)
    if below:  # one directory above a workspace: the one it means
        named = ", ".join(str(p) for p in below)
        raise BadInput(
            f"{start} is not inside a patchkit workspace (no {META}); it holds {named}",
            hint=f"give the workspace: `patchkit refresh {shlex.quote(str(below[0]))}`",
        )
    raise BadInput(
        f"{start} is not inside a patchkit workspace (no {META})", hint="create one with `patchkit workspace VERSION`"
    )


LOOKED_BELOW = 1000  # the most entries of a directory looked at for a workspace in it (a large /tmp)


def _workspaces_in(directory: Path) -> list[Path]:
    """The workspaces directly in `directory` (a few, by name): where refresh was run one level up."""
    found = []
    try:
        for _, child in zip(range(LOOKED_BELOW), directory.iterdir(), strict=False):
            if (child / META).is_file():
                found.append(child)
    except OSError:  # unreadable: nothing to name
        return []
    return sorted(found)[:3]

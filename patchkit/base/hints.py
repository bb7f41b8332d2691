"""Every hint that names a patchkit command is spelled here, and carries the user's selection.

A hint is followed as written: `patchkit apply` where the user had given `--target /x --set S`
would act on another tree or another set, and that command's own hint would send them back. So a
command named in a hint gets what the user chose: the tree (--target and/or --python; for
preflight and run, the launch's interpreter when neither was given), --vllm-version, the library
(--patches) and the set (--set) or the ad-hoc patches (--patch), each only where that command
takes it. The command line sets the selection once per command (`selected`, in the CLI's option
wrapper), so a hint built in any layer below knows it; a hint about another selection (another
set's record, a fleet node's tree) passes its own (`chosen`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from patchkit.base.options import Options

_SELECTION: ContextVar[Options | None] = ContextVar("patchkit_selection", default=None)
# the interpreter of the tree the command works on, where patchkit found it without --python (the
# one running patchkit, a venv's own beside its site-packages): a pip hint runs it
_INTERPRETER: ContextVar[str | None] = ContextVar("patchkit_interpreter", default=None)
# a patched wheel's installed version -> the release it was built from, as its provenance and its
# dist-info's name agree (any label: `--local-label corp1`'s, which release_of cannot tell by its words)
_RELEASES: ContextVar[dict[str, str] | None] = ContextVar("patchkit_releases", default=None)

# What each command takes of the selection (cli/commands: target_options(without=...)); a verb not
# listed takes none of it (workspace, refresh...).
_TREE = ("target_dir", "python")
_SET = (*_TREE, "vllm_version", "library", "set_name")
_TAKES: dict[str, tuple[str, ...]] = {
    **{verb: (*_SET, "adhoc") for verb in ("status", "apply", "verify", "revert", "preflight", "run")},
    "diff": _SET,
    "recover": _TREE,
    "fetch": ("library", "set_name"),  # which files a set needs
    "list": ("library",),
    "wheel": ("library", "set_name", "adhoc"),  # builds from a wheel file: no tree
    "port": ("library", "set_name"),  # which set's series, from the stock releases
    "fleet": (*_SET, "adhoc"),  # the nodes' trees (paths on the nodes) and the set
}
_LIBRARY_SETS_ONLY = ("fetch", "port")
_ADHOC = "adhoc-"  # store.state.ADHOC_PREFIX: the record's name of a --patch apply
_FLAGS = {
    "target_dir": "--target",
    "python": "--python",
    "vllm_version": "--vllm-version",
    "library": "--patches",
    "set_name": "--set",
}


@contextmanager
def selected(opts: Options) -> Iterator[None]:
    """The user's selection for every hint built inside (one command's run)."""
    token, known, releases = _SELECTION.set(opts), _INTERPRETER.set(None), _RELEASES.set({})
    try:
        yield
    finally:
        _RELEASES.reset(releases)
        _INTERPRETER.reset(known)
        _SELECTION.reset(token)


def knows_release(installed: object, release: str) -> None:
    """The installed patched wheel's version and the release it was built from (its provenance's,
    held to its dist-info's name): release_of gives that release for it, in this command."""
    known = _RELEASES.get()
    if known is not None:
        known[_spelled(installed)] = release


def knows_interpreter(python: str | None) -> None:
    """The interpreter that runs the tree this command works on, found without --python."""
    _INTERPRETER.set(python)


def current() -> Options:
    """The selection the running command was given (empty outside one)."""
    return _SELECTION.get() or Options()


def command(verb: str, *args: str, chosen: Options | None = None) -> str:
    """`patchkit VERB [selection] ARGS` in backquotes, with the selection (`chosen`, else the
    user's) as that command takes it, before ARGS (which may hold `--`); every word shell-quoted,
    so it can be pasted. Its paths are absolute: a fix is pasted in another shell or directory too."""
    return "`" + shlex.join(command_words(verb, *args, chosen=chosen)) + "`"


def command_words(verb: str, *args: str, chosen: Options | None = None) -> list[str]:
    """command()'s words, unquoted: for a hint that puts words of its own before them."""
    selection = from_anywhere(current() if chosen is None else chosen)
    words = ["patchkit", *verb.split()]
    takes = _TAKES.get(verb.split()[0], ())
    for field, flag in _FLAGS.items():
        value = getattr(selection, field)
        if field == "set_name" and verb in _LIBRARY_SETS_ONLY and str(value).startswith(_ADHOC):
            continue  # an ad-hoc record's name: no library holds such a set
        if field in takes and value:
            words += [flag, value]
    if "adhoc" in takes:
        for patch in selection.adhoc:
            words += ["--patch", patch]
    return [*words, *args]


def from_anywhere(chosen: Options | None = None) -> Options:
    """The selection (default: the user's) with its paths made absolute: for a hint that changes
    directory first (`cd DIR && patchkit ...`). A bare --python (a name looked up on PATH) stays."""
    selection = current() if chosen is None else chosen

    def absolute(path: str | None) -> str | None:
        return os.path.abspath(path) if path else path

    python = selection.python
    return replace(
        selection,
        target_dir=absolute(selection.target_dir),
        python=absolute(python) if python and os.sep in python else python,
        library=absolute(selection.library),
        adhoc=tuple(os.path.abspath(p) for p in selection.adhoc),
    )


def for_set(set_name: str | None, adhoc: tuple[str, ...] = (), library: str | None = None) -> Options:
    """The user's selection of tree and library with another set (or ad-hoc patches) chosen;
    `library`: the one that holds the set, where the user's does not."""
    library = None if adhoc else library or current().library  # ad-hoc patches take no library
    return replace(current(), library=library, set_name=None if adhoc else set_name, adhoc=adhoc)


def pip_reinstall(version: object | None) -> str:
    """The pip command that puts back a release's stock files (None: VERSION, not known here), run
    by the tree's interpreter when the user named it (--python) or patchkit found it, else `python
    -m pip` with a word on which one."""
    python = current().python or _INTERPRETER.get()
    release = release_of(version or current().vllm_version or "VERSION")
    words = [python or "python", "-m", "pip", "install", "--force-reinstall", "--no-deps", f"vllm=={release}"]
    text = "`" + shlex.join(words) + "`"
    return text if python else f"{text} (with the Python of that environment)"


def release_of(version: object) -> str:
    """`version` less the local label `patchkit wheel` gives (`0.16.0+cu129.patchkit.eagle3`:
    0.16.0+cu129), or another label the installed wheel's provenance names (knows_release): a
    patched wheel's version is on no index, its release's stock files are."""
    known = (_RELEASES.get() or {}).get(_spelled(version))
    if known is not None:
        return known
    public, _, label = str(version).partition("+")
    words = label.lower().replace("_", ".").replace("-", ".").split(".")
    if "patchkit" not in words:
        return str(version)
    kept = ".".join(words[: words.index("patchkit")])
    return f"{public}+{kept}" if kept else public


def reinstall_vllm(version: object | None) -> str:
    """The way vLLM's stock files come back by pip (pip_reinstall's command): a local build's (a local
    label of its own, +lab, +cu129) is on no public index, so it is reinstalled from where it came."""
    command = pip_reinstall(version)
    if "+" in release_of(version or current().vllm_version or ""):
        return f"a local build is on no public index: reinstall it from where it came ({command})"
    return f"reinstall vLLM ({command})"


def _spelled(version: object) -> str:
    """A version's words as packaging normalizes a local label's (lower case, `-` and `_` as `.`)."""
    return str(version).lower().replace("_", ".").replace("-", ".")


def remove_files(paths: list[str]) -> str:
    """The exact command that removes `paths` (stale bytecode patchkit does not write: Python then
    compiles the sources again)."""
    return "`" + shlex.join(["rm", "-f", "--", *paths]) + "`"


def replace_symlink(path: os.PathLike[str] | str, *, directory: bool) -> str:
    """What to do with a symlink patchkit will not write through (nor trust the guard through): a
    real file or directory in its place, holding what it points to."""
    where = shlex.quote(str(path))
    if directory:
        return f"replace the symlink {where} with a real directory holding a copy of what it points to"
    return f"replace the symlink {where} with a copy of the file it points to"

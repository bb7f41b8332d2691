"""Where vLLM lives: a directory that contains the `vllm/` package, and the Python that runs it;
and running patchkit's workers (patchkit/_target/) in that Python: run_worker."""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import json
import os
import pwd
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from patchkit.base import hints
from patchkit.base.errors import TargetError, ended_how, excerpt, killed_fix, quoted
from patchkit.base.fsutil import load_json_text, read_regular
from patchkit.base.options import Options
from patchkit.base.patterns import LazyPattern
from patchkit.base.values import FrozenValue, frozen

# a worker's process (subprocess, its waits) is patchkit.tree.process, imported where a worker runs:
# a command given --target alone (a dry run of a large diff, `run` on an applied tree) starts none.

PACKAGE = "vllm"


@frozen
class Target(FrozenValue):
    """Where vLLM is: its site directory, how it was found, its Python."""

    root: Path  # the directory that contains vllm/
    found_by: str  # how the user pointed at it, for status output
    python: str | None = None  # the interpreter that will run this vLLM, when known
    installed_version: str | None = None  # what that interpreter's metadata says
    # --target DIR with --python PATH: the vllm/ PATH itself imports ("": none). vLLM asked through
    # PATH judges that one, which need not be DIR's
    python_vllm: str | None = None
    # the interpreter finds vllm/ through a finder (an editable install of a checkout), not with its
    # directory on sys.path: a launch guard written beside vllm/ would never load
    guard_unseen: bool = False

    @property
    def python_imports_another(self) -> bool:
        """--python imports a vLLM of its own that is not this tree's: what vLLM answers through it
        (its validation, supports_eagle3()) is about that one's files."""
        if not self.python_vllm:  # not given apart, or no vLLM of its own (then vLLM cannot be asked)
            return False
        return os.path.realpath(self.python_vllm) != os.path.realpath(self.package_dir)

    @property
    def package_dir(self) -> Path:
        return self.root / PACKAGE


# The paths this run found each tree by, symlinks kept (an interpreter's sys.path entry, a --target
# given through a symlinked directory): Python keys bytecode under a pycache prefix by that path, so
# the prefix is judged there too, as the guard judges it in the launch (engine.guard.launch_verdict).
_NAMED_AS: dict[Path, list[str]] = {}


def _named_as(root: Path, name: str) -> None:
    names = _NAMED_AS.setdefault(root, [])
    if name != str(root) and name not in names:
        names.append(name)


def names_of(root: Path) -> list[str]:
    """The paths other than `root` itself this run reached the tree `root` by (symlinks kept)."""
    return list(_NAMED_AS.get(root, ()))


# The pycache prefix the interpreter of a tree sets at its start-up (a .pth line, sitecustomize:
# `sys.pycache_prefix = ...`), as its probe found it: every launch of it reads bytecode there, whatever
# its environment says, and the guard in it judges that mirror; patchkit's own process never ran that code.
_STARTUP_PREFIX: dict[Path, str] = {}


def startup_prefix(root: Path) -> str | None:
    """The pycache prefix the start-up of `root`'s interpreter sets ("": it clears one), None: none known."""
    return _STARTUP_PREFIX.get(root)


def _note_startup_prefix(root: Path, info: dict[str, Any], cwd: str | None) -> None:
    prefix = info.get("pycache_prefix")
    if info.get("prefix_set_at_startup") is True and isinstance(prefix, (str, type(None))):
        _STARTUP_PREFIX[root] = os.path.join(cwd or os.sep, prefix) if prefix else ""


_ProbeKey = tuple[Path, str, tuple[tuple[str, str], ...], tuple[str, ...], str, str | None]
# (root, python, env items, options, cwd, first path) -> what locate answered there ({}: it could not be asked)
_LAUNCH_PROBES: dict[_ProbeKey, dict[str, Any]] = {}
# the same key -> why that question got no answer in time (its start-up hangs or is slow): not judged
_LAUNCH_UNANSWERED: dict[_ProbeKey, str] = {}
LAUNCH_QUESTION = 60.0  # seconds one question to a launch's Python may take, its start-up included
LAUNCH_BUDGET = 180.0  # seconds all of a command's questions to one launch's Python may take together
# (python, its environment, options, directory) -> when the budget of its questions runs out
_LAUNCH_DEADLINES: dict[tuple[str, tuple[tuple[str, str], ...], tuple[str, ...], str | None], float] = {}
# (python, the launch's environment) whose start-up did not finish within the budget: not asked again
_STARTUP_TIMED_OUT: set[tuple[str, tuple[tuple[str, str], ...]]] = set()


def _launch_timeout(python: str, env: dict[str, str], options: Sequence[str], cwd: str | None, timeout: float) -> float:
    """The time one more question to a launch's Python may take: `timeout`, at most LAUNCH_QUESTION,
    and no more than is left of LAUNCH_BUDGET from its first question (a start-up that is slow is
    slow for each: a 35 s one is asked twice, one that never ends not for minutes). WorkerFailed
    (timed out) when nothing is left."""
    key = (python, tuple(sorted(env.items())), tuple(options), cwd)
    left = _LAUNCH_DEADLINES.setdefault(key, time.monotonic() + LAUNCH_BUDGET) - time.monotonic()
    if left <= 0:
        raise WorkerFailed(
            f"{python} did not finish its answers within the {LAUNCH_BUDGET:.0f} s they share",
            partial={},
            timed_out=True,
        )
    return min(timeout, LAUNCH_QUESTION, left)


class Launch:
    """A launch of a tree, as far as the pycache prefix it reads bytecode under goes: its interpreter
    (None: not found, its exec fails by itself) run with `options` in `env` from `cwd` (`changed`: an
    environment not patchkit's), its first sys.path entry, and the prefix its options and `env` give.
    A plain class: a NamedTuple or dataclass costs the start-up of `run`'s fast path ~0.3 ms."""

    __slots__ = ("changed", "cwd", "env", "first_path", "given", "options", "python")

    def __init__(
        self,
        python: str | None,
        env: dict[str, str],
        options: list[str],
        cwd: str,
        first_path: str | None,
        changed: bool,
        given: str | None,
    ) -> None:
        self.python, self.env, self.options, self.cwd = python, env, options, cwd
        self.first_path, self.changed, self.given = first_path, changed, given


def launch_prefix(root: Path, launch: Launch | None = None) -> str:
    """The pycache prefix a launch of `root` reads bytecode under ("": none, __pycache__): the one its
    interpreter's start-up sets (a .pth line, sitecustomize: it wins over the launch's options and
    environment), else the one `launch` gives; no `launch`: a launch from this environment, this process's."""
    if launch is None:
        found, given = startup_prefix(root), sys.pycache_prefix
    else:
        found, given = _launch_startup_prefix(root, launch), launch.given
    return (given or "") if found is None else found


def _launch_startup_prefix(root: Path, launch: Launch) -> str | None:
    """The pycache prefix the start-up of the launch's interpreter, run as the launch runs it, sets for
    `root` ("": it clears one; None: it sets none). Start-up code may read any variable the launch's
    environment gives, so it is asked there when that or its options are not patchkit's (`changed`)
    and its start-up may set one: the tree's names the prefix, or the launch runs start-up code the
    site does not hold (_adds_startup_code); else, or unasked, startup_prefix(root)."""
    python, env, options, cwd, first_path = launch.python, launch.env, launch.options, launch.cwd, launch.first_path
    known = startup_prefix(root)
    if python is None or not (launch.changed or options):
        return known
    key = _probe_key(root, launch)
    # decided and asked once a command (preflight asks per set and per finding): the site and the
    # PYTHONPATH are scanned once; {} is "not asked" (no start-up code may set one, or it cannot be asked)
    if key not in _LAUNCH_PROBES:
        _LAUNCH_PROBES[key] = {}
        if known is not None or _startup_may_set_prefix(root, launch):
            try:
                _LAUNCH_PROBES[key] = _probe(python, env, first_path, options, cwd)
            except TargetError as exc:  # it cannot be asked: judged as before, a timeout said (prefix_unanswered)
                if isinstance(exc, WorkerFailed) and exc.timed_out:
                    _LAUNCH_UNANSWERED[key] = exc.message
    info = _LAUNCH_PROBES[key]
    if not info:
        return known
    own = info.get("package_dir")
    if not isinstance(own, str) or os.path.realpath(own) != os.path.realpath(root / PACKAGE):
        return known  # it imports another tree (the launch-target check says so)
    prefix = info.get("pycache_prefix")
    if info.get("prefix_set_at_startup") is not True or not isinstance(prefix, (str, type(None))):
        return None
    return os.path.join(cwd, prefix) if prefix else ""


def _probe_key(root: Path, launch: Launch) -> _ProbeKey:
    return (
        root,
        launch.python or "",
        tuple(sorted(launch.env.items())),
        tuple(launch.options),
        launch.cwd,
        launch.first_path,
    )


def prefix_unanswered(root: Path, launch: Launch) -> str | None:
    """Why the launch's interpreter gave no answer in time when asked which pycache prefix its start-up
    sets for `root` (launch_prefix then took the static scan's); None: it answered, or was not asked."""
    return _LAUNCH_UNANSWERED.get(_probe_key(root, launch)) if launch.python is not None else None


# Where each tree's interpreter was asked in patchkit's own environment (that python, that
# directory): the start-up code it ran there is known; a launch that runs no other needs no asking.
_ASKED_HERE: dict[Path, tuple[str, str]] = {}


def _asked_here(root: Path, python: object, cwd: str | None) -> None:
    if isinstance(python, str):
        _ASKED_HERE[root] = (python, cwd or os.sep)


def _adds_startup_code(root: Path, launch: Launch) -> bool:
    """Whether the launch runs start-up code in its interpreter that the site does not hold and that
    asking it in patchkit's own environment did not run (a sitecustomize on the launch's PYTHONPATH,
    a user site's .pth): any of it may set a pycache prefix, by whatever code."""
    python = launch.python or ""
    found = startup_code(root, python, launch.env, launch.cwd, flag_letters(launch.options))
    if not found:
        return False
    here = _ASKED_HERE.get(root)
    if here is None or not _same_file(here[0], python):
        return True
    return startup_code(root, here[0], dict(os.environ), here[1]) != found


_FLAG_CLUSTER = LazyPattern(r"-[bBdEIOPqRsSuv]+")  # Python's options that take no value, clustered


def flag_letters(options: list[str]) -> str:
    """The letters of the flag clusters among a launch's interpreter options, as
    launch/interpreter.py's python_options gives them (-E, -sI: not an -X value's letters)."""
    return "".join(option[1:] for option in options if _FLAG_CLUSTER.fullmatch(option))


def startup_code(root: Path, python: str, env: dict[str, str], cwd: str, flags: str = "") -> list[str]:
    """What, beside the site's own .pth files and sitecustomize, `python` run with the options `flags`
    runs at its start-up under `env` in `cwd`: a sitecustomize or usercustomize on PYTHONPATH, or a
    module the site's start-up files import found there first (an archive there: what it holds is
    not read), the user site's .pth files and usercustomize, another PYTHONHOME or PYTHONPLATLIBDIR
    (another site.py, other site directories). -S: no site, none; -E or -I: no PYTHON* variable
    read; -s or -I: no user site."""
    if "S" in flags:
        return []
    if "E" in flags or "I" in flags:
        env = {name: value for name, value in env.items() if not name.startswith("PYTHON")}
    found = [f"{name}={env[name]}" for name in ("PYTHONHOME", "PYTHONPLATLIBDIR") if env.get(name)]
    entries = [os.path.join(cwd, entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep)]
    if env.get("PYTHONPATH"):
        names = {"sitecustomize", "usercustomize", *_site_imports(root)}
        hits = [hit for entry in dict.fromkeys(entries) for hit in _modules_named(entry, names)]
        # the site's start-up code may import, at any depth, a module the PYTHONPATH holds first: asked,
        # not traced through the imports
        found += hits or ([f"PYTHONPATH={os.pathsep.join(entries)}"] if _site_runs_code(root) else [])
    return found + ([] if "s" in flags or "I" in flags else _user_site_code(python, env))


def _site_runs_code(root: Path) -> bool:
    """Whether the site's start-up runs code: a sitecustomize or usercustomize, or a .pth line that imports."""
    names, heads = _site_hooks(root)
    return bool(names & {"sitecustomize.py", "usercustomize.py"}) or bool(_imported_by(heads))


def _modules_named(directory: str, names: set[str]) -> list[str]:
    """The modules or packages in a sys.path entry that import as one of `names`; an archive whole."""
    if os.path.isfile(directory):
        return [directory]
    suffixes = importlib.machinery.all_suffixes()
    try:
        with os.scandir(directory) as entries:
            return [
                entry.path
                for entry in entries
                if entry.name in names
                or any(entry.name.endswith(s) and entry.name[: -len(s)] in names for s in suffixes)
            ]
    except OSError:
        return []


def _user_site_code(python: str, env: dict[str, str]) -> list[str]:
    """The .pth files and usercustomize of the user site `env` names (PYTHONUSERBASE, else HOME's
    .local), where `python` has a user site: a venv without system site-packages has none."""
    if env.get("PYTHONNOUSERSITE"):
        return []
    home = env.get("HOME") or _home()
    lib = os.path.join(env.get("PYTHONUSERBASE") or os.path.join(home, ".local"), "lib")
    try:
        sites = [os.path.join(lib, name, "site-packages") for name in os.listdir(lib) if name.startswith("python")]
    except OSError:
        return []
    found = []
    for site in sites:
        with contextlib.suppress(OSError):
            found += [
                os.path.join(site, n) for n in os.listdir(site) if n.endswith(".pth") or n.startswith("usercustomize")
            ]
    return found if found and _has_user_site(python) else []


def _home() -> str:
    """The home directory Python's site takes where HOME is unset: the password database's."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.sep


def _has_user_site(python: str) -> bool:
    """Whether `python` loads a user site: not a venv's (its pyvenv.cfg beside it or one up) that
    leaves the system site-packages out, as site.venv() reads it."""
    here = os.path.dirname(python)
    for cfg in (os.path.join(here, "pyvenv.cfg"), os.path.join(os.path.dirname(here), "pyvenv.cfg")):
        if os.path.isfile(cfg):
            lines = _head_of(Path(cfg)).decode(errors="replace").splitlines()
            said = {
                k.strip().lower(): v.strip().lower()
                for k, _, v in (line.partition("=") for line in lines if "=" in line)
            }
            return said.get("include-system-site-packages", "true") == "true"
    return True


def _same_file(one: str, other: str) -> bool:
    """One interpreter by both paths, in one directory (a venv's python links to its base's)."""
    try:
        return os.path.samefile(os.path.dirname(one), os.path.dirname(other)) and os.path.samefile(one, other)
    except OSError:
        return False


def from_directory(directory: str | os.PathLike[str]) -> Target:
    root = Path(directory).resolve()
    given = os.path.abspath(directory)
    if not root.exists():
        raise TargetError(  # a next step, not a bare refusal
            f"target directory {directory} does not exist",
            hint=f"check the path; {hints.command('fetch', 'VERSION', '--dest', str(directory))} lays out a vLLM "
            "release there, or --python PATH names the interpreter of a venv with vLLM",
        )
    if not root.is_dir():
        raise TargetError(f"target {directory} is not a directory")
    link = Path(directory).is_symlink() and Path(directory).name == PACKAGE  # a moved vllm/, by any name
    if (root.name == PACKAGE or link) and _is_the_package(Path(directory) if link else root):  # the package itself
        given = os.path.dirname(given.rstrip(os.sep))
        root = _tree_of(Path(directory), given) if Path(directory).is_symlink() else root.parent
    if not (root / PACKAGE).is_dir():
        raise TargetError(
            f"no {PACKAGE}/ package in {root}",
            hint="--target takes the directory that contains vllm/ (site-packages, "
            "an unpacked wheel or a source checkout)",
        )
    _named_as(root, given)
    return Target(root=root, found_by=f"--target {directory}")


def _is_the_package(directory: Path) -> bool:
    """vllm/ itself: its __init__.py, or beside it vLLM's dist-info (a tree `patchkit fetch` laid out
    holds only the files it needs, no __init__.py); not a directory holding a vllm/ of its own."""
    if (directory / PACKAGE).is_dir():
        return False
    return (directory / "__init__.py").is_file() or bool(vllm_metadata_dirs(directory.parent))


def vllm_metadata_dirs(root: Path) -> list[Path]:
    """vLLM's metadata directories in `root`, found by importlib.metadata's rule (its Lookup): a child
    whose name, lower-cased, ends in .dist-info or .egg-info and whose part before the first '-'
    normalizes to vllm (`VLLM-0.16.0.DIST-INFO` is vLLM's for importlib too). Sorted by name."""
    try:
        children = os.listdir(root)
    except OSError:  # not a directory, gone, closed
        return []
    return [root / child for child in sorted(children) if _names_vllm(child.lower())]


def _names_vllm(low: str) -> bool:
    """Whether a lower-cased child is a metadata directory of a name importlib normalizes to vllm:
    its Prepared.normalize turns runs of -_. into _, so only `vllm` itself is (the same test as
    _target/guard.py's _vllm_dist_infos; tests/test_distinfo_case.py checks that they agree)."""
    return low.endswith((".dist-info", ".egg-info")) and low.rpartition(".")[0].partition("-")[0] == PACKAGE


def from_interpreter(
    python: str | None,
    *,
    env: dict[str, str] | None = None,
    first_path: str | None = None,
    options: list[str] | None = None,
    cwd: str | None = None,
) -> Target:
    """Ask an interpreter where vllm is, without importing it. None: the one running patchkit. `env`:
    the environment it runs with (None: patchkit's); `first_path`: what it puts first on sys.path
    (`python -m`'s working directory, a script's own directory); `options`: the interpreter options
    it runs with (a script's #! line: -E, -s, -I ...); `cwd`: the directory it runs in (None: /).
    A launch's interpreter is asked in the launch's directory: relative and empty PYTHONPATH
    entries resolve against it, as they do for the launch."""
    info = _probe(python, env, first_path, options or [], cwd)
    package_dir = info.get("package_dir")
    if not isinstance(package_dir, (str, type(None))) or not isinstance(info.get("version"), (str, type(None))):
        raise TargetError(f"{python} is not a Python interpreter patchkit can ask (it answered {info!r:.200})")
    if not package_dir:
        where = python or sys.executable
        raise TargetError(
            f"vLLM is not installed for {where}",
            hint=_no_vllm_hint(python),
        )
    _refuse_an_archive(Path(package_dir), python or sys.executable)
    found_by = f"--python {python}" if python else f"the current interpreter ({sys.executable})"
    named = os.path.dirname(os.path.abspath(package_dir.rstrip(os.sep)))
    root = _tree_of(Path(package_dir), named)
    _named_as(root, named)
    _note_startup_prefix(root, info, cwd)
    if env is None and not options:
        _asked_here(root, info["python"], cwd)
    return Target(
        root=root,
        found_by=found_by,
        python=info["python"],
        installed_version=info.get("version"),
        guard_unseen=info.get("dir_on_path") is False,
    )


def _tree_of(package_dir: Path, named: str) -> Path:
    """The directory holding the vllm/ an interpreter imports: the one its sys.path entry names
    (real path), where vLLM's dist-info, patchkit's record and the guard are, even when vllm/ there
    is a symlink (moved to another volume); a vllm/ linked from a directory that holds none of them
    (a checkout's, linked in by hand) is judged where it really is."""
    site = Path(named).resolve()
    if package_dir.is_symlink() and not (vllm_metadata_dirs(site) or (site / ".patchkit").is_dir()):
        return package_dir.resolve().parent
    return site


def _no_vllm_hint(python: str | None) -> str:
    """Where to point patchkit instead; to one who gave an interpreter, not "give --python" alone."""
    if python:
        return (
            f"{python} imports no vllm: give --python the interpreter of the environment vLLM is installed "
            "in, or --target the directory that holds vllm/ (a `fetch --dest` tree, a site-packages)"
        )
    return "point patchkit at it with --python /path/to/venv/bin/python or --target /path/to/site-packages"


def _refuse_an_archive(package_dir: Path, python: str) -> None:
    """A vllm imported from inside a file (a zip or an egg on sys.path: zipimport) has no files
    patchkit could read or write: the archive is named, not a path inside it."""
    if package_dir.is_dir():
        return
    archive = next((p for p in package_dir.parents if p.is_file()), None)
    if archive is None:
        return  # not there at all: what reads the tree says so
    raise TargetError(
        f"the vllm {python} imports is inside the archive {archive} (on its sys.path), "
        "which patchkit cannot inspect or patch",
        hint=f"move {archive} off sys.path (PYTHONPATH, or the install that put it there), then run the command again",
    )


def _probe(
    python: str | None,
    env: dict[str, str] | None = None,
    first_path: str | None = None,
    options: Sequence[str] = (),
    cwd: str | None = None,
) -> dict[str, Any]:
    """What `python` (None: the one running patchkit) says about its vllm: _target/locate.py."""
    # A --python, even this very interpreter, is asked in a subprocess run from /, so that a vllm/ in
    # our working directory cannot shadow its own. Not isolated (-I): PYTHONPATH and the user's
    # site-packages are part of where that Python finds vllm.
    if python is not None:
        _refuse_a_python_script(python)
    try:
        request = {"package": PACKAGE, "first_path": first_path}
        info = run_worker(
            python,
            "locate",
            request,
            timeout=60 if python is None or env is None else _launch_timeout(python, env, options, cwd, 60),
            in_process=python is None and not options and cwd is None,
            isolated=False,
            env=env,
            options=options,
            cwd=cwd,
        )
    except WorkerFailed as failed:
        if failed.timed_out and python is not None and env is not None:  # its start-up: each question waits on it
            _STARTUP_TIMED_OUT.add((python, tuple(sorted(env.items()))))
        if failed.status == 0:  # ran, exited 0, answered nothing: /bin/true, a shell script...
            raise TargetError(f"{python} is not a Python interpreter (it ran, but gave no answer)") from failed
        raise
    if not isinstance(info.get("python"), str):
        raise TargetError(f"{python} is not a Python interpreter patchkit can ask (it answered {info!r:.200})")
    return info


_SCRIPT_HEAD = 64 << 10  # a console script, or an interpreter wrapper: a few lines; more is neither
# a Python-written interpreter wrapper (HPC module systems): it hands its arguments to another program
_HANDS_ON = LazyPattern(
    rb"\bos\.(?:exec[lv]p?e?|posix_spawnp?|spawn[lv]p?e?)\s*\(|\bsubprocess\.(?:run|call|check_call|Popen)\s*\("
)


def _refuse_a_python_script(python: str) -> None:
    """--python naming a Python script (`$(which vllm)`: vLLM's own command) and not an interpreter:
    running it would start that program with the probe's arguments (vLLM's CLI loads torch for
    half a minute, then fails on them). A shell script (a pyenv shim) is left to run, and so is a
    Python script that hands its arguments on to another program (os.exec*, subprocess): an
    interpreter wrapper, which the probe then runs once, as a launch would, and whose answer (the
    interpreter it reached, or none) decides."""
    try:
        head = read_regular(python, _SCRIPT_HEAD, follow_symlinks=True, head=True)
    except OSError:  # not there, a directory...: the run says why (_why_not_run)
        return
    lines = head.split(b"\n")
    words = lines[0][2:].decode(errors="replace").split() if lines[0].startswith(b"#!") else []
    program = words[1] if len(words) > 1 and Path(words[0]).name == "env" else (words[0] if words else "")
    wrapped = Path(program).name == "sh" and len(lines) > 1 and lines[1].startswith(b"'''exec' ")
    if not (Path(program).name.startswith(("python", "pypy")) or wrapped):
        return
    if not wrapped and _HANDS_ON.search(head):  # an interpreter wrapper, not a program
        return
    beside = Path(python).parent / "python"
    if beside.is_file():
        instead = shlex.quote(str(beside))
    else:
        instead = shlex.quote(program) if "/" in program and not wrapped else "/path/to/venv/bin/python"
    raise TargetError(
        f"{python} is a Python script (a program's command, as vLLM's `vllm` is), not a Python interpreter",
        hint=f"give --python {instead}: the interpreter that runs vLLM",
    )


def interpreter_path(python: str) -> str:
    """--python as the workers run it, from /: a path with a slash made absolute against the working
    directory, a bare name looked up on PATH. Symlinks are kept: a venv's python is a symlink to its
    base interpreter, and only the venv's path runs with the venv's site-packages."""
    if os.sep in python or (os.altsep and os.altsep in python):
        return os.path.abspath(python)

    return shutil.which(python) or python


def resolve(target_dir: str | None, python: str | None, *, here: bool = False) -> Target:
    """`here`: a --python the user gave is asked in our working directory, as it runs when they
    start it here: PYTHONPATH's relative and empty entries (`PYTHONPATH=v.zip`, `.`) resolve
    against it (a worker script puts no working directory on sys.path itself). Else from /."""
    python = interpreter_path(python) if python is not None else None
    cwd = _working_directory() if here and python is not None else None
    if python is None:  # found here: the pip hints name it (a --python is the selection's own)
        found = from_directory(target_dir) if target_dir else from_interpreter(None)
        hints.knows_interpreter(found.python or venv_interpreter(found.root))
        if target_dir:
            _ask_startup_prefix(found.root)
        return found
    if target_dir and python:
        # The interpreter still judges syntax; the directory says where the files are.
        info = _probe(python, cwd=cwd)
        own = info.get("package_dir")
        root = from_directory(target_dir).root
        if isinstance(own, str) and os.path.realpath(own) == os.path.realpath(root / PACKAGE):
            _note_startup_prefix(root, info, cwd)  # that interpreter runs this tree: its start-up is the launch's
            _asked_here(root, info["python"], cwd)
        return Target(
            root=root,
            found_by=f"--target {target_dir}",
            python=info["python"],
            python_vllm=own if isinstance(own, str) else "",
        )
    return from_interpreter(python, cwd=cwd)


_IMPORTED = LazyPattern(r"\bimport[ \t]+([\w \t,.]+)|\b(?:__import__|import_module)\(\s*['\"]([A-Za-z_]\w*)")
_STARTUP_HEAD = 64 << 10  # a .pth file or a start-up module: a few lines


def _ask_startup_prefix(root: Path) -> None:
    """--target alone on a venv's site-packages whose start-up code names pycache_prefix (a .pth line,
    sitecustomize or usercustomize there, a module of it a .pth line imports): the venv's interpreter
    is asked what its start-up sets, as --python would be. Any other tree starts no interpreter."""
    python = venv_interpreter(root)
    if python is None or not _startup_names_prefix(root):
        return
    try:
        info = _probe(python)
    except TargetError:  # it cannot be asked: judged as before, by this process's prefix
        return
    own = info.get("package_dir")
    if isinstance(own, str) and os.path.realpath(own) == os.path.realpath(root / PACKAGE):
        _note_startup_prefix(root, info, None)
        _asked_here(root, info["python"], None)


def _startup_names_prefix(root: Path) -> bool:
    return _names_prefix(_startup_texts(root))


def _names_prefix(texts: list[bytes]) -> bool:
    return any(b"pycache_prefix" in text for text in texts)


def _startup_may_set_prefix(root: Path, launch: Launch) -> bool:
    """Whether the launch's start-up may set a pycache prefix: the site's start-up files (read once)
    name it or a variable the launch gives otherwise, or the launch runs start-up code the site does not hold."""
    texts = _startup_texts(root)
    return _names_prefix(texts) or _adds_startup_code(root, launch) or _reads_launch_variables(texts, launch)


def _startup_texts(root: Path) -> list[bytes]:
    """The heads of the site's start-up files and of the site's modules they import."""
    names, texts = _site_hooks(root)
    imported = {f"{m}.py" for m in _imported_by(texts)}
    return texts + [_head_of(root / name) for name in sorted(imported & names)]


def _reads_launch_variables(texts: list[bytes], launch: Launch) -> bool:
    """Whether the site's start-up code names a variable the launch's environment gives otherwise
    than patchkit's: it may set a pycache prefix from it by code no scan recognises (setattr with a
    built name). -S: no site runs."""
    if "S" in flag_letters(launch.options):
        return False
    names = {n for n in launch.env.keys() | os.environ.keys() if launch.env.get(n) != os.environ.get(n)}
    if not names:
        return False
    alternatives = b"|".join(re.escape(os.fsencode(name)) for name in sorted(names))
    said = re.compile(rb"(?<!\w)(?:" + alternatives + rb")(?!\w)")
    return any(said.search(text) for text in texts)


def _site_hooks(root: Path) -> tuple[set[str], list[bytes]]:
    """The names in the site, and the heads of its start-up files: .pth files, sitecustomize, usercustomize."""
    try:
        names = set(os.listdir(root))
    except OSError:
        return set(), []
    hooks = [n for n in names if n.endswith(".pth") or n in ("sitecustomize.py", "usercustomize.py")]
    return names, [_head_of(root / name) for name in sorted(hooks)]


def _imported_by(texts: list[bytes]) -> set[str]:
    """The top-level modules start-up code imports (`import a, b.c as d`, __import__("e"), import_module("f"))."""
    found: set[str] = set()
    for text in texts:
        for listed, called in _IMPORTED.findall(text.decode(errors="replace")):
            found.update(part.split()[0].split(".")[0] for part in listed.split(",") if part.strip())
            found.update([called] if called else [])
    return found


def _site_imports(root: Path) -> set[str]:
    """The modules the site's start-up files import: found first on a PYTHONPATH, another's code runs."""
    return _imported_by(_site_hooks(root)[1])


def _head_of(path: Path) -> bytes:
    try:
        return read_regular(path, _STARTUP_HEAD, follow_symlinks=True, head=True)
    except OSError:
        return b""


def venv_interpreter(root: Path) -> str | None:
    """The interpreter of the environment whose site-packages `root` is (ENV/lib/pythonX.Y/site-packages,
    ENV a venv or a conda environment): ENV/bin/python; None for any other directory."""
    env = root.parent.parent.parent
    if root.name != "site-packages" or not root.parent.name.startswith("python"):
        return None
    if not ((env / "pyvenv.cfg").is_file() or (env / "conda-meta").is_dir()):
        return None
    python = env / "bin" / "python"
    return str(python) if os.access(python, os.X_OK) else None


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under us: asked from /
        return None


# -- running code in the target interpreter ---------------------------------------------------------


class WorkerFailed(TargetError):
    """A worker gave no full answer. `partial`: the answer it had written by then ({} if none);
    `timed_out`: it was killed at the timeout; `status`: its exit status when it exited, and
    `stderr`: the end of its error output."""

    def __init__(
        self,
        message: str,
        *,
        partial: dict[str, Any],
        timed_out: bool = False,
        status: int | None = None,
        stderr: str = "",
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.partial = partial
        self.timed_out = timed_out
        self.status = status
        self.stderr = stderr


def run_worker(
    python: str | None,
    worker: str,
    request: object,
    *,
    timeout: float,
    doing: str = "",
    in_process: bool = True,
    isolated: bool = True,
    env: dict[str, str] | None = None,
    options: Sequence[str] = (),
    cwd: str | None = None,
) -> dict[str, Any]:
    """The answer of patchkit/_target/<worker>.py to `request` (JSON in, JSON out), computed by `python`.

    In-process (the module's work(request)) when `in_process` allows it and `python` is the
    interpreter running patchkit (None means that one); else `python [-I] -B <worker>.py ANSWER` in
    its own session from /, the request on stdin, the answer read from the file ANSWER, and the whole
    process group killed at the timeout. `isolated` (-I) keeps PYTHON* variables and the user's
    site-packages out; a worker that must see vLLM as it runs is not isolated. `env`: the worker
    process's whole environment (None: patchkit's; a subprocess then, never in-process). WorkerFailed (a
    TargetError) when it cannot run, times out, exits non-zero or answers nothing; `doing` finishes
    its messages ("cannot run PYTHON<doing>: ..."). `options`: interpreter options it runs with too.
    `cwd`: the directory it runs in (None: /, and in-process allowed); a launch's, for questions
    about what the launch imports.
    """
    module = importlib.import_module(f"patchkit._target.{worker}")
    if in_process and env is None and not options and cwd is None and same_interpreter(python):
        worked: dict[str, Any] = module.work(request)  # each worker's work() answers an object
        return worked
    assert python is not None and module.__file__ is not None
    if env is not None and (python, tuple(sorted(env.items()))) in _STARTUP_TIMED_OUT:
        message = f"{python} was not asked{doing}: in the launch's environment it did not start within {LAUNCH_QUESTION:.0f} s"
        raise WorkerFailed(message, partial={}, timed_out=True)
    flags = ["-I", "-B", *options] if isolated else ["-B", *options]
    with tempfile.TemporaryDirectory(prefix="patchkit-worker-") as scratch:
        answer = Path(scratch) / "answer.json"
        process = _process()
        try:
            command = [python, *flags, module.__file__, str(answer)]
            status, stderr = process.run(command, json.dumps(request), timeout, env, cwd)
        except OSError as exc:
            raise WorkerFailed(f"cannot run {python}{doing}: {_why_not_run(exc, python)}", partial={}) from exc
        except process.TimedOut:
            message = f"{python} did not finish within {timeout:.0f} s{doing}"
            raise WorkerFailed(message, partial=_read_answer(answer) or {}, timed_out=True) from None
        result = _read_answer(answer)
        if status != 0 or result is None:
            tail = excerpt(stderr.strip()) or "no error output"
            raised = _raised_in(stderr)
            message = f"{python} failed{doing} (exit status {status}): {quoted(raised) if raised else tail}"
            hint = _RAISED_HINT.format(python=shlex.quote(python)) if raised else None
            if status < 0:  # killed: its error output, if any, is not why
                said = f": it said {excerpt(stderr.strip())}" if stderr.strip() else ""
                message, hint = f"{python}{doing} {ended_how(status)}{said}", killed_fix(status)
            raise WorkerFailed(message, partial=result or {}, status=status, stderr=tail, hint=hint)
        return result


# a worker's uncaught exception is its interpreter's (a site hook, a broken distribution), not patchkit's
_RAISED_HINT = (
    "the exception is that interpreter's own (its start-up code: sitecustomize or .pth files, or a broken "
    "distribution in it), not patchkit's: mend it there, or give --python another interpreter ({python} ran it)"
)


def _raised_in(stderr: str) -> str | None:
    """The exception line a Python traceback in `stderr` ends with (None: no traceback)."""
    if "Traceback (most recent call last):" not in stderr:
        return None
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return last if last and not last.startswith(("File ", "^", "~")) else None


def ask_python(
    python: str, options: Sequence[str], code: str, *, env: dict[str, str], cwd: str, stdin: str = ""
) -> str:
    """What `python` (with `options`, -S: no site start-up runs) writes for `code` (given `stdin`) in
    `env` and `cwd`: a question about how that interpreter starts or what it can do, asked as a launch
    would start it. WorkerFailed when it cannot run, fails or is past 30 s."""
    command = [python, *options, "-S", "-c", code]
    process = _process()
    timeout = _launch_timeout(python, env, options, cwd, 30)
    try:
        ran: tuple[int, str] = process.run(command, stdin, timeout, env, cwd, stdout=True)  # its signature
        status, out = ran
    except OSError as exc:
        raise WorkerFailed(f"cannot run {python}: {_why_not_run(exc, python)}", partial={}) from exc
    except process.TimedOut:
        raise WorkerFailed(f"{python} did not finish within {timeout:.0f} s", partial={}, timed_out=True) from None
    if status != 0:
        said = f"{python} {ended_how(status)}" if status < 0 else f"{python} failed (exit status {status})"
        raise WorkerFailed(said, partial={}, status=status, hint=killed_fix(status))
    return out


def _process() -> ModuleType:
    """patchkit.tree.process (a worker's process and its waits), loaded when a worker runs."""
    # lazy: only a worker's run needs it, and the waits (subprocess, selectors: start-up of a dry run)
    import patchkit.tree.process as process

    return process


def flooded(out: str) -> bool:
    """Whether run_script's output is a script's head and end only (it wrote past OUTPUT_LIMIT)."""
    limit: int = _process().OUTPUT_LIMIT  # through ModuleType: typed here
    return len(out) > limit


def run_script(
    python: str, script: Path, args: Sequence[str], *, timeout: float, isolated: bool
) -> tuple[int, str, str]:
    """(exit status, standard output, the end of its error output) of a set's script run by `python`
    (-B; -I when `isolated`), in its own session from /, killed with its children at the timeout
    (WorkerFailed, timed_out)."""
    command = [python, *(["-I", "-B"] if isolated else ["-B"]), str(script), *args]
    process = _process()
    try:
        ran: tuple[int, str, str] = process.run_with_errors(command, "", timeout)  # its signature
        return ran
    except OSError as exc:
        raise WorkerFailed(f"cannot run {python}: {_why_not_run(exc, python)}", partial={}) from exc
    except process.TimedOut:
        raise WorkerFailed(f"{script.name} did not finish within {timeout:g} s", partial={}, timed_out=True) from None


def _why_not_run(exc: OSError, python: str) -> str:
    if os.path.isdir(python):
        return "a directory, not an interpreter"
    if isinstance(exc, FileNotFoundError):
        return "interpreter not found"
    if isinstance(exc, PermissionError):
        return "interpreter not executable"
    return str(exc)


def _read_answer(path: Path) -> dict[str, Any] | None:

    try:
        answer = load_json_text(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def same_interpreter(python: str | None) -> bool:
    """Whether `python` is the interpreter running patchkit (so work can stay in-process)."""
    if python is None:
        return True
    try:
        return os.path.samefile(python, sys.executable)
    except OSError:
        return False


def stock_files_command(
    tree: Path, version: object | None, selection: Options | None = None, *, every: bool = False
) -> str:
    """The command that puts a tree's stock files back: for a tree `patchkit fetch --dest` laid out
    (its dist-info holds only METADATA and RECORD: no INSTALLER or WHEEL, which installers write),
    laying it out again; for an installed vLLM, reinstalling it. Without `version`, the one the
    tree's own dist-info names: never the word VERSION where the tree says it. `selection`: what
    the fetch takes (a set's: it then lays out that set's files only); `every`: every file of the
    release (--all), for files that may be no set's (a --patch selection's too)."""
    dirs = vllm_metadata_dirs(tree)
    if version is None and len(dirs) == 1:
        version = dirs[0].name[len("vllm-") :].rsplit(".", 1)[0]
    version = hints.release_of(version) if version is not None else None  # a patched wheel's: its release
    with_record = [d for d in dirs if (d / "RECORD").exists()]
    exact = [d for d in with_record if version is not None and d.name.lower() == f"vllm-{version}.dist-info".lower()]
    chosen = next(iter(exact or with_record or dirs), None)  # RECORD removed: the dist-info still tells how it came
    if chosen is not None and not any((chosen / name).exists() for name in ("INSTALLER", "WHEEL")):
        # a --patch diff's files may be no set's: without --all the fetch lays out the sets' alone
        every_file = ["--all"] if every or (selection or hints.current()).adhoc else []
        return hints.command(
            "fetch", str(version or "VERSION"), "--dest", str(tree), "--force", *every_file, chosen=selection
        )
    return hints.pip_reinstall(version)


def in_git_work_tree(root: Path) -> bool:
    """Whether `root` is in a git work tree: a `.git` (a directory, or a worktree's file) in it or a
    directory above (git's own rule, without running git)."""
    return any(os.path.lexists(where / ".git") for where in (root, *root.resolve().parents))


def is_checkout(root: Path) -> bool:
    """A vLLM source checkout: no vllm .dist-info (an egg-info of `pip install -e` at most), so no
    RECORD; pip installs none of its files."""
    return not any(d.name.lower().endswith(".dist-info") for d in vllm_metadata_dirs(root))


def checkout_restore(root: Path, paths: Sequence[str]) -> str | None:
    """How a source checkout's files (pip reinstalls none of them) are put back: `git checkout` in
    a git work tree, else from the user's own source; None for an installed or fetched tree
    (stock_files_command's)."""
    if not is_checkout(root) or not paths:
        return None
    if in_git_work_tree(root):
        return "run `" + shlex.join(["git", "-C", str(root), "checkout", "--", *paths]) + "`"
    return f"restore {', '.join(paths)} from your source"

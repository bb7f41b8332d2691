"""The launch checks: the tree's state (generic), then what the patch set declares.

A set names a script in set.toml (`launch = "launch.py"`) defining `checks(launch)`, which returns
Findings; `launch` is a LaunchContext: the command, the target's and the drafter's configs, and the
installed tree read statically (vLLM is never imported here: `model_interface` asks vLLM itself in
the target's interpreter, through a worker). A static judgement runs on the installed files and,
when it fails, on the files as the series would leave them: when it passes there, the fix is to
run apply (apply_fix).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput, TargetError, escaped, more_said
from patchkit.base.fsutil import first_symlink, inside, judged_inside, read_regular, unsafe_reason
from patchkit.base.hashing import sha256
from patchkit.base.values import Value
from patchkit.checks.parsed import python_tree
from patchkit.distinfo.entry_points import Found, distribution_headers, group_entry_points, pth_directories
from patchkit.engine.guard import ENTRY_POINT_GROUP
from patchkit.launch import observed
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding, VllmVerdict, cannot_judge
from patchkit.launch.model_files import REGISTRY
from patchkit.launch.models import ModelConfig
from patchkit.launch.validation import model_interface
from patchkit.series.requirements import Requirement, parse_requirements
from patchkit.tree.target import flag_letters

TREE_FILE_LIMIT = 64 << 20  # a vLLM source file the checks read: the largest is well under 1 MB
PTH_LIMIT = 1 << 20  # a .pth file, a pyvenv.cfg
GUARD_MODULE = "patchkit_guard"  # the guard's entry point: patchkit_guard:check
LISTING_LIMIT = 20000  # entries of one directory looked at for distributions
Reader = Callable[[str], "bytes | None"]
Judgement = Callable[[Reader], "tuple[bool, str]"]


def apply_fix(patch_set: object | None = None) -> str:
    """The fix a finding the series would settle gives: apply, on the tree and set checked; a set
    only some launches need (set.toml's [needed_by]) named with --set (apply alone would apply
    every set, those this launch does not use too)."""
    name = getattr(patch_set, "name", None)
    if name is not None and getattr(patch_set, "needed_by", None) is not None:
        return f"run {hints.command('apply', chosen=hints.for_set(name))}"
    return f"run {hints.command('apply')}"


UNJUDGED = "cannot judge"  # a contract requirement's verdict on a file that does not parse (checks/contract.py)


@dataclass(eq=False, repr=False)
class LaunchContext(Value):
    """What a set's launch checks read: the command, the tree, the drafter, the release."""

    command: LaunchCommand
    target: ModelConfig
    drafter: ModelConfig | None
    root: Path
    version: Version | None
    patch_set: object | None  # library.PatchSetDef
    read_planned: Reader | None = None  # the files as the series leaves them (None: nothing to apply)
    planned_fix: str | None = None  # the fix that leaves them so (None: apply_fix of the set)
    # a fix of the tree whose outcome cannot be judged (a local edit in a hunk, no stock copy cached):
    # a failed check names it first, then its own fix (the edit may be why it fails)
    pending_fix: str | None = None
    python: str | None = None  # the target's interpreter, asked for vLLM's own answers (None: not asked)
    not_asked: str = "--no-import"  # why vLLM is not asked, when python is None
    reads: dict[str, str | None] | None = None  # when a dict: path -> sha256 of each file read (None: absent)
    _registries: dict[Reader, dict[str, dict[str, tuple[str, str]]]] = field(default_factory=dict)
    _answers: dict[tuple[tuple[str, ...], str], VllmVerdict] = field(default_factory=dict)
    _plugins: Found | None = None
    _distributions: dict[str, list[tuple[str, str]] | None] = field(default_factory=dict)
    # one reader a context: the directories it found real are looked at once
    _tree_read: Reader | None = field(default=None, init=False)

    def read(self, path: str) -> bytes | None:
        """A file of the installed tree; None when absent, unsafe, a symlink leading out of it, or
        not a regular file of at most TREE_FILE_LIMIT bytes (read bounded, never blocking)."""

        if self._tree_read is None:
            self._tree_read = tree_reader(self.root)
        data = self._tree_read(path)
        if self.reads is not None:
            self.reads[path] = sha256(data)
        return data

    def judge(self, check: str, judgement: Judgement, fix: str | None = None) -> Finding:
        """A static judgement on the installed tree; failing, the fix is `patchkit apply` when the
        series makes it pass, else `fix`."""
        ok, message = judgement(self.read)
        if ok:
            return Finding(check, True, message)
        planned = self.read_planned is not None and judgement(self.read_planned)[0]
        by_plan = (self.planned_fix or apply_fix(self.patch_set)) if planned else None
        if by_plan is None and self.pending_fix is not None:
            by_plan = f"{self.pending_fix}; if it still fails: {fix}" if fix else self.pending_fix
        if message.startswith(UNJUDGED):  # a file that does not parse: no verdict, in JSON and counts too
            gives = by_plan or f"{hints.command('status')} names the syntax error and its fix"
            return Finding(check, True, message, gives, judged=False)
        return Finding(check, False, message, by_plan or fix)

    def lacks(self, check: str, path: str) -> Finding | None:
        """The finding of a check that reads `path` when the tree lacks it (a tree from `patchkit
        fetch --dest` holds only the set's files): it cannot judge, and says what gives the file."""
        if observed.lexists(self.root / path) or self.read(path) is not None:  # there, if unreadable: judged
            return None
        version = self.version or "VERSION"
        whole = hints.command("fetch", str(version), "--all", "--dest", str(self.root))
        # over an applied tree too: fetch keeps the files the record says patchkit patched
        gives = f"lay out the whole release ({whole}), or give --python PATH"
        return cannot_judge(check, f"the tree has no {path} (a tree of only the patched files?)", gives)

    def model_interface(self, architecture: str | list[str], function: str) -> VllmVerdict:
        """vLLM's own `function` (of vllm.model_executor.models.interfaces, e.g. supports_eagle3) on the
        class its ModelRegistry resolves for `architecture` (a list: config.json's, of which vLLM builds
        the first it can load), in the target's interpreter (once per question). The verdict is None
        when vLLM was not asked or could not answer (the message says why)."""
        if self.python is None:
            return VllmVerdict(None, f"vLLM's {function}() not asked: {self.not_asked}")
        architectures = [architecture] if isinstance(architecture, str) else list(architecture)
        key = (tuple(architectures), function)
        if key not in self._answers:
            self._answers[key] = model_interface(self.python, self.command, architectures, function)
        return self._answers[key]

    def general_plugins(self) -> list[str]:
        """The vllm.general_plugins entry points vLLM loads in this launch (the launch's VLLM_PLUGINS,
        as vLLM reads it; vLLM's own and patchkit's guard left out), found as importlib.metadata finds
        them on the launch's sys.path (import_path): vLLM runs them before it builds a model, and
        only vLLM itself, asked, tells what they register."""
        return sorted(loaded_plugins(set(self.plugin_files().names), self.command.environ))

    def plugin_files(self) -> Found:
        """The distributions' entry points on the launch's sys.path, and the entry_points.txt files
        there vLLM's plugin loader would hang on or fail on (it reads every one at start, whatever
        VLLM_PLUGINS says). Read once, bounded, never blocking."""
        if self._plugins is None:
            self._plugins = group_entry_points(import_path(self.command, self.root), ENTRY_POINT_GROUP, _own_code)
        return self._plugins

    def distribution(self, name: str) -> list[tuple[str, str]] | None:
        """The METADATA header fields of the distribution `name` the launch's Python finds first on
        its sys.path (import_path), e.g. [("Version", "4.57.6"), ...]; None when it finds none.
        Untrusted text: read once, bounded, never blocking; the caller judges each value."""
        if name not in self._distributions:
            self._distributions[name] = distribution_headers(import_path(self.command, self.root), name)
        observed.noted("distribution", [name], self._distributions[name])  # kept findings: asked again
        return self._distributions[name]

    def launch_python(self) -> str | None:
        """The Python that runs the launch (LaunchCommand.launch_python); None when that cannot be told."""
        try:
            python: str | None = self.command.launch_python()[0]
        except TargetError:
            python = None
        observed.noted("launch_python", [], python)  # kept findings: asked again
        return python

    def still_read(self, seen: object) -> bool:
        """Whether every question a recording (observed.recording) of this launch's checks holds
        gets the same answer now."""
        return observed.holds(seen, {"distribution": self.distribution, "launch_python": self.launch_python})

    def requirements(self, kind: str) -> list[Requirement]:
        """The set's contract entries of one kind that apply to the installed release."""
        contract = getattr(self.patch_set, "contract", ())
        return [r for r in contract if r.kind == kind and (self.version is None or r.applies_to(self.version))]

    def evaluate(self, requirement: Requirement, read: Reader) -> tuple[bool, str]:
        """One contract requirement (patchkit.checks.contract) on the file `read` gives."""
        # lazy: the checks load only when checks run
        from patchkit.checks.contract import _load, evaluate

        result = evaluate(requirement, _load(read(requirement.file), requirement.file), self.version)
        return result.ok, result.message

    @staticmethod
    def requirement(**fields: object) -> Requirement:
        return parse_requirements([fields], "launch check")[0]

    def registry(self, read: Reader | None = None) -> dict[str, dict[str, tuple[str, str]]]:
        """vLLM's model registry read statically: dict name (e.g. _SPECULATIVE_DECODING_MODELS) ->
        architecture -> (module, class)."""
        read = read or self.read
        if read not in self._registries:
            self._registries[read] = _registry_tables(read(REGISTRY))
        return self._registries[read]


def loaded_plugins(names: set[str], environ: dict[str, str]) -> set[str]:
    """Of the general plugins `names`, those vLLM loads in `environ`: all without VLLM_PLUGINS, else
    those its comma-separated list names exactly (vllm.envs: `VLLM_PLUGINS=` loads none)."""
    allowed = environ.get("VLLM_PLUGINS")
    return set(names) if allowed is None else set(names) & set(allowed.split(","))


def few_named(names: list[str], room: int) -> str:
    """`names` in about `room` columns: as many as fit, each shown safely (a control character
    escaped, a long name shortened), then how many more."""
    if not names:
        return ""
    more = more_said(len(names) - 1)
    text = _shown_name(names[0], max(room - len(more), 4)) + more  # at least one, shortened to fit
    shown: list[str] = []
    longest = room if len(names) == 1 else max(room // 2, 8)  # of several, one long name hides none
    for count, name in enumerate(names, 1):  # one more name a time, while the line holds them
        shown.append(_shown_name(name, longest))
        longer = ", ".join(shown) + more_said(len(names) - count)
        if len(longer) > room:
            break
        text = longer
    return text


def _shown_name(name: str, longest: int) -> str:
    safe = escaped(name)
    return safe if len(safe) <= longest else safe[: longest - 1] + "\u2026"


def import_path(command: LaunchCommand, root: Path) -> list[str]:
    """The launch's sys.path where distributions may be, in its order: its first entry (a script's
    directory, `python -m`'s working directory), PYTHONPATH (unless -E or -I), the user's
    site-packages when its Python adds it (user_site), then the tree's and the directories their
    .pth files add. Python's own library holds none."""
    try:
        python, options = command.launch_python()
    except TargetError:  # which Python cannot be told: its own options and user site neither
        python, options = None, []
    flags = flag_letters(options)  # not an -X value's letters
    cwd = command.working_directory()
    given = "" if "E" in flags or "I" in flags else command.environ.get("PYTHONPATH", "")
    places = [command.first_path() or "", *(os.path.join(cwd, entry) for entry in given.split(os.pathsep) if entry)]
    for site in (user_site(python, flags, command.environ, root) if python else None, str(root)):
        places += [site, *pth_directories(site)] if site else []
    return [place for place in places if place]


def user_site(python: str, flags: str, environ: dict[str, str], root: Path) -> str | None:
    """The user's site-packages that `python` run with the options `flags` in `environ` adds to
    sys.path, as site.py decides it: not with -s or -I, PYTHONNOUSERSITE (unless -E), or in a venv
    without the system's packages; under PYTHONUSERBASE, else ~/.local, for its version (its
    interpreter's name, else the tree's path)."""
    ignores_environment = "E" in flags or "I" in flags
    if "s" in flags or "I" in flags or (environ.get("PYTHONNOUSERSITE") and not ignores_environment):
        return None
    version = _python_version(python, root)
    if version is None or not _system_site(python):
        return None
    home = environ["HOME"] if "HOME" in environ else _password_home()
    base = environ.get("PYTHONUSERBASE") or os.path.join(home.rstrip("/") or "/", ".local")
    site = os.path.join(base, "lib", f"python{version}", "site-packages")
    return site if os.path.isdir(site) else None


def launch_python_version(command: LaunchCommand, root: Path) -> str | None:
    """X.Y of the Python the launch runs (as _python_version tells it), None when unknown."""
    try:
        python, _ = command.launch_python()
    except TargetError:  # which Python cannot be told: the tree's path may still say
        python = "/"
    return _python_version(python, root)


def _python_version(python: str, root: Path) -> str | None:
    """X.Y of a Python (X.Yt free-threaded): its real file's name (python3.11), else the
    site-packages `root` is (lib/python3.11/site-packages)."""
    named = re.fullmatch(r"python(\d+\.\d+t?)", os.path.basename(os.path.realpath(python)))
    under = re.search(r"/lib/python(\d+\.\d+t?)/(?:site|dist)-packages$", str(root))
    return named[1] if named else under[1] if under else None


def _system_site(python: str) -> bool:
    """Whether a Python sees the system's packages (and the user's): not in a venv whose pyvenv.cfg
    (beside it or one directory up, as site.venv finds it) says include-system-site-packages false."""
    directory = os.path.dirname(os.path.abspath(python))
    for config in (os.path.join(directory, "pyvenv.cfg"), os.path.join(os.path.dirname(directory), "pyvenv.cfg")):
        if not os.path.isfile(config):
            continue
        try:
            lines = read_regular(config, PTH_LIMIT, follow_symlinks=True).decode("utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return False  # Python itself fails to start there
        settings = {k.strip().lower(): v.strip().lower() for k, _, v in (line.partition("=") for line in lines)}
        return settings.get("include-system-site-packages", "true") == "true"
    return True


def _password_home() -> str:
    """The home directory os.path.expanduser gives without HOME: the user's passwd entry."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/"


def _own_code(module: str) -> bool:
    """Whether an entry point's module is vLLM's own code (vLLM 0.16.0 declares two general
    plugins, its LoRA resolvers: part of the tree judged) or patchkit's guard."""
    return module.split(".")[0] == "vllm" or module == GUARD_MODULE


def tree_reader(root: Path) -> Callable[[str], bytes | None]:
    """A reader of the tree's files as LaunchContext.read reads them (nothing recorded)."""
    plain: set[str] = set()  # the tree's real directories met so far: each is looked at once a reader

    def read(path: str) -> bytes | None:
        if unsafe_reason(path):
            return None
        # no symlink on the way (a moved vllm/, `vllm -> /data/vllm`, is read through its link, as status
        # judges it): the file lies inside, no path need be resolved; else it must resolve inside
        if first_symlink(root, path, plain) is not None and not inside(judged_inside(root, path), root / path):
            return None
        return _tree_file(root / path)

    return read


def _tree_file(path: Path) -> bytes | None:

    try:
        return read_regular(path, TREE_FILE_LIMIT, follow_symlinks=True)
    except OSError:
        return None


def registry_tables(read: Reader) -> dict[str, dict[str, tuple[str, str]]]:
    """The tables of the model registry the tree `read` gives (LaunchContext.registry's, unkept)."""
    return _registry_tables(read(REGISTRY))


def _registry_tables(data: bytes | None) -> dict[str, dict[str, tuple[str, str]]]:
    tree = python_tree(data)
    if tree is None:
        return {}
    tables: dict[str, dict[str, tuple[str, str]]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
            tables[target.id] = _arch_entries(node.value)
    return tables


def _arch_entries(table: ast.Dict) -> dict[str, tuple[str, str]]:
    entries = {}
    for key, value in zip(table.keys, table.values, strict=False):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple)):
            continue
        parts = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(parts) >= 2:
            entries[key.value] = (parts[0], parts[1])
    return entries


def set_checks(context: LaunchContext) -> list[Finding]:
    """What the set's launch script finds (none when the set declares none)."""
    script = getattr(context.patch_set, "launch", None)
    if script is None:
        return []
    module = _load_script(Path(script))
    found = module.checks(context)
    if not isinstance(found, list) or not all(isinstance(f, Finding) for f in found):
        raise BadInput(f"launch checks {script}: checks() must return a list of Findings")
    return found


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"patchkit_launch_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise BadInput(f"launch checks {path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (OSError, SyntaxError) as exc:
        raise BadInput(f"launch checks {path}: {exc}") from None
    if not callable(getattr(module, "checks", None)):
        raise BadInput(f"launch checks {path}: defines no checks(launch)")
    return module

"""The tool-call and reasoning parsers a tree's vLLM registers, read from its files (nothing imported).

vLLM refuses `--enable-auto-tool-choice --tool-call-parser NAME`, and --structured-outputs-config's
reasoning_parser, at start (validate_api_server_args) when NAME is not registered, and
`--reasoning-parser NAME` as it builds the engine, after the model loads: a misspelt name (`deepseekv3`
for `deepseek_v3`) would otherwise pass preflight and fail after `run` started the launch. The names come
from one table in 0.12.0 on (`_TOOL_PARSERS_TO_REGISTER` in the tool_parsers package's __init__.py,
`_REASONING_PARSERS_TO_REGISTER` in vllm/reasoning/'s), and before that from each parser module's
`@...Manager.register_module(...)`, the modules the package's __init__.py imports.
"""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput
from patchkit.base.fsutil import inside
from patchkit.base.values import FrozenValue, frozen
from patchkit.checks.parsed import python_tree
from patchkit.launch import observed
from patchkit.launch.engine import TREE_FILE_LIMIT
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.values import closest, load_json
from patchkit.tree.version import release_version


@frozen
class ParserKind(FrozenValue):
    """One kind of parser a launch names: its option, where its registry is, what vLLM holds to it."""

    option: str  # the launch's option naming the parser
    plugin: str  # the option that loads a parser file of the user's (it may register any name)
    registries: tuple[str, ...]  # the registry's path, newest layout first
    table: str  # the registry's table of lazy registrations (0.12.0 on)
    needs: str | None = None  # the option without which vLLM does not hold the name to its registry


TOOL = ParserKind(
    "tool-call-parser",
    "tool-parser-plugin",
    ("vllm/tool_parsers/__init__.py", "vllm/entrypoints/openai/tool_parsers/__init__.py"),
    "_TOOL_PARSERS_TO_REGISTER",
    needs="enable-auto-tool-choice",
)
REASONING = ParserKind(
    "reasoning-parser",
    "reasoning-parser-plugin",
    ("vllm/reasoning/__init__.py",),
    "_REASONING_PARSERS_TO_REGISTER",
)
KINDS = (TOOL, REASONING)
_MAX_MODULES = 200  # far more parser modules than a release has: an __init__ importing more is not vLLM's

Reader = Callable[[str], "bytes | None"]


def registered(read: Reader, kind: ParserKind = TOOL) -> tuple[str, set[str]] | None:
    """(the registry's path, the parser names it registers), or None when the tree holds no registry
    patchkit can read whole (a tree from `fetch --dest` has none): then nothing is judged."""
    for path in kind.registries:
        tree = python_tree(read(path))
        if tree is None:
            continue
        names = _table(tree, kind.table)
        if names is None:
            names = _decorated(tree, path.rpartition("/")[0], read)
        return (path, names) if names else None
    return None


def findings(
    check: str, options: dict[str, object], version: object, read: Reader, root: Path, *, same_python: bool = False
) -> list[Finding]:
    """The `check` findings for each parser name the launch gives: failed when vLLM refuses it,
    cannot judge when the tree holds no registry patchkit can read (`root`: the tree, for the fix).
    `same_python`: the launch's Python is known to be patchkit's version (Plugin.given)."""
    named_here = given(options, version, same_python=same_python, read=read)
    found = (_judged(check, named, version, read, root) for named in named_here)
    return [*_not_strings(check, options), *(f for f in found if f is not None)]


def tool_parser_refused(options: dict[str, object], read: Reader) -> bool:
    """Whether vLLM refuses the launch's --tool-call-parser at start as a name its release does not
    register: the tree's registry read, the name not in it, and no --tool-parser-plugin that may add it."""
    named = next((n for n in given(options, None, read=read) if n.kind is TOOL), None)
    unregistered = named is not None and (named.plugin is None or named.plugin.fails is not None)
    found = registered(read, TOOL) if unregistered else None
    return found is not None and named is not None and named.name not in found[1]


_STRING_KEYS = ("reasoning_parser", "reasoning_parser_plugin")  # typed `str` in StructuredOutputsConfig


def _not_strings(check: str, options: dict[str, object]) -> list[Finding]:
    """A failed finding for each parser key of --structured-outputs-config that is not a string
    (5, null): vLLM's StructuredOutputsConfig refuses it at start (pydantic: a valid string)."""
    given = _structured(options)
    return [
        Finding(
            check,
            False,
            f"--structured-outputs-config's {key} is {_json_kind(given[key])}, not a string: vLLM refuses"
            " the launch at start (its StructuredOutputsConfig takes only a string there)",
            f'write it as a JSON string ("{key}": "NAME"), or leave it out',
        )
        for key in _STRING_KEYS
        if key in given and not isinstance(given[key], str)
    ]


def _json_kind(value: object) -> str:
    """How JSON names the value's type, with the value when it is short (5, null, true)."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return "an object" if isinstance(value, dict) else "a list"


@frozen
class Named(FrozenValue):
    """A parser name the launch gives: where it gives it, and when vLLM holds it to the registry."""

    kind: ParserKind
    name: str
    spelt: str  # the name as the launch writes it: `--reasoning-parser X`
    refused: str  # when vLLM refuses a name it does not register
    setting: str  # how a fix writes another name: `--reasoning-parser {}`
    plugin: Plugin | None = None  # the parser file of the user's vLLM imports first (it may register the name)


def given(
    options: dict[str, object], version: object, *, same_python: bool = False, read: Reader | None = None
) -> list[Named]:
    """The parser names vLLM holds to its registries for this launch (an empty one is none: vLLM
    skips it), each with the plugin file vLLM imports before it looks the name up, if any (`read`:
    the tree's reader, which tells an import of the plugin's that fails there)."""
    named: list[Named] = []
    tool = options.get(TOOL.option)
    if options.get(TOOL.needs or "") and isinstance(tool, str):
        plugin = Plugin.given(options.get(TOOL.plugin), same_python=same_python, read=read)
        named.append(Named(TOOL, tool, f"--{TOOL.option} {tool}", AT_START, f"write --{TOOL.option} {{}}", plugin))
    # vLLM's start check (validate_api_server_args) reads only --structured-outputs-config's
    # reasoning_parser, with only --reasoning-parser-plugin imported; --reasoning-parser itself is
    # copied over it when vLLM builds the engine (create_engine_config), and looked up there.
    inner = _structured_reasoning_parser(options)
    outer_plugin = Plugin.given(options.get(REASONING.plugin), same_python=same_python, read=read)
    if inner:
        spelt = f"--structured-outputs-config's reasoning_parser {inner}"
        named.append(Named(REASONING, inner, spelt, AT_START, "set that reasoning_parser to {}", outer_plugin))
    outer = options.get(REASONING.option)
    if isinstance(outer, str) and not _no_parser(outer, version) and outer != inner:
        plugin = outer_plugin or Plugin.given(
            _structured(options).get("reasoning_parser_plugin"), same_python=same_python, read=read
        )
        spelt = f"--{REASONING.option} {outer}"
        setting = f"write --{REASONING.option} {{}}"
        named.append(Named(REASONING, outer, spelt, _when_engine_built(version), setting, plugin))
    return named


@frozen
class Plugin(FrozenValue):
    """A parser file of the user's that vLLM imports before it looks a name up, and the names its
    `register_module` decorators give (empty: it may register in a way patchkit does not read)."""

    path: str
    names: frozenset[str]
    unread: str | None = None  # why patchkit read no decorator: bytecode, or syntax its Python lacks
    fails: str | None = None  # the line at which vLLM's import of it fails for sure (nothing after runs)
    mend: str = ""  # how that line imports what it means to

    @classmethod
    def given(cls, value: object, *, same_python: bool = False, read: Reader | None = None) -> Plugin | None:
        """The plugin an option names, when vLLM imports one: a name of more than 3 characters
        (api_server's `len(...) > 3`) of a file spec_from_file_location loads (source, bytecode, an
        extension). vLLM logs a failed import and carries on, so a missing file, or source that
        does not parse, registers nothing: the name is still held, as it is when an import of its
        fails on the tree `read` reads before anything registers. Source that
        patchkit's Python cannot parse may parse in vLLM's newer one (`same_python`: the launch's
        Python is patchkit's version, so it cannot)."""
        if not isinstance(value, str) or len(value) <= 3 or not value.endswith(_LOADABLE):
            return None
        if not value.endswith(_SOURCE):  # bytecode or an extension: loaded, but nothing patchkit reads
            return cls(value, frozenset(), _COMPILED) if _regular(value) else None
        try:  # relative to the directory the launch runs in, as vLLM's import reads it
            data = observed.read_regular(value, TREE_FILE_LIMIT, follow_symlinks=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:  # a fifo, a device, too large: vLLM may load it all the same
            why = f"patchkit does not read it: {getattr(exc, 'strerror', None) or exc}"
            return None if observed.isdir(value) else cls(value, frozenset(), why)
        try:
            parsed = ast.parse(data)
        except SyntaxError:
            return None if same_python else cls(value, frozenset(), _NEWER_SYNTAX)
        except (ValueError, RecursionError, MemoryError):  # NUL bytes, nesting no Python compiles
            return None
        failure = import_failure(parsed, read) if read is not None else None
        if failure is not None and not _registers(parsed.body[: failure[0]]):
            return cls(value, frozenset(), fails=failure[1], mend=failure[2])
        return cls(value, frozenset(_registered_by(parsed)))


_COMPILED = "patchkit does not read bytecode or extension modules"
_NEWER_SYNTAX = f"patchkit's Python {sys.version_info[0]}.{sys.version_info[1]} cannot parse it (vLLM's may be newer)"


def import_failure(tree: ast.Module, read: Reader) -> tuple[int, str, str] | None:
    """(its index in the body, what fails, the fix) of a plugin's first statement that raises
    ImportError on the tree `read` reads, whatever ran before: `from PACKAGE import CLASS` at its top
    level of a parser class the package's lazy table names (0.12.0 on) and its __init__ does not
    bind (the class is only in its own module, which the table names)."""
    unbound: dict[tuple[str, str], str] | None = None
    for index, node in enumerate(tree.body):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        unbound = {**unbound_classes(read, TOOL), **unbound_classes(read, REASONING)} if unbound is None else unbound
        for alias in node.names:
            module = unbound.get((node.module, alias.name))
            if module is not None:
                why = (
                    f"its line {node.lineno} imports {alias.name} from {node.module}, which defines no such name "
                    f"(ImportError: vLLM logs it, and nothing after that line runs)"
                )
                written = f"from {module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                return index, why, f"import {alias.name} from its own module at line {node.lineno} (`{written}`)"
    return None


def unbound_classes(read: Reader, kind: ParserKind) -> dict[tuple[str, str], str]:
    """{(the package, a class): its module} for the classes of the registry's lazy table that the
    package's __init__ does not bind; empty when there is no table, or the __init__ may bind names
    patchkit does not see (a module __getattr__, a star import, globals(), setattr)."""
    for path in kind.registries:
        tree = python_tree(read(path))
        classes = _table_classes(tree, kind.table) if tree is not None else {}
        bound = _bound_names(tree) if tree is not None else None
        if classes and bound is not None:
            package = path.rpartition("/")[0].replace("/", ".")
            return {(package, name): f"{package}.{file}" for name, file in classes.items() if name not in bound}
    return {}


def _table_classes(tree: ast.Module, table: str) -> dict[str, str]:
    """{class: its module's file name} of the module's `TABLE = {name: (file, class), ...}`."""
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [target] if target is not None else []
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == table for t in targets) and isinstance(value, ast.Dict):
            pairs = [[getattr(e, "value", None) for e in getattr(v, "elts", ())] for v in value.values]
            return {str(p[1]): str(p[0]) for p in pairs if len(p) == 2 and all(isinstance(e, str) for e in p)}
    return {}


_DYNAMIC = {"globals", "setattr", "vars", "exec", "eval", "__getattr__", "__dict__"}  # may bind any name


def _bound_names(tree: ast.Module) -> set[str] | None:
    """Every name the module may bind, anywhere in it (more than it binds: never fewer); None when
    it may bind names it does not spell (a star import, a module __getattr__, globals() ...)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            bound.add(node.id)  # stored, or read: a dynamic binder (globals) is read
        elif isinstance(node, ast.Attribute):
            bound.add(node.attr)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return None if "*" in bound or bound & _DYNAMIC else bound


def _registers(statements: list[ast.stmt]) -> bool:
    """Whether `statements` may register a parser (a register_* call or decorator, in any form)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr.startswith("register")
        for statement in statements
        for node in ast.walk(statement)
    )


def _regular(path: str) -> bool:
    """Whether `path` is a regular file (through symlinks, as the import opens it), read or not:
    an extension over the read limit loads all the same."""
    try:
        return observed.regular(path)
    except (OSError, ValueError):
        return False


# what spec_from_file_location gives a loader for; of those, the source patchkit reads
_LOADABLE = tuple(importlib.machinery.all_suffixes())
_SOURCE = tuple(importlib.machinery.SOURCE_SUFFIXES)


AT_START = "it refuses the launch at start"
_ENGINE_CHECKS_REASONING = Version("0.15.0")  # the first release read: 0.15.0-0.33.0 check it as above


def _when_engine_built(version: object) -> str:
    """When vLLM refuses an unregistered --reasoning-parser: in the releases read (0.15.0 on), only
    when it builds the engine, after the model loads; before those, not read: said without a time."""
    release = _release(version)
    if release is not None and release >= _ENGINE_CHECKS_REASONING:
        return (
            "it refuses the launch after the model loads (vLLM checks --reasoning-parser only as it builds the engine)"
        )
    return "it refuses the launch"


def _no_parser(name: str, version: object) -> bool:
    """Whether vLLM reads --reasoning-parser NAME as no parser: an empty name, and from 0.33.0 on
    `none` in any case (its parse_reasoning_parser)."""
    release = _release(version)
    return not name or (name.lower() == "none" and release is not None and release >= Version("0.33.0"))


def _release(version: object) -> Version | None:
    """The release `version` builds on (0.16.0+cu129: 0.16.0); None when unknown."""
    try:
        return release_version(Version(str(version))) if version else None
    except ValueError:
        return None


def _structured(options: dict[str, object]) -> dict[str, Any]:
    """--structured-outputs-config as vLLM reads it (JSON, dotted or from --config: one JSON text by
    now); {} when not given or not an object (its parser refuses that itself)."""
    value = options.get("structured-outputs-config")
    if isinstance(value, str):
        try:
            value = load_json(value, "--structured-outputs-config", strict=False)
        except BadInput:
            return {}
    return value if isinstance(value, dict) else {}


def _structured_reasoning_parser(options: dict[str, object]) -> str | None:
    name = _structured(options).get("reasoning_parser")
    return name if isinstance(name, str) and name else None  # vLLM's `(name := ...) and ...`: "" is none


def _judged(check: str, named: Named, version: object, read: Reader, root: Path) -> Finding | None:
    """A failed `check` finding when vLLM's registry lacks the name, a cannot-judge one when the
    registry cannot be read, None when it registers it."""
    found = registered(read, named.kind)
    if found is None:
        return _unread(check, named, version, read, root)
    path, names = found
    if named.name in names:
        return None
    if named.plugin is not None and named.plugin.fails is not None:
        return _failing_plugin(check, named, named.plugin, version, path)
    if named.plugin is not None:
        return _maybe_the_plugins(check, named, version, path)
    vllm = f"vLLM {version}" if version else "this vLLM"
    what = named.kind.option.removesuffix("-parser")  # tool-call, reasoning
    message = f"{named.spelt}: {vllm} registers no {what} parser of that name ({path}): {named.refused}"
    return Finding(check, False, message, _fix(named, names))


def _failing_plugin(check: str, named: Named, plugin: Plugin, version: object, path: str) -> Finding:
    """A failed `check` finding for a name the registry lacks when the `plugin` vLLM imports first
    fails at an import before it registers anything."""
    vllm = f"vLLM {version}" if version else "this vLLM"
    what = named.kind.option.removesuffix("-parser")
    message = (
        f"{named.spelt}: {vllm} registers no {what} parser of that name ({path}), and {plugin.path}, which "
        f"it imports first, registers none either: {plugin.fails}: {named.refused}"
    )
    fix = f"in {plugin.path}, {plugin.mend}, then run the command again"
    return Finding(check, False, message, fix)


def _maybe_the_plugins(check: str, named: Named, version: object, path: str) -> Finding:
    """Cannot judge a name the registry lacks when the plugin vLLM imports first may register it:
    patchkit runs no plugin, and its import may fail (vLLM logs that and carries on, then refuses
    the name); it reads only `register_module` decorators of a source file."""
    plugin = named.plugin.path if named.plugin else "the plugin"
    vllm = f"vLLM {version}" if version else "this vLLM"
    what = named.kind.option.removesuffix("-parser")
    if named.plugin is not None and named.name in named.plugin.names:
        reason = f"{named.spelt}: {plugin} registers it, if vLLM's import of it succeeds (patchkit runs no plugin)"
    elif named.plugin is not None and named.plugin.unread:
        reason = (
            f"{named.spelt}: {vllm} registers no {what} parser of that name ({path}); {plugin}, which it "
            f"imports first, may: {named.plugin.unread}"
        )
    else:
        reason = (
            f"{named.spelt}: {vllm} registers no {what} parser of that name ({path}), and no register_module "
            f"decorator in {plugin}, which it imports first, names it"
        )
    refused = named.refused.removeprefix("it ")
    return cannot_judge(
        check, reason, f"make sure {plugin} imports in vLLM's venv and registers {named.name}: else vLLM {refused}"
    )


def _unread(check: str, named: Named, version: object, read: Reader, root: Path) -> Finding:
    """Cannot judge the parser's name: never a silent pass (a `fetch --dest` tree has no registry)."""
    kind = named.kind
    held = [path for path in kind.registries if read(path) is not None]
    what = kind.option.removesuffix("-parser")
    odd = [(path, why) for path in kind.registries if (why := _not_read(root, path)) is not None]
    if held:  # there, but not a registry patchkit reads whole (a module it imports is missing or odd)
        reason = f"{named.spelt}: patchkit cannot read the {what} parsers {held[0]} registers"
    elif odd:  # there, but nothing patchkit reads: a fifo, a device, a link out of the tree, too large
        reason = f"{named.spelt}: the tree's {odd[0][0]} is {odd[0][1]}, not a registry patchkit reads"
    else:
        reason = f"{named.spelt}: the tree has no {kind.registries[0]} (a tree of only the patched files?)"
    # as LaunchContext.lacks says it; --python alone, since this check reads the tree --target names
    whole = hints.command("fetch", str(version or "VERSION"), "--all", "--dest", str(root))
    gives = f"lay out the whole release ({whole}), or check the venv you launch (--python PATH in place of --target)"
    return cannot_judge(check, reason, gives)


_SPECIAL = (
    (stat.S_ISFIFO, "a fifo"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _not_read(root: Path, path: str) -> str | None:
    """What the tree's `path` is, when it is there but the tree's reader reads nothing from it
    (None: absent, or a regular file in the tree within the limit)."""
    file = root / path
    try:
        info = file.lstat()
    except (OSError, ValueError):
        return None
    link = stat.S_ISLNK(info.st_mode)
    target = os.path.realpath(file) if link else None
    try:
        info = file.stat()
    except (OSError, ValueError):
        return f"a link to {target}, which is not there" if link else None
    kind = next((said for test, said in _SPECIAL if test(info.st_mode)), None)
    if link and not inside(root, file):
        return f"a link to {target} ({kind}), outside the tree" if kind else f"a link to {target}, outside the tree"
    if kind is not None:
        return f"a link to {target}, {kind}" if link else kind
    if info.st_size > TREE_FILE_LIMIT:
        return f"a file of {info.st_size:,} bytes, over the {TREE_FILE_LIMIT >> 20} MiB patchkit reads of a source file"
    return None


def _fix(named: Named, names: set[str]) -> str:
    close = _closest(named.name, names)
    if close is not None:
        return f"did you mean {close}? {named.setting.format(close)}"
    where = "write" if named.setting.startswith("write") else named.setting.format("").rstrip()
    return f"{where} one of {', '.join(sorted(names))}, or load your own with --{named.kind.plugin}"


def _closest(name: str, names: set[str]) -> str | None:
    """The registered name `name` misspells: the same but for case, `-` and `_`, else the closest."""

    def plain(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "")

    same = sorted(n for n in names if plain(n) == plain(name))
    if same:
        return same[0]
    return closest(name, sorted(names), cutoff=0.75)


def _table(tree: ast.Module, table: str) -> set[str] | None:
    """The keys of the module's `TABLE = {...}` (None: it has no such table)."""
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [target] if target is not None else []
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == table for t in targets) and isinstance(value, ast.Dict):
            return {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return None


def _decorated(tree: ast.Module, package: str, read: Reader) -> set[str]:
    """The names each module the package's __init__ imports (`from .x import ...`) registers with
    `@...Manager.register_module(...)`; empty when a module cannot be read (not judged)."""
    modules = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]
    names: set[str] = set()
    for module in modules[:_MAX_MODULES]:
        parsed = python_tree(read(f"{package}/{module}.py"))
        if parsed is None:
            return set()
        names |= _registered_by(parsed)
    return names


def _registered_by(tree: ast.Module) -> set[str]:
    """The names a module's `register_module(...)` decorators give (a name, a list of names, or name=)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for call in node.decorator_list:
            if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "register_module":
                given = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "name")]
                names |= {text for value in given for text in _strings(value)}
    return names


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []

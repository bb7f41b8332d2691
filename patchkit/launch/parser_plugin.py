"""A --tool-parser-plugin: a file of the user's that vLLM's API server imports before it looks the
--tool-call-parser name up. Its parser may be built on one vLLM ships (a subclass of KimiK2ToolParser
registered under a name of its own): the tool-call set that patches that parser then serves the
launch, whatever name it gives. Read statically, bounded and never blocking (through observed.py):
its imports of a parser module the set patches (or of a class defined there, from the parsers'
package where it defines it: an import of one it does not define stops the plugin there), or a
string naming a parser the set serves (ToolParserManager.get_tool_parser("kimi_k2")).
A plugin patchkit cannot read (bytecode, an extension, a fifo, syntax its Python lacks), or one that
imports or looks a parser up by a name it computes (importlib, __import__, get_tool_parser(NAME)),
may use it; so may a module of the user's that it imports (found before the site's packages), which
patchkit does not follow."""

from __future__ import annotations

import ast
import dataclasses
import importlib.machinery
import os
import sys
from collections.abc import Callable, Iterable

from packaging.version import Version

from patchkit.base.errors import SHOWN_PROBLEMS, PatchkitError, escaped, more_said
from patchkit.checks.parsed import python_tree
from patchkit.launch import observed, toolparsers
from patchkit.launch.command import LaunchCommand
from patchkit.launch.relevance import LaunchNeeds
from patchkit.series import library
from patchkit.series.library import LaunchRule, PatchSetDef
from patchkit.series.patchfile import touched_paths

PLUGIN_LIMIT = 4 << 20  # a parser plugin: a few KB of Python; a larger file is not judged
OPTION = "tool-parser-plugin"
# the plugin's own modules looked for: the filesystem questions asked (a stat, or a listing's
# NAMES_PER_QUESTION names: about a stat's time) before the rest is "cannot judge", ~50 ms
QUESTIONS = 10_000
NAMES_PER_QUESTION = 25
LISTED = 20_000  # names of one sys.path entry listed; a larger directory has each module asked for by name
_LOADABLE = tuple(importlib.machinery.all_suffixes())  # ".so" ends every extension's suffix, any ABI's
# where the releases keep the tool parsers (0.13 on, before): a patched file there is a parser module
PARSER_PACKAGES = ("vllm/tool_parsers/", "vllm/entrypoints/openai/tool_parsers/")

Reader = Callable[[str], "bytes | None"]
Use = tuple[bool | None, str]  # (the plugin uses the set: True, False, None: cannot tell; what it found)


def plugin_path(command: LaunchCommand) -> str | None:
    """The plugin file vLLM imports for the tool parser (None: none): --tool-parser-plugin of more than
    3 characters (api_server's `len(...) > 3`), under --enable-auto-tool-choice, where an API server runs."""
    value = command.options.get(OPTION)
    if not command.auto_tool_choice or command.headless or not isinstance(value, str) or len(value) <= 3:
        return None
    return value


def with_plugin_needs(
    needs: LaunchNeeds, sets: dict[str, PatchSetDef], command: LaunchCommand, version: Version | None, read: Reader
) -> LaunchNeeds:
    """`needs` with each tool-call set the launch's tool parser plugin uses needed (named by what the
    plugin does), and each it may use, unread, in `maybe` (never "not used by this launch")."""
    if plugin_path(command) is None or version is None:
        return needs
    unneeded, named, maybe = dict(needs.unneeded), dict(needs.named), dict(needs.maybe)
    for name in needs.unneeded:
        parsers = _parsers(sets[name].needed_by) if name in sets else ()
        try:
            patched = touched_paths(library.select(sets[name], version).patches) if parsers else []
        except PatchkitError:  # no series for this release: nothing of the set's to judge
            patched = []
        use = plugin_use(command, patched, parsers, read)
        if use is not None and use[0]:
            del unneeded[name]
            named[name] = use[1]
        elif use is not None and use[0] is None:
            maybe[name] = use[1]
    return dataclasses.replace(needs, unneeded=unneeded, named=named, maybe=maybe)


def _parsers(rule: LaunchRule | None) -> tuple[str, ...]:
    """The tool parser names a set's rule serves (alone, or in a `when` entry)."""
    if rule is None:
        return ()
    return (*rule.tool_call_parsers, *(name for entry in rule.when for name in entry.tool_call_parsers))


def plugin_use(command: LaunchCommand, patched: Iterable[str], parsers: Iterable[str], read: Reader) -> Use | None:
    """Whether the launch's tool parser plugin uses a set that patches the tree's files `patched` and
    serves the parser names `parsers` (None: no plugin in the launch, or the set patches no parser)."""
    given = plugin_path(command)
    modules = {
        path[:-3].replace("/", "."): path
        for path in patched
        if path.startswith(PARSER_PACKAGES) and path.endswith(".py")
    }
    modules = {module: path for module, path in modules.items() if not module.endswith(".__init__")}
    if given is None or not modules:
        return None
    where = os.path.join(command.working_directory(), given)
    shown = f"--{OPTION} {escaped(given)}"
    if not given.endswith(".py"):
        return (None, f"{shown} is not Python source patchkit reads") if observed.exists(where) else (False, "")
    try:
        data = observed.read_regular(where, PLUGIN_LIMIT, follow_symlinks=True)
    except FileNotFoundError:
        return False, ""  # vLLM logs the failed import and carries on: nothing of it runs
    except (OSError, ValueError) as exc:
        return None, f"{shown} cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if not data.strip():
        return False, ""
    tree = python_tree(data)
    if tree is None:
        return None, f"{shown} is not Python patchkit's parser reads"
    failure = toolparsers.import_failure(tree, read)
    if failure is not None:  # vLLM's import of it stops there: what follows never runs
        tree = ast.Module(body=tree.body[: failure[0]], type_ignores=[])
    unbound = toolparsers.unbound_classes(read, toolparsers.TOOL)
    classes = {
        name: module
        for module, path in modules.items()
        for name in _classes(read(path))
        if (module.rpartition(".")[0], name) not in unbound  # the package gives no such name (0.12.0 on)
    }
    found = _imported(tree, modules, classes) or _named(tree, {*parsers, *classes, *modules})
    if found:
        return True, f"{shown} {found}"
    dynamic = _by_name(tree)
    if dynamic:
        return None, f"{shown} imports modules by a name it computes ({dynamic})"
    looked_up = _looked_up(tree)
    if looked_up:
        return None, f"{shown} looks a tool parser up by a name it computes ({looked_up})"
    own = _own_module(tree, command)
    return (None, f"{shown} imports {own}") if own else (False, "")


def _imported(tree: ast.Module, modules: dict[str, str], classes: dict[str, str]) -> str | None:
    """How the plugin imports a patched parser module (or a class of one, from its package)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    return f"imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if node.module in modules or f"{node.module}.{alias.name}" in modules:
                    return f"imports {node.module}"
                if alias.name in classes and classes[alias.name].rpartition(".")[0] == node.module:
                    return f"imports {alias.name} (vLLM's, from {classes[alias.name]})"
        elif isinstance(node, ast.Attribute) and node.attr in classes:  # tool_parsers.KimiK2ToolParser
            return f"uses {_shown(node)} (vLLM's, from {classes[node.attr]})"
    return None


def _by_name(tree: ast.Module) -> str | None:
    """What the plugin imports modules by a string or computed name with (importlib, __import__):
    which module that is, patchkit does not judge."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.partition(".")[0] == "importlib" for a in node.names):
            return "importlib"
        if isinstance(node, ast.ImportFrom) and (node.module or "").partition(".")[0] == "importlib":
            return "importlib"
        if (isinstance(node, ast.Name) and node.id == "__import__") or (
            isinstance(node, ast.Attribute) and node.attr == "__import__"
        ):
            return "__import__"
    return None


def _own_module(tree: ast.Module, command: LaunchCommand) -> str | None:
    """A module the plugin imports that the launch's Python finds before its site's packages (its
    first sys.path entry, PYTHONPATH): the user's own code, which may build on a patched parser.
    Each place is listed once, as Python's finder does; past QUESTIONS, what is left is not followed."""
    tops = sorted({name.partition(".")[0] for name in _imported_names(tree)} - set(sys.stdlib_module_names) - {"vllm"})
    places = _own_places(command) if tops else []
    left: int | None = QUESTIONS
    for index, place in enumerate(places):
        found, left = _found_in(place, tops, left) if left is not None and left > 0 else (None, None)
        if found is not None:
            return found
        if left is None:
            shown = ", ".join(tops[:SHOWN_PROBLEMS]) + more_said(len(tops) - SHOWN_PROBLEMS)
            return (
                f"modules ({shown}) patchkit did not look for past {index:,} of the {len(places):,} places the "
                "launch's Python finds modules in before its site's packages (more than it asks about)"
            )
    return None


def _imported_names(tree: ast.Module) -> set[str]:
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level and n.module}


def _own_places(command: LaunchCommand) -> list[str]:
    """The launch's sys.path entries before its site's packages: its first one, PYTHONPATH's (not
    with -E or -I), each once."""
    flags = "".join(command.interpreter_settings()[0])
    given = "" if "E" in flags or "I" in flags else command.environ.get("PYTHONPATH", "")
    cwd = command.working_directory()
    places = (command.first_path(), *(os.path.join(cwd, e) for e in given.split(os.pathsep) if e))
    return list(dict.fromkeys(place for place in places if place))


def _found_in(place: str, tops: list[str], left: int) -> tuple[str | None, int | None]:
    """(what of `tops` the sys.path entry `place` holds, None: nothing; the questions left after,
    None when they ran out before `place` was read whole). A listing costs a question per
    NAMES_PER_QUESTION names; a directory too large to list has each module asked for by name."""
    try:
        names = observed.listing(place, LISTED + 1)
    except NotADirectoryError:
        if observed.isfile(place):  # zipimport reads an archive there; patchkit does not
            return f"{tops[0]}, maybe from {escaped(place)}, an archive patchkit does not read", left - 2
        return None, left - 2
    except OSError:
        return None, left - 1  # gone, or not searchable: Python finds nothing there either
    if len(names) > LISTED:
        return _asked_by_name(place, tops, left - 1 - LISTED // NAMES_PER_QUESTION)
    left -= 1 + len(names) // NAMES_PER_QUESTION
    modules = {name.partition(".")[0]: name for name in names if name.endswith(_LOADABLE)}
    listed = set(names)
    for top in tops:
        if top in modules:
            return _users(top, os.path.join(place, modules[top])), left
        if top in listed:  # a package, or a namespace package's portion, if a directory
            if left <= 0:
                return None, None
            left -= 1
            if observed.isdir(os.path.join(place, top)):
                return _users(top, os.path.join(place, top)), left
    return None, left


def _asked_by_name(place: str, tops: list[str], left: int) -> tuple[str | None, int | None]:
    """_found_in's answer for a directory too large to list: each module's names asked for."""
    for top in tops:
        for name in (top, *(top + suffix for suffix in _LOADABLE)):
            if left <= 0:
                return None, None
            left -= 1
            where = os.path.join(place, name)
            if observed.isdir(where) if name == top else observed.exists(where):
                return _users(top, where), left
    return None, left


def _users(top: str, where: str) -> str:
    return f"{top}, a module of the user's patchkit does not follow ({escaped(where)})"


def _named(tree: ast.Module, names: set[str]) -> str | None:
    """A string the plugin holds that is a parser name the set serves, or a patched parser module or
    class (a lookup by name: get_tool_parser("kimi_k2"), getattr(parsers, "KimiK2ToolParser"))."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return f"names the tool parser {node.value!r}"
    return None


_REGISTRIES = ("tool_parsers", "lazy_parsers")  # ToolParserManager's tables: name -> class, name -> (module, class)


def _looked_up(tree: ast.Module) -> str | None:
    """How the plugin looks a parser up by a name that is no string it holds (a variable, an f-string):
    ToolParserManager.get_tool_parser(NAME), its tables by NAME, getattr on the parsers' package.
    Which parser that gives, patchkit does not judge."""
    packages = _package_names(tree)
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and (
                func.attr == "get_tool_parser" or (func.attr == "get" and _table(func.value))
            ):
                key = node.args[0]
            elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) > 1:
                key = node.args[1] if _root(node.args[0]) in packages else None
        elif isinstance(node, ast.Subscript) and _table(node.value):
            key = node.slice
        if key is not None and not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return _shown(node)
    return None


def _shown(node: ast.AST) -> str:
    """The plugin's expression as a message shows it (its first 80 characters); one nested deeper than
    ast.unparse recurses, which Python's parser still reads, by its line."""
    try:
        return escaped(ast.unparse(node)[:80])
    except RecursionError:
        return f"the expression on its line {getattr(node, 'lineno', '?')}, nested too deep to show"


def _table(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in _REGISTRIES


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (`vllm` of vllm.tool_parsers)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _package_names(tree: ast.Module) -> set[str]:
    """The names the plugin binds to vLLM or its parsers' package (`import vllm.tool_parsers as tp`,
    `from vllm import tool_parsers`), and ToolParserManager."""
    bound = {"ToolParserManager"}
    packages = {package.rstrip("/").replace("/", ".") for package in PARSER_PACKAGES}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name.partition(".")[0] for a in node.names if a.name.partition(".")[0] == "vllm"}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            bound |= {a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in packages}
            bound |= {a.asname or a.name for a in node.names if a.name == "ToolParserManager"}
    return bound


def _classes(source: bytes | None) -> set[str]:
    tree = python_tree(source)
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)} if tree is not None else set()

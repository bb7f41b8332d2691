"""What the tree's override chain (override_quantization_method, run by ModelConfig._verify_quantization
before it compares) may take, read from the modules quantization/__init__.py imports (a package: the
modules its __init__ imports): the checkpoint methods an override tests, as glob patterns ("*": every
one), and the --quantization values an override takes whatever the checkpoint, its return guarded by
tests of the user's method alone (0.34's humming: `"humming" if user_quant == "humming" else None`)."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatchcase
from glob import escape

from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import Reader

QUANTIZATION = "vllm/model_executor/layers/quantization"
OVERRIDE = b"def override_quantization_method("
CHECKED = re.compile(r"method", re.IGNORECASE)  # the names an override tests a checkpoint's method by
TEXT_CALLS = ("lower", "upper", "strip", "casefold")  # still the method's text
EDGE_CALLS = {"startswith": "{}*", "endswith": "*{}"}
SELF = ("cls", "self")


def tree_overrides(read: Reader) -> tuple[set[str], set[str]]:
    """(the checkpoint methods some override may take, as lowercased glob patterns; the user's methods
    an override takes for any checkpoint, "*" for every one)."""
    taken: set[str] = set()
    anyway: set[str] = set()
    for data in _override_sources(read):
        tree = python_tree(data)
        taken |= {"*"} if tree is None else set()  # an override no Python parses here: it may take any
        for override in _overrides(tree):
            try:
                given, only = _taken_anyway(override[0])
            except RecursionError:  # a hostile file's elif chain past the stack: read as taking every checkpoint
                given, only = set(), False
            taken |= _compared(override) or (set() if only else {"*"})  # gguf's: the user's -q alone
            anyway |= given
    return taken, anyway


def takes(patterns: set[str], method: str) -> bool:
    return any(fnmatchcase(method, pattern) for pattern in patterns)


def _override_sources(read: Reader) -> list[bytes]:
    """The sources defining override_quantization_method among the modules the package's __init__
    imports (X.py, else X/__init__.py and the modules it imports relatively), each read once."""
    seen: set[str] = set()
    found = []
    for path in _imported(python_tree(read(f"{QUANTIZATION}/__init__.py")), QUANTIZATION):
        module = _first(read, seen, f"{path}.py")
        package = None if module is not None else _first(read, seen, f"{path}/__init__.py")
        inner = [_first(read, seen, f"{p}.py") for p in _imported(python_tree(package), path)] if package else []
        found += [data for data in (module, package, *inner) if data is not None and OVERRIDE in data]
    return found


def _first(read: Reader, seen: set[str], path: str) -> bytes | None:
    if path in seen:
        return None
    seen.add(path)
    return read(path)


def _imported(tree: ast.Module | None, here: str) -> list[str]:
    """The module paths (no suffix) a module's `from X import ...` statements name: relative ones
    (one level) under `here`, absolute ones from the tree's root."""
    paths = []
    for node in ast.walk(tree or ast.Module([], [])):
        if isinstance(node, ast.ImportFrom) and node.module and node.level <= 1:
            where = node.module.replace(".", "/")
            paths.append(f"{here}/{where}" if node.level else where)
    return paths


def _overrides(tree: ast.Module | None) -> list[list[ast.FunctionDef]]:
    """Each override_quantization_method of a module that may return a method (base_config's returns
    None only), with the module's functions it calls (is_gptq_marlin_compatible, ...)."""
    functions = [n for n in ast.walk(tree or ast.Module([], [])) if isinstance(n, ast.FunctionDef)]
    found = []
    for function in (f for f in functions if f.name == "override_quantization_method"):
        returned = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)]
        if all(value is None or (isinstance(value, ast.Constant) and value.value is None) for value in returned):
            continue
        called = {
            n.func.attr for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        called |= {n.func.id for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        found.append([function, *(f for f in functions if f.name in called)])
    return found


def _compared(functions: list[ast.FunctionDef]) -> set[str]:
    """The texts the functions test a method's name against (==, in, startswith, ...) as patterns."""
    patterns: set[str] = set()
    nodes = [n for function in functions for n in ast.walk(function)]
    # a name set from the method's read (petit's `algo = (qc.get("quant_algo") or qc.get("quant_method")...`);
    # not a quant_algo alone: a checkpoint's algorithm (FP8, NVFP4) is tested once its method is
    read = {
        t.id
        for n in nodes
        if isinstance(n, ast.Assign) and _reads_method(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EDGE_CALLS:
            if _names_method(node.func.value, read):
                edge = EDGE_CALLS[node.func.attr]
                patterns |= {edge.format(escape(text)) for arg in node.args for text in _texts(arg)}
            continue
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(_names_method(side, read) for side in sides):
            continue
        within = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and not _names_method(node.left, read)
        patterns |= {f"*{escape(text)}*" if within else escape(text) for side in sides for text in _texts(side)}
    return patterns


def _texts(node: ast.AST) -> set[str]:
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {i.value.lower() for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _names_method(node: ast.AST, read: set[str]) -> bool:
    """A name of a method (quant_method) or one set from its read (`read`), a .get("quant_method") of
    a config, or either as text (.lower(), str(...))."""
    while True:  # a loop: a hostile file's chain of .lower() calls is not a recursion
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TEXT_CALLS:
            node = node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Name):
        return bool(CHECKED.search(node.id)) or node.id in read
    return _method_read(node)


def _method_read(node: ast.AST) -> bool:
    """A .get("quant_method", ...) or ["quant_method"] of a config."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "quant_method"
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args[0].value == "quant_method"
    return False


def _reads_method(node: ast.AST) -> bool:
    return any(_method_read(n) for n in ast.walk(node))


def _taken_anyway(function: ast.FunctionDef) -> tuple[set[str], bool]:
    """The user's methods (its second parameter after cls) the override returns a method for on a path
    whose every test, and the value returned, read that parameter alone (or names set from it alone):
    "*" every one, "?" some this reading does not tell; and whether every path returning a method is such."""
    params = [a.arg for a in function.args.args]
    params = params[1:] if params and params[0] in SELF else params
    if len(params) < 2:
        return set(), False
    users = {params[1]}
    for node in ast.walk(function):  # is_valid_user_quant = user_quant is None or user_quant == "marlin"
        if isinstance(node, ast.Assign) and _reads_only(node.value, users):
            users |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found: set[str] = set()
    paths = _returning_paths(function.body, [])
    only = [(g, v) for g, v in paths if _reads_only(v, {*users, *SELF}) and all(_reads_only(t, users) for t, _ in g)]
    for guards, _ in only:
        values = _conjoined([_values(test, truth) for test, truth in guards])
        found |= {"?"} if values is None else {"*"} if values is ANY else {v for v in values if isinstance(v, str)}
    return found, bool(paths) and len(only) == len(paths)


ANY: frozenset[object] = frozenset({"*"})  # no test on the user's value


def _values(test: ast.expr, truth: bool) -> frozenset[object] | None:
    """The user's values (None among them: no -q) for which `test` is `truth`; ANY: every one; None:
    not told (a test of it this reading does not follow: a name set from it, `not in` a list, ...)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _values(test.operand, not truth)
    if isinstance(test, ast.BoolOp):
        parts = [_values(value, truth) for value in test.values]
        if isinstance(test.op, ast.And) == truth:  # all of them hold
            return _conjoined(parts)
        told = [part for part in parts if part is not None]  # one of them holds
        return None if len(told) < len(parts) else ANY if ANY in told else frozenset().union(*told)
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    constants = frozenset(n.value for n in ast.walk(test) if isinstance(n, ast.Constant))
    if isinstance(test.ops[0], ast.Eq | ast.In | ast.Is) == truth:
        return constants
    return ANY if constants == {None} else None  # `is not None`: any -q given


def _conjoined(parts: list[frozenset[object] | None]) -> frozenset[object] | None:
    found = ANY
    for part in parts:
        if part is None:
            return None
        found = part if found is ANY else found if part is ANY else found & part
    return found


def _reads_only(node: ast.AST, names: set[str]) -> bool:
    return all(n.id in names for n in ast.walk(node) if isinstance(n, ast.Name))


Guards = list[tuple[ast.expr, bool]]  # the tests on the way to a return, each with the value it takes there
Path = tuple[Guards, ast.expr]  # and the value returned


def _returning_paths(body: list[ast.stmt], guards: Guards) -> list[Path]:
    """Each return of a method (not None) in `body`, with the tests guarding it: those of the ifs it
    is in, and those of the earlier ifs that return or raise (the path passed them, false)."""
    paths: list[Path] = []
    for statement in body:
        if isinstance(statement, ast.Return):
            return paths + _returned(statement.value, guards)
        if isinstance(statement, ast.If):
            paths += _returning_paths(statement.body, [*guards, (statement.test, True)])
            paths += _returning_paths(statement.orelse, [*guards, (statement.test, False)])
            if _leaves(statement.body) and not statement.orelse:
                guards = [*guards, (statement.test, False)]
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list):
                paths += _returning_paths([s for s in inner if isinstance(s, ast.stmt)], guards)
        for handler in getattr(statement, "handlers", []):
            paths += _returning_paths(handler.body, guards)
    return paths


def _returned(value: ast.expr | None, guards: Guards) -> list[Path]:
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return []
    if isinstance(value, ast.IfExp):
        when, otherwise = [*guards, (value.test, True)], [*guards, (value.test, False)]
        return _returned(value.body, when) + _returned(value.orelse, otherwise)
    return [(guards, value)]


def _leaves(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Raise)

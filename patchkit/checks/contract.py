"""contract: what must hold in the patched code, declared by the patch set as data, judged on the AST.

A set declares requirements in set.toml, inline as ``[[contract]]`` tables or as ``contract =
"contract.toml"``, a file of ``[[requirement]]`` tables beside set.toml. vLLM is never imported:
each requirement is evaluated on the parsed source of one file. Every entry has

    file      the file, relative to the tree root (vllm/...)
    kind      one of the kinds below
    versions  optional specifier: the vLLM releases the entry applies to (others skip it);
              where it applies, a missing file fails
    reason    optional: why it must hold, shown when it does not

and per kind (a class or function is named by its dotted path in the module: "Cls", "Cls.method",
"function"):

    base          class, base        the class lists `base` among its bases (by name or dotted name
                                     ending in it), directly or through a base class of this module
    imported      names              each name is bound at module level at run time: imported (import
                                     or from-import) or defined (class, def, assignment); not counted:
                                     names bound only under `if TYPE_CHECKING`
    methods       class, methods     each method is defined on the class or a base class of this module
    attribute     attribute, access  `function` (or, without it, the module) loads / stores / references
                  [on, function]     the attribute; `on` restricts the object (dotted suffix, e.g. self)
    model-types   function, variable the list literal assigned to `variable` in `function` accepts each
                  model_types        model type, judged as the code itself matches the list: a
                                     comprehension `entry in model_type for entry in variable` is a
                                     substring test; `model_type in variable` is membership
    guarded-read  attribute, target  no read of `<on>.<attribute>` (in `function`, or the module) is
                  [on, function]     reachable for `target` = {class, has, lacks}: a target of that
                                     class whose object has the attributes `has` and lacks `lacks`
                                     (and `attribute`). A read is guarded when an enclosing branch is
                                     closed to the target: an if/elif/else or conditional expression
                                     or and/or whose test is decided for it (a string comparison or
                                     membership test with the class name, isinstance() of the class,
                                     hasattr(obj, name) or getattr(obj, name, <falsy>) on the object
                                     read, combined with not/and/or), or a try whose handler catches
                                     AttributeError. Other tests are taken as open.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from functools import lru_cache, partial

from packaging.version import Version

from patchkit.base import remembered
from patchkit.checks import WARNING, CheckContext, CheckResult
from patchkit.checks.parsed import LARGEST_KEPT, parsed
from patchkit.series.requirements import ACCESSES, Requirement, Target

NAME = "contract"
_BARE_VERB = {"load": "read", "store": "assign", "any": "reference"}


# ---------------------------------------------------------------------------------------------
# The check


class ContractCheck:
    name = NAME

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        requirements = ctx.patch_set.contract if ctx.patch_set is not None else ()
        results: list[CheckResult | Requirement] = []  # a requirement: its file's verdict goes there
        by_file: dict[str, list[Requirement]] = {}
        for req in requirements:
            if ctx.version is None:
                if req.versions is not None:
                    results.append(
                        CheckResult(
                            NAME,
                            req.file,
                            False,
                            f"not evaluated: the vLLM version is "
                            f"unknown and this {req.kind} requirement applies to "
                            f"{req.versions}",
                            level=WARNING,
                        )
                    )
                    continue
            elif not req.applies_to(ctx.version):
                continue
            results.append(req)
            by_file.setdefault(req.file, []).append(req)
        verdicts = {file: iter(_file_verdicts(reqs, ctx.read(file), ctx.version)) for file, reqs in by_file.items()}
        return [next(verdicts[r.file]) if isinstance(r, Requirement) else r for r in results]


def _file_verdicts(reqs: list[Requirement], data: bytes | None, version: Version | None) -> list[CheckResult]:
    """The requirements on one file, judged on its content: remembered across runs by everything
    they depend on (base/remembered.py), else evaluated on its parsed tree."""
    if data is None:
        return [evaluate(req, None, version) for req in reqs]
    code = remembered.code_of("patchkit.checks.contract", "patchkit.series.requirements")
    key = remembered.key_of(
        [code, str(version), reqs[0].file, hashlib.sha256(data).hexdigest(), [repr(r) for r in reqs]]
    )
    known = remembered.recall(NAME, key)
    if isinstance(known, list) and len(known) == len(reqs):
        try:
            return [CheckResult(**row) for row in known]
        except (TypeError, ValueError):  # ValueError: a level that is no CheckLevel
            pass
    module = _load(data, reqs[0].file)
    found = [evaluate(req, module, version) for req in reqs]
    remembered.remember(NAME, key, [r.to_json() for r in found])
    return found


CHECK = ContractCheck()


def evaluate(req: Requirement, module: Module | str | None, version: Version | None = None) -> CheckResult:
    """One requirement on one parsed file (None: the file is absent; str: it does not parse)."""
    if module is None:
        applies = f" (the requirement applies to {req.versions})" if req.versions else ""
        release = f"vLLM {version}" if version else "this tree"
        ok, message = False, f"{req.file} is missing from {release}{applies}"
    elif isinstance(module, str):
        ok, message = False, f"cannot judge {req.kind}: {module}"
    else:
        ok, message = EVALUATORS[req.kind](req, module)
    if not ok and req.reason:
        message = f"{message} (needed because: {req.reason})"
    return CheckResult(NAME, req.file, ok, message)


def _load(data: bytes | None, path: str) -> Module | str | None:
    return None if data is None else _parsed(data, path)


def _parsed(data: bytes, path: str) -> Module | str:
    """A content's module (its tree parsed once in this process: checks/parsed.py); kept for the
    sources whose trees parsed keeps."""
    return _kept(data, path) if len(data) <= LARGEST_KEPT else _module(data, path)


@lru_cache(maxsize=16)
def _kept(data: bytes, path: str) -> Module | str:
    return _module(data, path)


def _module(data: bytes, path: str) -> Module | str:
    tree = parsed(data, path)
    return Module(tree) if isinstance(tree, ast.Module) else f"{path} does not parse: {tree}"


# ---------------------------------------------------------------------------------------------
# A parsed module


class Module:
    def __init__(self, tree: ast.Module):
        self.tree = tree

    def find(self, dotted: str) -> ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None:
        """A class or function by its dotted path from the module ("Cls.method")."""
        body: list[ast.stmt] = self.tree.body
        node = None
        for part in dotted.split("."):
            node = next((n for n in body if isinstance(n, _DEFS) and n.name == part), None)
            if node is None:
                return None
            body = node.body
        return node

    def find_class(self, dotted: str) -> ast.ClassDef | None:
        node = self.find(dotted)
        return node if isinstance(node, ast.ClassDef) else None

    def lineage(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        """The class, then its base classes defined at this module's top level, depth first."""
        seen: list[ast.ClassDef] = []
        pending = [cls]
        while pending:
            current = pending.pop(0)
            if current in seen:
                continue
            seen.append(current)
            for base in current.bases:
                name = dotted_name(base)
                local = self.find_class(name) if name and "." not in name else None
                if local is not None:
                    pending.append(local)
        return seen

    def runtime_bindings(self) -> dict[str, str]:
        """name -> "imported" or "defined", for names bound at module level when the module runs
        (TYPE_CHECKING blocks excluded)."""
        names: dict[str, str] = {}
        _collect_bindings(self.tree.body, names)
        return names


_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# try, and try/except* (ast.TryStar, Python >= 3.11): both have body, handlers, orelse, finalbody
_TRY: tuple[type[ast.Try], ...] = tuple(getattr(ast, name) for name in ("Try", "TryStar") if hasattr(ast, name))
IMPORTED, DEFINED = "imported", "defined"


def _collect_bindings(body: list[ast.stmt], names: dict[str, str]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import):
            names.update((a.asname or a.name.split(".")[0], IMPORTED) for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            names.update((a.asname or a.name, IMPORTED) for a in stmt.names if a.name != "*")
        elif isinstance(stmt, _DEFS):
            names.setdefault(stmt.name, DEFINED)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for name in (n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                names.setdefault(name, DEFINED)
        elif isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                _collect_bindings(stmt.body, names)
            _collect_bindings(stmt.orelse, names)
        elif isinstance(stmt, _TRY):
            for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                _collect_bindings(part, names)
        elif isinstance(stmt, ast.With):
            _collect_bindings(stmt.body, names)


def _is_type_checking(test: ast.expr) -> bool:
    return dotted_name(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` for Name/Attribute chains; a subscripted base (`Generic[T]`) by its value."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):
        return dotted_name(node.value)
    return None


def _names_match(dotted: str | None, wanted: str) -> bool:
    return dotted is not None and (dotted == wanted or dotted.endswith("." + wanted))


def _ends_with(obj: ast.expr, on: str | None) -> bool:
    """Whether the object's source ends with `on` at a dot boundary (no `on`: any object)."""
    if on is None:
        return True
    text = ast.unparse(obj)
    return text == on or text.endswith("." + on)


def _scope(module: Module, function: str | None) -> tuple[ast.AST | None, str]:
    if function is None:
        return module.tree, "the module"
    node = module.find(function)
    if node is None or isinstance(node, ast.ClassDef):
        return None, function
    return node, function


# ---------------------------------------------------------------------------------------------
# Evaluators: (requirement, module) -> (ok, message)

Verdict = tuple[bool, str]


def check_base(req: Requirement, module: Module) -> Verdict:
    cls = module.find_class(req["class"])
    if cls is None:
        return False, f"class {req['class']} not found"
    for owner in module.lineage(cls):
        if any(_names_match(dotted_name(b), req["base"]) for b in owner.bases):
            via = "" if owner is cls else f" (through {owner.name})"
            return True, f"{req['class']} has base {req['base']}{via}"
    bases = ", ".join(ast.unparse(b) for b in cls.bases) or "none"
    return False, f"{req['class']} does not have base {req['base']} (its bases: {bases})"


def check_imported(req: Requirement, module: Module) -> Verdict:
    bound = module.runtime_bindings()
    missing = [n for n in req["names"] if n not in bound]
    if missing:
        return False, f"{', '.join(missing)} not imported or defined at module level"
    return True, ", ".join(f"{n} {bound[n]}" for n in req["names"])


def check_methods(req: Requirement, module: Module) -> Verdict:
    cls = module.find_class(req["class"])
    if cls is None:
        return False, f"class {req['class']} not found"
    defined = {name for owner in module.lineage(cls) for name in _class_members(owner)}
    missing = [m for m in req["methods"] if m not in defined]
    if missing:
        return False, f"{req['class']} lacks method(s) {', '.join(missing)}"
    return True, f"{req['class']} has {', '.join(req['methods'])}"


def _class_members(cls: ast.ClassDef) -> set[str]:
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign):  # `method = other_method`
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def check_attribute(req: Requirement, module: Module) -> Verdict:
    scope, where = _scope(module, req["function"])
    if scope is None:
        return False, f"function {where} not found"
    ctx = {"load": (ast.Load,), "store": (ast.Store,), "any": (ast.Load, ast.Store, ast.Del)}[req["access"]]
    found = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.Attribute)
        and n.attr == req["attribute"]
        and isinstance(n.ctx, ctx)
        and _ends_with(n.value, req["on"])
    ]
    subject = f"{req['on']}.{req['attribute']}" if req["on"] else req["attribute"]
    verb = ACCESSES[req["access"]]
    if not found:
        return False, f"{where} does not {_BARE_VERB[req['access']]} {subject}"
    return True, f"{where} {verb} {subject} (line {found[0].lineno})"


def check_model_types(req: Requirement, module: Module) -> Verdict:
    function, variable = req["function"], req["variable"]
    scope = module.find(function)
    if scope is None or isinstance(scope, ast.ClassDef):
        return False, f"function {function} not found"
    lists = _literal_assignments(scope, variable)
    if not lists:
        return False, f"no list literal of strings assigned to {variable} in {function}"
    semantics = _matching(scope, variable)
    if not semantics:
        return False, (
            f"cannot tell how {function} matches model types against {variable} (expected "
            f"`entry in model_type for entry in {variable}` or `model_type in {variable}`)"
        )
    rejected: list[str] = []
    for entries in lists:
        for model_type in req["model_types"]:
            if not all(MATCHERS[s](model_type, entries) for s in semantics) and model_type not in rejected:
                rejected.append(model_type)
    how = " and ".join(DESCRIPTIONS[s] for s in semantics)
    if rejected:
        return False, (
            f"{variable} in {function} does not accept model type(s) {', '.join(rejected)} "
            f"(matched as {how}; entries: {', '.join(lists[-1])})"
        )
    return True, f"{variable} in {function} accepts {', '.join(req['model_types'])} (matched as {how})"


SUBSTRING, MEMBERSHIP = "substring", "membership"
MATCHERS: dict[str, Callable[[str, list[str]], bool]] = {
    SUBSTRING: lambda model_type, entries: any(entry in model_type for entry in entries),
    MEMBERSHIP: lambda model_type, entries: model_type in entries,
}
DESCRIPTIONS = {SUBSTRING: "substrings: `entry in model_type`", MEMBERSHIP: "members: `model_type in list`"}


def _literal_assignments(scope: ast.AST, variable: str) -> list[list[str]]:
    found = []
    for node in ast.walk(scope):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == variable for t in targets) and isinstance(
            value, (ast.List, ast.Tuple, ast.Set)
        ):
            strings = [text for e in value.elts if (text := _str_value(e)) is not None]
            if len(strings) == len(value.elts):
                found.append(strings)
    return found


def _matching(scope: ast.AST, variable: str) -> list[str]:
    """How the function compares model types with the list: the code's own semantics."""
    semantics = []
    for node in ast.walk(scope):
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            loops = [
                g.target.id
                for g in node.generators
                if isinstance(g.iter, ast.Name) and g.iter.id == variable and isinstance(g.target, ast.Name)
            ]
            if (
                any(_is_in(c, partial(_is_loop_name, loops=loops)) for c in ast.walk(node))
                and SUBSTRING not in semantics
            ):
                semantics.append(SUBSTRING)
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == variable
            and MEMBERSHIP not in semantics
        ):
            semantics.append(MEMBERSHIP)
    return semantics


def _is_loop_name(left: ast.expr, loops: list[str]) -> bool:
    return isinstance(left, ast.Name) and left.id in loops


def _is_in(node: ast.AST, left_is: Callable[[ast.expr], bool]) -> bool:
    return (
        isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) and left_is(node.left)
    )


def check_guarded_read(req: Requirement, module: Module) -> Verdict:
    scope, where = _scope(module, req["function"])
    if scope is None:
        return False, f"function {where} not found"
    target: Target = req["target"]
    target = Target(target.cls, target.has, tuple({*target.lacks, req["attribute"]}))
    parents = {child: parent for parent in ast.walk(scope) for child in ast.iter_child_nodes(parent)}
    reads = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.Attribute)
        and n.attr == req["attribute"]
        and isinstance(n.ctx, ast.Load)
        and _ends_with(n.value, req["on"])
    ]
    subject = f"{req['on']}.{req['attribute']}" if req["on"] else req["attribute"]
    open_reads = [n for n in reads if not _guarded(n, parents, target)]
    if open_reads:
        lines = ", ".join(f"line {n.lineno} in {req['function'] or _enclosing(n, parents)}" for n in open_reads)
        return False, (
            f"unguarded read of {subject} ({lines}): reachable for a {target.cls} target, which "
            f"lacks {req['attribute']}; no enclosing test or `except AttributeError` excludes it"
        )
    if not reads:
        return True, f"no read of {subject} in {where}"
    return True, f"{len(reads)} read(s) of {subject}, each closed to a {target.cls} target"


def _enclosing(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    names = []
    while node in parents:
        node = parents[node]
        if isinstance(node, _DEFS):
            names.append(node.name)
    return ".".join(reversed(names)) or "the module"


def _guarded(read: ast.Attribute, parents: dict[ast.AST, ast.AST], target: Target) -> bool:
    obj = ast.unparse(read.value)
    child: ast.AST = read
    while child in parents:
        parent = parents[child]
        if _closes(parent, child, target, obj):
            return True
        child = parent
    return False


def _closes(parent: ast.AST, child: ast.AST, target: Target, obj: str) -> bool:
    """Whether `parent` keeps a target away from its sub-node `child`."""
    if isinstance(parent, (ast.If, ast.IfExp)):
        in_body = child in parent.body if isinstance(parent.body, list) else child is parent.body
        in_else = child in parent.orelse if isinstance(parent.orelse, list) else child is parent.orelse
        truth = decide(parent.test, target, obj)
        return (in_body and truth is False) or (in_else and truth is True)
    if isinstance(parent, ast.BoolOp) and child in parent.values:
        earlier = [decide(v, target, obj) for v in parent.values[: parent.values.index(child)]]
        return (False in earlier) if isinstance(parent.op, ast.And) else (True in earlier)
    if isinstance(parent, _TRY):
        return child in parent.body and any(_catches_attribute_error(h) for h in parent.handlers)
    return False


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(dotted_name(t) in ("AttributeError", "Exception", "BaseException") for t in types)


def decide(test: ast.expr, target: Target, obj: str) -> bool | None:
    """The test's value for the target, where the source decides it; None where it does not."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = decide(test.operand, target, obj)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [decide(v, target, obj) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # True decides an `or`, False an `and`
        return stop if stop in values else (not stop if all(v is (not stop) for v in values) else None)
    if isinstance(test, ast.NamedExpr):
        return decide(test.value, target, obj)
    if isinstance(test, ast.Call):
        return _decide_call(test, target, obj)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _decide_compare(test.left, test.ops[0], test.comparators[0], target, obj)
    return None


def _decide_call(call: ast.Call, target: Target, obj: str) -> bool | None:
    func = dotted_name(call.func)
    args = call.args
    if func == "isinstance" and len(args) == 2:
        classes = args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]]
        return True if any(_names_match(dotted_name(c), target.cls) for c in classes) else None
    name = _str_value(args[1]) if len(args) >= 2 else None
    if func in ("hasattr", "getattr") and name is not None and ast.unparse(args[0]) == obj:
        if func == "hasattr":
            return True if name in target.has else False if name in target.lacks else None
        if len(args) == 3 and name in target.lacks and isinstance(args[2], ast.Constant) and not args[2].value:
            return False  # getattr(obj, missing, None): falsy for the target
    return None


def _decide_compare(left: ast.expr, op: ast.cmpop, right: ast.expr, target: Target, obj: str) -> bool | None:
    if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
        positive = isinstance(op, (ast.Eq, ast.Is))
        if _is_str(left, target.cls) or _is_str(right, target.cls):
            return positive
        for a, b in ((left, right), (right, left)):  # getattr(obj, missing, None) is None
            if (
                isinstance(b, ast.Constant)
                and b.value is None
                and isinstance(a, ast.Call)
                and _decide_call(a, target, obj) is False
                and len(a.args) == 3
                and isinstance(a.args[2], ast.Constant)
                and a.args[2].value is None
            ):
                return positive
        return None
    if (
        isinstance(op, (ast.In, ast.NotIn))
        and isinstance(right, (ast.List, ast.Tuple, ast.Set))
        and any(_is_str(e, target.cls) for e in right.elts)
    ):
        return isinstance(op, ast.In)
    return None


def _str_value(node: ast.expr) -> str | None:
    """The string a string constant holds; None for any other node."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_str(node: ast.expr, value: str | None = None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (value is None or node.value == value)


EVALUATORS: dict[str, Callable[[Requirement, Module], Verdict]] = {
    "base": check_base,
    "imported": check_imported,
    "methods": check_methods,
    "attribute": check_attribute,
    "model-types": check_model_types,
    "guarded-read": check_guarded_read,
}


def judged(
    requirements: list[Requirement], read: Callable[[str], bytes | None], version: Version | None
) -> list[CheckResult]:
    """Each requirement's verdict on the contents `read` gives (path -> bytes, None: absent), in order:
    another set's contract held against a write that is not that set's (engine/held.py)."""
    by_file: dict[str, list[Requirement]] = {}
    for req in requirements:
        by_file.setdefault(req.file, []).append(req)
    verdicts = {file: iter(_file_verdicts(reqs, read(file), version)) for file, reqs in by_file.items()}
    return [next(verdicts[req.file]) for req in requirements]

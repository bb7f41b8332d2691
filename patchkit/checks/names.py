"""names: pyflakes on every touched Python file, as planned and as stock; only what the patch adds counts.

An undefined name the patch introduces (a base class used but never imported, a name exported in
__all__ but never defined, a local read before assignment) fails the check; any other new pyflakes
finding (unused import, redefinition, shadowing...) is a warning. Findings already in the stock file
are not the patch's doing and are ignored. Findings are compared by kind and arguments, not by line:
the patch moves lines.
"""

from __future__ import annotations

import ast
import hashlib
import warnings
from collections import Counter
from dataclasses import dataclass

from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult

UNDEFINED = frozenset({"UndefinedName", "UndefinedExport", "UndefinedLocal"})
# Messages whose last argument is the line of an earlier definition: it moves with the patch.
_LINE_ARGUMENT = frozenset({"RedefinedWhileUnused", "ImportShadowedByLoopVar", "UndefinedLocal",
                            "EagerUseOfLazyImport"})


@dataclass(frozen=True)
class Finding:
    kind: str  # the pyflakes message class name
    args: tuple  # its arguments without line numbers: what identifies it across line shifts
    line: int
    text: str
    certain: bool = True  # False: an export a module-level __getattr__ (PEP 562) may provide

    @property
    def is_error(self) -> bool:
        return self.kind in UNDEFINED and self.certain

    def describe(self) -> str:
        return f"line {self.line}: {self.text}" + ("" if self.certain else " (unless the module's __getattr__ "
                                                                            "provides it)")


class NamesCheck:
    name = "names"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        results: list[CheckResult] = []
        for path in ctx.paths:
            if not path.endswith(".py"):
                continue
            planned = ctx.read(path)
            if planned is None:
                continue  # deleted by the patch
            stock = ctx.read_stock(path) if ctx.read_stock else None
            results.extend(self._compare(path, planned, stock))
        return results

    def _compare(self, path: str, planned: bytes, stock: bytes | None) -> list[CheckResult]:
        found = findings(planned)
        if found is None:
            # The syntax check (run by the target's interpreter) judges files this Python cannot parse.
            return [CheckResult(self.name, path, False, "not checked: the Python running patchkit cannot "
                                                        "parse this file (see the syntax check)", WARNING)]
        if not found:
            return [CheckResult(self.name, path, True, "no pyflakes findings")]
        before = (findings(stock) or ()) if stock is not None else ()
        new = introduced(found, before)
        if not new:
            return [CheckResult(self.name, path, True,
                                f"no new pyflakes findings ({len(found)} already in the stock file)")]
        return [CheckResult(self.name, path, False, f.describe(), ERROR if f.is_error else WARNING) for f in new]


CHECK = NamesCheck()


def introduced(after: tuple[Finding, ...], before: tuple[Finding, ...]) -> list[Finding]:
    """Findings in `after` beyond those `before` already had (as a multiset of kind + arguments)."""
    extra = Counter((f.kind, f.args) for f in after)
    extra.subtract(Counter((f.kind, f.args) for f in before))
    new = []
    for f in after:
        key = (f.kind, f.args)
        if extra[key] > 0:
            extra[key] -= 1
            new.append(f)
    return new


# apply checks the same contents twice (planned, then as written): pyflakes runs once per content.
_SEEN: dict[str, tuple[Finding, ...] | None] = {}


def findings(source: bytes) -> tuple[Finding, ...] | None:
    """pyflakes' findings for a module's source; None when this interpreter cannot parse it."""
    digest = hashlib.sha256(source).hexdigest()
    if digest not in _SEEN:
        if len(_SEEN) > 512:
            _SEEN.clear()
        _SEEN[digest] = _pyflakes(source)
    return _SEEN[digest]


def _pyflakes(source: bytes) -> tuple[Finding, ...] | None:
    from pyflakes.checker import Checker

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like: not ours to report
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    checker = Checker(tree, filename="<patched>")
    checker.messages.sort(key=lambda m: (m.lineno, m.col))
    lazy = _has_module_getattr(tree)
    return tuple(_finding(m, lazy) for m in checker.messages)


def _has_module_getattr(tree: ast.Module) -> bool:
    """A module-level __getattr__ (PEP 562) can serve names __all__ lists but the module never binds."""
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__"
               for node in tree.body)


def _finding(message, lazy_module: bool) -> Finding:
    kind = type(message).__name__
    args = tuple(message.message_args)
    if kind in _LINE_ARGUMENT and args and isinstance(args[-1], int):
        args = args[:-1]
    return Finding(kind, args, message.lineno, message.message % message.message_args,
                   certain=not (lazy_module and kind == "UndefinedExport"))

"""Whether the launch's transformers fails to load a config.json holding "quantization_config": null:
its PretrainedConfig.from_dict formats the config it built into a log line (an f-string, made whatever
the log level), and to_dict then calls .to_dict() on any quantization_config that is no dict (4.57.6:
configuration_utils.py:964): None raises AttributeError. Read from the launch's own transformers
(beside vllm/ in its site-packages, read as a tree file)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from patchkit.checks.parsed import python_tree

CONFIGURATION = "transformers/configuration_utils.py"
CLASSES = ("PretrainedConfig", "PreTrainedConfig")  # transformers 4.x, 5.x
KEY = "quantization_config"


def null_quantization_raises(read: Callable[[str], bytes | None]) -> bool | None:
    """True where both steps are in the launch's transformers; False where the file is read and one
    is not; None where no file is read."""
    module = python_tree(read(CONFIGURATION), CONFIGURATION)
    if module is None:
        return None
    methods = {
        f.name: f
        for c in module.body
        if isinstance(c, ast.ClassDef) and c.name in CLASSES
        for f in c.body
        if isinstance(f, ast.FunctionDef)
    }
    to_dict, from_dict = methods.get("to_dict"), methods.get("from_dict")
    if to_dict is None or from_dict is None:
        return False
    return _logs_the_config(from_dict) and _calls_to_dict_on_no_dict(to_dict)


def _logs_the_config(function: ast.FunctionDef) -> bool:
    """An f-string of the built `config` in from_dict (made before the logger looks at its level)."""
    return any(
        isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Name) and node.value.id == "config"
        for node in ast.walk(function)
    )


def _calls_to_dict_on_no_dict(function: ast.FunctionDef) -> bool:
    """`self.quantization_config.to_dict() if not isinstance(self.quantization_config, dict) else ...`:
    the call guarded by no test but that one (and hasattr), so None reaches it."""
    for node in ast.walk(function):
        if not isinstance(node, ast.IfExp) or not _no_dict(node.test):
            continue
        call = node.body
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "to_dict":
            return _own_key(call.func.value) and not _guarded(function, node)
    return False


def _guarded(function: ast.FunctionDef, inner: ast.AST) -> bool:
    """Whether an if around `inner` tests anything but hasattr(self, "quantization_config")."""
    for node in ast.walk(function):
        if isinstance(node, ast.If) and any(inner is n for s in node.body for n in ast.walk(s)):
            test = node.test
            hasattr_only = (
                isinstance(test, ast.Call)
                and isinstance(test.func, ast.Name)
                and test.func.id == "hasattr"
                and [a.value if isinstance(a, ast.Constant) else getattr(a, "id", None) for a in test.args]
                == ["self", KEY]
            )
            if not hasattr_only:
                return True
    return False


def _no_dict(test: ast.expr) -> bool:
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)):
        return False
    call = test.operand
    return (
        isinstance(call.func, ast.Name)
        and call.func.id == "isinstance"
        and len(call.args) == 2
        and _own_key(call.args[0])
        and isinstance(call.args[1], ast.Name)
        and call.args[1].id == "dict"
    )


def _own_key(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == KEY
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )

"""vLLM's start-up read of a --quantization's own config where the checkpoint has none (get_quant_config,
run by VllmConfig._get_quantization_config at create_engine_config): a method the function returns for
before its file search (gguf, in-flight bitsandbytes) needs nothing; else the method's class's
get_config_filenames() names the files: none -> the class built with no arguments (compressed-tensors'
__init__ needs some: TypeError); else the model directory's *.json ending in one of them: none or several
-> ValueError; one -> its from_config (not judged here). Read from the tree: the function's early returns,
the method's class (quantization/__init__.py) and its literal list of names."""

from __future__ import annotations

import ast
import os
import re
from typing import Any

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch import observed
from patchkit.launch.engine import LaunchContext, Reader
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.weights import target_directory

WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
QUANTIZATION = "vllm/model_executor/layers/quantization"
SHORTHANDS = "vllm/config/quantization.py"
NOT_FOUND = b"Cannot find the config file for"
SEVERAL = b"Found multiple config files for"
MODELOPT_FILE = "hf_quant_config.json"  # vLLM's get_config takes it as the quantization_config (ModelOpt <= 0.29)
UNREAD = "cannot judge"
CONFIG = "vllm/config/model.py"
# ModelConfig's validator of the field: a text --quantization is taken lower-cased (0.11-0.34)
LOWERS = re.compile(
    rb"def validate_quantization_before\(cls, value: Any\) -> Any:\n +if isinstance\(value, str\):\n +return value\.lower\(\)"
)


def given_quantization(launch: LaunchContext) -> str | None:
    """--quantization as the tree's ModelConfig takes it: lower-cased where its validator lower-cases it."""
    given = launch.command.optional_text("quantization")
    return given.lower() if given is not None and LOWERS.search(launch.read(CONFIG) or b"") else given


def quant_file_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """The target's --quantization where its config.json has no quantization: a failure where vLLM's
    get_quant_config finds no config for the method (or several); cannot judge where it is not read."""
    given = given_quantization(launch)
    if given is None or _quantized(launch.target.config):
        return []
    said = f"--quantization {escaped(given)}"
    absent = launch.lacks(check, WEIGHT_UTILS)  # a tree of only the patched files
    early, keys = _function(launch.read)
    if absent is not None or (early is not None and given in early):
        return [absent] if absent is not None else []
    named = _config_class(launch.read, given)
    unread = _unread(launch, early, keys)
    if unread is None and named is None:
        return []  # not one of the tree's methods: vLLM refuses it by name (the command finding)
    names = _file_names(launch.read, *named) if named is not None and unread is None else UNREAD
    if isinstance(names, str):  # UNREAD
        unread = unread or f"{named[1] if named else given}.get_config_filenames is not a literal list"
        why = f"how vLLM reads {said}'s config on a checkpoint without quantization_config: {unread}"
        return [cannot_judge(check, why, _judged_by(launch))]
    if not names:
        return _built_bare(check, launch, named or ("", given), said)
    return _searched(check, launch, given, names, said)


def _unread(launch: LaunchContext, early: set[str] | None, keys: set[str]) -> str | None:
    """Why get_quant_config's path for the launch is not read here; None: it is."""
    if early is None:
        return "the tree's get_quant_config is not of a shape read here"
    if "*" in early or launch.command.options.get("quantization-config") is not None:
        return "online quantization (its shorthands, --quantization-config) is not read here"
    if keys & set(launch.target.overrides):
        return f"--hf-overrides names {', '.join(sorted(keys & set(launch.target.overrides)))}, read instead"
    if launch.general_plugins():
        return "a plugin may register the method"
    return None


def _judged_by(launch: LaunchContext) -> str:
    if launch.python is not None:
        return "vLLM's own validation judges it: the vllm-validation finding"
    return f"vLLM's own validation judges it: {hints.command('preflight', '--', *launch.command.argv)}"


def _quantized(config: dict[str, Any]) -> bool:
    """Whether get_quant_config finds a quantization in the config: its quantization_config, its
    text_config's, or its compression_config (a null one: quant_match says what transformers does)."""
    text = config.get("text_config")
    held = [config.get("quantization_config"), config.get("compression_config")]
    held += [text.get("quantization_config")] if isinstance(text, dict) else []
    return any(value is not None for value in held) or "quantization_config" in config


def _function(read: Reader) -> tuple[set[str] | None, set[str]]:
    """(the methods get_quant_config returns for before its file search, None where the function is not
    of the shape read here; the --hf-overrides keys it reads a config from instead). A method it tests
    by name in an if that returns, or (0.22 on) one of the online shorthands it returns for."""
    data = read(WEIGHT_UTILS) or b""
    found = [n for n in ast.walk(python_tree(data) or ast.Module([], [])) if isinstance(n, ast.FunctionDef)]
    function = next((f for f in found if f.name == "get_quant_config"), None)
    if function is None or NOT_FOUND not in data or SEVERAL not in data:
        return None, set()
    early: set[str] = set()
    nodes = list(ast.walk(function))
    for statement in (n for n in nodes if isinstance(n, ast.If)):
        if any(isinstance(n, ast.Return) for n in statement.body):
            early |= _methods_tested(statement.test, read)
    if any(isinstance(n, ast.Attribute) and n.attr == "quantization_config" for n in nodes):
        early |= _shorthands(read)  # model_config.quantization_config: set from a shorthand -q only
    keys = {
        n.args[0].value
        for n in nodes
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args
        if isinstance(n.func.value, ast.Name) and n.func.value.id == "hf_overrides"
        if isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)
    }
    return early, keys


def _methods_tested(test: ast.expr, read: Reader) -> set[str]:
    """The methods a test `model_config.quantization == "x"` (`in (...)`, `in _ONLINE_SHORTHANDS`) holds for."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq | ast.In):
        return set()
    if not (isinstance(test.left, ast.Attribute) and test.left.attr == "quantization"):
        return set()
    side = test.comparators[0]
    if isinstance(side, ast.Name):
        return _shorthands(read)
    items = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _shorthands(read: Reader) -> set[str]:
    """The --quantization shorthands of online quantization (vllm/config/quantization.py, 0.22 on): the
    texts its module-level *SHORTHAND* names hold (dict keys, tuple items); "*" where it is not read."""
    tree = python_tree(read(SHORTHANDS))
    named = [
        n.value
        for n in (tree.body if tree else [])
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
        if any(
            isinstance(t, ast.Name) and "SHORTHAND" in t.id
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
    ]
    texts = {"*"} if not named else set()
    for value in named:
        held = [k for n in ast.walk(value) if isinstance(n, ast.Dict) for k in n.keys]
        held += [i for n in ast.walk(value) if isinstance(n, ast.Tuple | ast.List | ast.Set) for i in n.elts]
        texts |= {i.value for i in held if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return texts


def _config_class(read: Reader, method: str) -> tuple[str, str] | None:
    """(the module path without suffix, the class name) get_quantization_config maps `method` to."""
    tree = python_tree(read(f"{QUANTIZATION}/__init__.py"))
    function = next(
        (
            n
            for n in ast.walk(tree or ast.Module([], []))
            if isinstance(n, ast.FunctionDef) and n.name == "get_quantization_config"
        ),
        None,
    )
    if function is None:
        return None
    modules: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom) and node.module and node.level <= 1:
            where = node.module.replace(".", "/")
            modules |= {a.asname or a.name: f"{QUANTIZATION}/{where}" if node.level else where for a in node.names}
    for node in ast.walk(function):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == method and isinstance(value, ast.Name):
                    return modules.get(value.id, ""), value.id  # "": a class not imported here (not read)
    return None


def _classes(read: Reader, module: str, name: str) -> list[ast.ClassDef] | None:
    """The class `name` of `module` (X.py, else X/__init__.py or the module it imports the name from)
    and its bases defined beside it, nearest first; None: not found."""
    data = read(f"{module}.py") if module else None
    if data is None and module:
        package = python_tree(read(f"{module}/__init__.py"))
        inner = [
            f"{module}/{n.module.replace('.', '/')}"
            for n in ast.walk(package or ast.Module([], []))
            if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module and any(a.name == name for a in n.names)
        ]
        data = read(f"{inner[0]}.py") if inner else None
    tree = python_tree(data)
    defined = {n.name: n for n in ast.walk(tree or ast.Module([], [])) if isinstance(n, ast.ClassDef)}
    chain: list[ast.ClassDef] = []
    while name in defined and defined[name] not in chain:
        chain.append(defined[name])
        bases = [b.id for b in defined[name].bases if isinstance(b, ast.Name)]
        name = bases[0] if bases else ""
    return chain or None


def _method(chain: list[ast.ClassDef], name: str) -> ast.FunctionDef | None:
    for cls in chain:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    return None


def _file_names(read: Reader, module: str, name: str) -> list[str] | str:
    """The names the class's get_config_filenames returns, where it returns a literal list of texts;
    UNREAD otherwise (another shape, a class or method not found beside it)."""
    chain = _classes(read, module, name)
    function = _method(chain, "get_config_filenames") if chain else None
    body = (
        [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if function
        else []
    )
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.List | ast.Tuple):
        return UNREAD
    items = body[0].value.elts
    if not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return UNREAD
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _built_bare(check: str, launch: LaunchContext, named: tuple[str, str], said: str) -> list[Finding]:
    """No file names: vLLM builds the class with no arguments; its __init__'s parameters without a default
    make that a TypeError (compressed-tensors'). Its __init__ not beside it: cannot judge."""
    chain = _classes(launch.read, *named) or []
    init = _method(chain, "__init__")
    if init is None:
        bases = [b.id for b in chain[-1].bases if isinstance(b, ast.Name)] if chain else []
        if bases == ["QuantizationConfig"]:
            return []  # the base class's __init__ takes no arguments (base_config.py, 0.11-0.34)
        why = f"whether vLLM builds {named[1]}() for {said} on a checkpoint without quantization_config: its __init__ is not read here"
        return [cannot_judge(check, why, _judged_by(launch))]
    args = init.args
    positional = [*args.posonlyargs, *args.args][1:]
    required = [a.arg for a in positional[: len(positional) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    if not required:
        return []
    why = (
        f"vLLM fails at start with {said}: the checkpoint's config.json has no quantization_config, so vLLM builds "
        f"{named[1]}() with no arguments, and it needs {', '.join(required[:6])} (TypeError)"
    )
    fix = f"drop --quantization (the checkpoint is not quantized), or serve a checkpoint quantized with {said.split()[-1]}"
    return [Finding(check, False, why, fix)]


def _searched(check: str, launch: LaunchContext, given: str, names: list[str], said: str) -> list[Finding]:
    """get_quant_config's search of the model directory's *.json for a name ending in one of `names`."""
    shown = " or ".join(escaped(n) for n in names[:4])
    fix = f"drop --quantization (the checkpoint is not quantized), or put {escaped(given)}'s config file ({escaped(names[0])}) in the model directory"
    found = target_directory(launch.command)
    if found is None:
        why = f"whether vLLM finds {said}'s config file ({shown}): the model is no local directory (the hub's files are not read here)"
        return [cannot_judge(check, why, _judged_by(launch))]
    directory = os.path.join(launch.command.working_directory(), found[1])
    if observed.isfile(os.path.join(directory, MODELOPT_FILE)):
        why = f"what vLLM takes for {said}: the model directory has {MODELOPT_FILE}, which vLLM reads as its quantization_config"
        return [cannot_judge(check, why, _judged_by(launch))]
    files = [f for f in observed.glob(os.path.join(directory, "*.json")) if any(f.endswith(n) for n in names)]
    if len(files) == 1:
        why = f"whether {escaped(given)}'s config reads {escaped(os.path.basename(files[0]))} of the model directory (vLLM's from_config of it is not read here)"
        return [cannot_judge(check, why, _judged_by(launch))]
    if files:
        several = ", ".join(escaped(os.path.basename(f)) for f in files[:4])
        why = f'vLLM refuses {said} at start: the checkpoint\'s config.json has no quantization_config and its directory has several config files for it ({several}: "Found multiple config files")'
        return [Finding(check, False, why, "keep one of them in the model directory, or drop --quantization")]
    why = (
        f"vLLM refuses {said} at start: the checkpoint's config.json has no quantization_config, and its directory "
        f'has no *.json ending in {shown} ("Cannot find the config file for {escaped(given)}")'
    )
    return [Finding(check, False, why, fix)]

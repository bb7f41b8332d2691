"""vLLM's environment variables as its envs.py converts them. Integer flags are bool(int(value))
(VLLM_MLA_DISABLE, VLLM_USE_V2_MODEL_RUNNER in every release 0.11-0.34; maybe_convert_bool is the same
with None for unset). Python's int() takes what a "set and not 0" test misreads: "00", "+0", " 0 ",
"0_0", any Unicode zero digit; and it raises on "true", "yes", "". From 0.12 vLLM's
enable_envs_cache() reads every entry of envs.environment_variables right after the model's load, so
a value an entry's conversion refuses stops the launch whether it uses the variable or not."""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Mapping

from patchkit.checks.parsed import python_tree
from patchkit.launch.env_json import NOT_JSON, file_json, loaded, read_named, shown_setting
from patchkit.launch.findings import Finding, cannot_judge

CHECK = "vllm-environment"
ENVS = "vllm/envs.py"
MLA_DISABLE = "VLLM_MLA_DISABLE"
V2_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
PORT = "VLLM_PORT"
# read as vLLM starts in every release (the port by the executor's get_open_port)
READ_AT_START = (MLA_DISABLE, V2_RUNNER, PORT)


def json_str_or_file(value: str) -> object:
    """What envs.py's maybe_convert_json_str_or_file does with a value that names no file (0.22+):
    json.loads; an existing path it opens and json.load()s instead (json_or_file_refusal)."""
    return json.loads(value)


NUMBER_CALLS: dict[str, Callable[[str], object]] = {
    "int": int,
    "maybe_convert_int": int,
    "maybe_convert_bool": int,
    "float": float,
    "json.loads": json.loads,
    "maybe_convert_json_str_or_file": json_str_or_file,
}
KINDS: dict[Callable[[str], object], tuple[str, str]] = {
    int: ("an integer", "int()"),
    float: ("a number", "float()"),
    json.loads: ("JSON", "json.loads()"),
    json_str_or_file: ("JSON", "json.loads()"),
}
CHOICE_CALLS = {"env_with_choices": False, "env_list_with_choices": True, "env_set_with_choices": True}
# a conversion: (converter, or None for choices; whether a flag, 1 or 0; choices; case-sensitive; a list)
Conversion = tuple[Callable[[str], object] | None, bool, tuple[str, ...], bool, bool]


def int_flag(environ: Mapping[str, str], name: str, default: str | None = "0") -> bool | None:
    """bool(int(value)) of the launch's `name`, `default` where unset (None: unset, vLLM decides);
    raises ValueError where vLLM's int() does."""
    value = environ.get(name, default)
    return None if value is None else bool(int(value))


def refused_flags(
    environ: Mapping[str, str],
    read: Callable[[str], bytes | None],
    cwd: str = "",
    encoding: str | Callable[[], str] = "utf-8",
) -> list[Finding]:
    """A failing finding for each variable of the tree's envs.py the launch sets (its `env` prefix or
    patchkit's own environment) to what the entry's conversion refuses: vLLM raises reading it. A file
    one names (maybe_convert_json_str_or_file) is read as the launch reads it: relative to `cwd`, in
    the `encoding` its open() reads text in (a callable: asked only for a file that is not ASCII);
    "cannot judge" where it is not read."""
    envs = read(ENVS) or b""
    every = b"def enable_envs_cache(" in envs  # 0.12+: every entry is read after the load
    found = []
    for name, conversion in sorted(conversions(envs).items()):
        value = environ.get(name)
        if value is None or not (every or name in READ_AT_START):
            continue
        when = "as it starts" if name in READ_AT_START else "right after the model's load (enable_envs_cache)"
        fix = _fix(name, value, conversion)
        if conversion[0] is json_str_or_file:
            why, judged = json_or_file_refusal(name, value, cwd, encoding)
        else:
            why, judged = refusal(name, value, conversion), True
        if not judged:
            found.append(cannot_judge(CHECK, f"{why}: vLLM reads it right after the model's load", fix))
        elif why is not None:
            found.append(Finding(CHECK, False, f"{why}: vLLM stops {when}", fix))
    return found


def json_or_file_refusal(name: str, value: str, cwd: str, encoding: str | Callable[[], str]) -> tuple[str | None, bool]:
    """(why vLLM's maybe_convert_json_str_or_file raises on `value`, whether that is judged): a path
    that exists is opened and json.load()ed as text in the launch's `encoding` (asked for only where
    the file is not ASCII), read here once (env_json.read_named); any other value is json.loads()ed."""
    shown = shown_setting(name, value)
    named = read_named(os.path.join(cwd, value)) if value else None
    if named is None:
        if loaded(value) is NOT_JSON:  # a JSONDecodeError, or a number past Python's digit limit
            return f"{shown} names no file and is not JSON: vLLM's envs.py json.loads() it, which raises", True
        return None, True
    if named.refused:
        return f"{shown} names a file that {named.refused}", True
    if named.unread:
        return f"{shown} names a file that {named.unread}", False
    text_encoding = "ascii" if named.data.isascii() else encoding if isinstance(encoding, str) else encoding()
    try:
        if file_json(named.data, text_encoding) is NOT_JSON:
            said = f"holds no {text_encoding} JSON" if text_encoding != "ascii" else "holds no JSON"
            return f"{shown} names a file that {said}: vLLM's envs.py json.load()s it, which raises", True
    except LookupError:
        return f"{shown} names a file in {text_encoding}, which this Python cannot decode", False
    return None, True


def conversions(envs: bytes) -> dict[str, Conversion]:
    """Each entry of the tree's envs.py `environment_variables` dict that converts its variable so that
    a value can be refused: int()/float()/maybe_convert_*() of its os.getenv, or env_*_with_choices."""
    module = python_tree(envs, ENVS)
    if module is None:
        return {}
    functions = {node.name: node for node in module.body if isinstance(node, ast.FunctionDef)}
    found: dict[str, Conversion] = {}
    for node in module.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(node.value, ast.Dict):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and target.id == "environment_variables":
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    conversion = _conversion(key.value, functions.get(getattr(value, "id", "")) or value)
                    if conversion is not None and (conversion[0] is not json_str_or_file or as_read(functions)):
                        found[key.value] = conversion
    return found


def as_read(functions: dict[str, ast.FunctionDef]) -> bool:
    """Whether the tree's maybe_convert_json_str_or_file reads its value as json_or_file_refusal does:
    os.path.exists(value), json.load() of the file, else json.loads(value)."""
    function = functions.get("maybe_convert_json_str_or_file")
    called = {ast.unparse(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)} if function else set()
    return {"os.path.exists", "open", "json.load", "json.loads"} <= called


def _conversion(name: str, entry: ast.AST) -> Conversion | None:
    """How `entry` (a lambda, a module function, a call of env_*_with_choices, any of them wrapped
    in deprecated_env(NAME, removal, replacement, getter): 0.22+) converts `name`."""
    if _calls(entry, "deprecated_env") and isinstance(entry, ast.Call):
        getter = next((k.value for k in entry.keywords if k.arg == "getter"), None)
        return _conversion(name, getter or entry.args[-1]) if getter or len(entry.args) == 4 else None
    if isinstance(entry, ast.Call) and isinstance(entry.func, ast.Name) and entry.func.id in CHOICE_CALLS:
        return _choices(name, entry, entry.func.id)
    flag = False
    converter: Callable[[str], object] | None = None
    read_names = {n.id for n in ast.walk(entry) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(entry):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute) and node.args):
            continue
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        call = node.func.id if isinstance(node.func, ast.Name) else f"{getattr(owner, 'id', '')}.{node.func.attr}"
        reads = _reads(node.args[0], name) or (isinstance(node.args[0], ast.Name) and node.args[0].id in read_names)
        if call in NUMBER_CALLS and reads:
            converter = NUMBER_CALLS[call]
        if call == "maybe_convert_bool" or (call == "bool" and _calls(node.args[0], "int")):
            flag = True
    return None if converter is None else (converter, flag, (), True, False)


def _choices(name: str, call: ast.Call, function: str) -> Conversion | None:
    """env_with_choices(name, default, [choices], case_sensitive): None where the choices are not a
    literal list (a callable vLLM resolves late) or the call names another variable."""
    args: list[ast.expr | None] = [*call.args, None, None, None, None]
    sensitive_node = args[3] or next((k.value for k in call.keywords if k.arg == "case_sensitive"), None)
    choices_node = args[2] or next((k.value for k in call.keywords if k.arg == "choices"), None)
    first = args[0]
    if not (isinstance(first, ast.Constant) and first.value == name and isinstance(choices_node, ast.List | ast.Tuple)):
        return None
    choices = tuple(e.value for e in choices_node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    if len(choices) != len(choices_node.elts):
        return None
    sensitive = not (isinstance(sensitive_node, ast.Constant) and sensitive_node.value is False)
    return (None, False, choices, sensitive, CHOICE_CALLS[function])


def _reads(node: ast.AST, name: str) -> bool:
    """Whether `node` is os.getenv(name, ...), os.environ.get(name, ...) or os.environ[name]."""
    key: ast.expr | None = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("getenv", "get"):
        key = node.args[0] if node.args else None
    else:
        return False
    return isinstance(key, ast.Constant) and key.value == name


def _calls(node: ast.AST, function: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function


def refusal(name: str, value: str, conversion: Conversion) -> str | None:
    """Why vLLM's conversion refuses `value` (None: it takes it)."""
    converter, _, choices, sensitive, listed = conversion
    shown = shown_setting(name, value)
    if converter is json_str_or_file:  # a file this process's directory holds is read as vLLM would
        why, judged = json_or_file_refusal(name, value, "", "utf-8")
        return why if judged else None
    if converter is not None:
        try:
            converter(value)
        except (ValueError, RecursionError):  # json nested past Python's limit raises in vLLM's reading too
            kind, call = KINDS[converter]
            return f"{shown} is not {kind}: vLLM's envs.py reads it with {call}, which raises"
        return None
    given = [v.strip() for v in value.split(",") if v.strip()] if listed else [value]
    allowed = choices if sensitive else tuple(c.lower() for c in choices)
    wrong = [v for v in given if (v if sensitive else v.lower()) not in allowed]
    return f"{shown} is not among its choices {', '.join(choices)}: vLLM's envs.py raises" if wrong else None


def _fix(name: str, value: str, conversion: Conversion) -> str:
    converter, flag, choices, _, listed = conversion
    if name == PORT and "://" in value:
        return (
            f"unset {PORT} or give it a port number (Kubernetes sets {PORT}=tcp://... in every pod of a "
            "namespace with a Service named vllm: rename the Service or set enableServiceLinks: false)"
        )
    if converter is None:
        return f"give {name} {'comma-separated values ' if listed else ''}among {', '.join(choices)}, or unset it"
    if flag:
        return f"give {name}=1 or {name}=0, or unset it"
    if converter is json_str_or_file:
        return f"give {name} JSON or the path of a JSON file, or unset it"
    return f"give {name} {KINDS[converter][0]}, or unset it"

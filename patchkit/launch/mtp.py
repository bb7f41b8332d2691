"""The drafter of --speculative-config's mtp method (or a model's own NAME_mtp): vLLM builds it from
the target's own config and checkpoint (the config's "model" when given) once the target has loaded.
Its rules are read from the installed tree, statically: SpeculativeConfig.hf_config_override (what
the config becomes, its n_predict: how many MTP layers), the divisibility its __post_init__ asks
of num_speculative_tokens, and DeepSeek's get_spec_layer_idx_from_weight_name (which weights are the
MTP layers': DefaultModelLoader's strict check fails an unquantized drafter that loads none)."""

from __future__ import annotations

import ast
import os
from typing import Any

from patchkit.base.errors import BadInput, TargetError, escaped
from patchkit.base.values import FrozenValue, frozen
from patchkit.checks.parsed import python_tree
from patchkit.launch.command import LaunchCommand
from patchkit.launch.drafter_load import drafter_load_format
from patchkit.launch.drafter_weights import quantization
from patchkit.launch.engine import Reader, registry_tables
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.lax import lax_int
from patchkit.launch.model_files import MODELS_DIR
from patchkit.launch.models import ModelConfig, resolve_model
from patchkit.launch.weights import drafter_directory, target_directory, weight_names

SPEC_FILE = "vllm/config/speculative.py"
DEEPSEEK_MTP = f"{MODELS_DIR}/deepseek_mtp.py"
LOADER = "vllm/model_executor/model_loader/default_loader.py"
STRICT = b"model_config.quantization is None"  # DefaultModelLoader's strict check: unquantized models only
UNGUARDED = b"self.num_mtp_layers = config.num_nextn_predict_layers"  # DeepSeekMultiTokenPredictor's read
DEEPSEEK = "deepseek_mtp"  # the model_type hf_config_override gives DeepSeek-V3-type configs
LAYERS_KEY = "num_nextn_predict_layers"
LOAD_FORMATS = ("auto", "hf", "safetensors", "fastsafetensors")  # DefaultModelLoader's safetensors formats
MODELS, SPECULATIVE = "models", "speculative-config"
NO_MTP_FIX = "serve it without the mtp method (with an EAGLE-3 drafter, or none)"
UNKNOWN = object()  # a value the reading cannot tell (a condition of it: the rules are not read)
BACKEND_OVERRIDES = b"transformers_mtp_overrides"  # 0.34's: given for a Transformers-backend target
RETURNED = "return"  # where _ran keeps the value a return statement gives (a keyword: no name of the code's)


@frozen
class Absent(FrozenValue):
    """getattr(hf_config, key, default) where config.json has no `key`: `default`, unless the config
    class gives one (transformers' DeepseekV3Config gives none; a model's own remote code may)."""

    key: str
    default: object


@frozen
class MtpDrafter(FrozenValue):
    """What hf_config_override makes of a config: its model_type, and n_predict (None: not set)."""

    model_type: object
    n_predict: object  # an int, None, an Absent, or another JSON value
    layers: object  # the built config's num_hidden_layers (MiMo's and GLM-Lite's are set to 0)
    architecture: object  # the class vLLM's registry builds it as (DeepSeekMTPModel, Glm4MoeMTPModel, ...)


def mtp_findings(
    command: LaunchCommand, target: ModelConfig, drafter: ModelConfig | None, read: Reader, method: str | None
) -> list[Finding]:
    """The findings on the mtp drafter vLLM builds for the launch (none when `method`, the one vLLM
    settles on: patchkit/launch/method.py, is another): read from the tree `read` gives and the
    checkpoint's own files (never kept: files outside the tree)."""
    spec = command.speculative_config or {}
    model, tokens = spec.get("model"), spec.get("num_speculative_tokens")
    if method != "mtp" or (model is None and tokens is None):
        return []  # vLLM fills in the target as the drafter only when num_speculative_tokens is given
    if model is not None and drafter is None:
        return []  # a drafter found nowhere, or no name: the models finding says it
    name = drafter.name if drafter is not None else str(command.model)
    config = drafter.config if drafter is not None else mtp_own_config(command, target)
    if isinstance(config, str):
        return [cannot_judge(MODELS, f"the mtp drafter {escaped(name)}: {config}", None)]
    text = config.get("text_config") if LAYERS_KEY not in config else None
    layers = text.get(LAYERS_KEY) if isinstance(text, dict) else config.get(LAYERS_KEY)
    if type(layers) is int and layers == 0:  # Kimi-K2's own config says so (Kimi-K2.5's text_config)
        return [_no_mtp_layers(name)]
    source = read(SPEC_FILE)
    built = mtp_drafter(source, config)
    backend = command.optional_text("model-impl") == "transformers" and BACKEND_OVERRIDES in (source or b"")
    if built is None or backend:  # 0.34: the Transformers backend's overrides replace the reading's rules
        why = f"the tree's {SPEC_FILE} (hf_config_override) is not read"
        why += " for --model-impl transformers" if backend else ""
        return [cannot_judge(MODELS, f"the mtp drafter of {escaped(name)}: {why}", "give --python PATH")]
    return _divisibility(built, tokens, name) + _mtp_layers(command, config, built, name, read, model is not None)


def _no_mtp_layers(name: str) -> Finding:
    message = f"{escaped(name)} has no MTP layers ({LAYERS_KEY} is 0): vLLM's mtp method fails on it"
    return Finding(SPECULATIVE, False, message, NO_MTP_FIX)


def mtp_own_config(command: LaunchCommand, target: ModelConfig) -> dict[str, Any] | str:
    """The target's config.json as vLLM's draft ModelConfig reads it: without --hf-overrides and
    --hf-config-path (hf_config_override is its only override), from the model's own directory."""
    if not command.hf_overrides and command.optional_text("hf-config-path") is None:
        return target.config
    found = target_directory(command)
    if found is None:
        return "its config.json is not in a local directory (vLLM reads it there, not --hf-config-path)"
    try:
        return resolve_model(os.path.join(command.working_directory(), found[1]), command.environ).config
    except (TargetError, BadInput) as exc:
        return str(exc)


def _divisibility(built: MtpDrafter, tokens: object, name: str) -> list[Finding]:
    """SpeculativeConfig's rule (0.11 on): num_speculative_tokens above n_predict is a multiple of it;
    n_predict 0 raises ZeroDivisionError (a config without MTP layers that says so)."""
    count = built.n_predict.default if isinstance(built.n_predict, Absent) else built.n_predict
    tokens = lax_int(tokens)  # "3" and 3.0 read as 3; False: pydantic refuses it
    if type(tokens) is not int or type(count) is not int:
        return []  # a count vLLM's own reading refuses: the speculative-config finding says it
    if count == 0:
        return [_no_mtp_layers(name)]
    if tokens <= count or tokens % count == 0:
        return []
    lower = tokens // count * count
    message = f"vLLM refuses num_speculative_tokens {tokens}: not a multiple of the model's {count} MTP layers"
    fixes = sorted({n for n in (lower, lower + count) if n > 0})
    return [Finding(SPECULATIVE, False, message, f'give "num_speculative_tokens" {" or ".join(map(str, fixes))}')]


def _mtp_layers(
    command: LaunchCommand, config: dict[str, Any], built: MtpDrafter, name: str, read: Reader, named: bool
) -> list[Finding]:
    """The MTP drafter's own faults once the target has loaded: DeepSeek's without num_nextn_predict_layers
    to read (DeepSeekMultiTokenPredictor reads it unguarded); unquantized, none of its layers' weights, as
    its module's get_spec_layer_idx_from_weight_name takes them (DeepSeek's, GLM's, Step's: a cannot-judge
    for a module whose rule is not read)."""
    count, shown = built.n_predict, escaped(name)
    if isinstance(count, Absent) and built.model_type == DEEPSEEK:
        source = read(DEEPSEEK_MTP)
        auto = config.get("auto_map")
        if command.trust_remote_code and isinstance(auto, dict) and "AutoConfig" in auto:
            why = f"its config has no {LAYERS_KEY}, and its own config class may give one"
            return [cannot_judge(MODELS, f"the mtp drafter {shown}: {why}", "give --python PATH")]
        if source is None or UNGUARDED not in source:
            return [cannot_judge(MODELS, f"the mtp drafter {shown}: the tree's {DEEPSEEK_MTP} is not read", None)]
        message = f"{shown}'s config has no {LAYERS_KEY}: vLLM's mtp drafter fails after the target's load"
        fix = f"add {LAYERS_KEY} to its config.json (DeepSeek-V3's is 1), or drop the mtp method"
        return [Finding(MODELS, False, message, fix)]
    first = config.get("num_hidden_layers")
    where = drafter_directory(command) if named else target_directory(command)
    load_format = drafter_load_format(command, read, "mtp")  # the MTP layers load with the drafter's loader
    if where is None or load_format not in LOAD_FORMATS or _quantized(command, config, named):
        return []  # a hub id vLLM downloads, a loader the models finding names; quantized: no strict check
    if type(count) is not int or count <= 0 or type(first) is not int:
        given = f"its config gives no whole {LAYERS_KEY} and num_hidden_layers"
        unread = str(built.model_type).endswith("mtp") and count != 0
        return [cannot_judge(MODELS, f"the weights of {shown}'s MTP layers: {given}", None)] if unread else []
    entry = registry_tables(read).get("_SPECULATIVE_DECODING_MODELS", {}).get(str(built.architecture))
    where_built = entry[0] if entry else "no registry entry"
    plain = "." not in where_built and entry is not None  # 0.30's vllm.models.* packages: not read
    module = f"{MODELS_DIR}/{where_built}.py" if plain else f"{built.architecture}: {where_built}"
    rule = spec_layer_rule(read, module) if plain and built.layers == first else None
    names = weight_names(os.path.join(command.working_directory(), where[1]))
    if rule is None or STRICT not in (read(LOADER) or b""):
        names = f"the tree's rule for their names ({escaped(module)}) is not read"
    if isinstance(names, str):
        return [cannot_judge(MODELS, f"the weights of {shown}'s MTP layers: {names}", None)]
    assert rule is not None
    prefixes, anywhere = rule
    wanted = tuple(f"{prefix}{first + i}." for i in range(count) for prefix in prefixes)
    layers = f"{wanted[0]}*" if count == 1 else f"{wanted[0]}* to {prefixes[0]}{first + count - 1}.*"
    if any(weight.startswith(wanted) or (anywhere and any(w in weight for w in wanted)) for weight in names):
        return [Finding(MODELS, True, f"mtp drafter {shown}: the weights of its MTP layers ({layers}) are there")]
    plural = "s" if count > 1 else ""
    message = (
        f"{shown} holds no weights of its MTP layer{plural} ({layers}): the mtp drafter's load fails after the target's"
    )
    return [Finding(MODELS, False, message, "fetch the whole checkpoint (its MTP layers too), or drop the mtp method")]


def _quantized(command: LaunchCommand, config: dict[str, Any], named: bool) -> bool:
    """Whether vLLM's draft model config is quantized (get_quant_config then loads it without the
    strict check): --quantization, the speculative config's own, or what the checkpoint's files say
    as vLLM reads them (drafter_weights.quantization: a compression_config too)."""
    spec = command.speculative_config or {}
    if command.optional_text("quantization") is not None or spec.get("quantization"):
        return True
    where = drafter_directory(command) if named else target_directory(command)
    return quantization(config, os.path.join(command.working_directory(), where[1]) if where else None) is not None


RULE = "get_spec_layer_idx_from_weight_name"
LOADED = "return loaded_params"  # the module's load_weights returns what it loaded: the strict check runs


def spec_layer_prefixes(read: Reader) -> tuple[str, ...] | None:
    """The prefixes DeepSeek's MTP drafter takes its layers' weights by (spec_layer_rule's)."""
    rule = spec_layer_rule(read, DEEPSEEK_MTP)
    return None if rule is None else rule[0]


def spec_layer_rule(read: Reader, module: str) -> tuple[tuple[str, ...], bool] | None:
    """The prefixes an MTP drafter's `module` takes its layers' weights by (model.layers.{L}.: L from
    num_hidden_layers on, one per MTP layer), and whether a name holding one anywhere counts (GLM's
    `in`, not startswith): read from get_spec_layer_idx_from_weight_name, in the module or the sibling
    it imports it from (deepseek_v2.py up to 0.22, utils.py from 0.26), where the module skips other
    weights and returns what it loaded; None when the rule is not read."""
    tree = python_tree(read(module))
    function = _function(tree, RULE)
    if function is None and tree is not None:
        imported = next(
            (
                node.module
                for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
                if any(alias.name == RULE for alias in node.names)
            ),
            None,
        )
        function = _function(python_tree(read(f"{MODELS_DIR}/{imported}.py")), RULE) if imported else None
    source = read(module) or b""
    if function is None or RULE.encode() not in source or b"spec_layer is None" not in source:
        return None
    return _prefixes(function) if LOADED.encode() in source else None


def _prefixes(function: ast.FunctionDef) -> tuple[tuple[str, ...], bool] | None:
    """The f-string prefixes `f"{prefix}{base + i}."` the rule matches, base bound to config.num_hidden_layers
    and i looping over range(num_nextn_predict_layers) (given as config's, or a name bound to it)."""
    bases, counts = set(), {f"config.{LAYERS_KEY}"}
    for node in ast.walk(function):
        bound = [(node.targets[0], node.value)] if isinstance(node, ast.Assign) and len(node.targets) == 1 else []
        bound += [(node.target, node.value)] if isinstance(node, ast.NamedExpr) else []
        for target, value in bound:
            text = ast.unparse(value)
            if isinstance(target, ast.Name) and text == "config.num_hidden_layers":
                bases.add(target.id)
            if isinstance(target, ast.Name) and text.startswith(f"getattr(config, '{LAYERS_KEY}'"):
                counts.add(target.id)
    ranges = {f"range({count})" for count in counts}
    steps = {
        node.target.id
        for node in ast.walk(function)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and ast.unparse(node.iter) in ranges
    }
    shapes = {f"{{{base} + {step}}}" for base in bases for step in steps}
    prefixes, anywhere = [], False
    for node in ast.walk(function):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        if len(parts) != 3 or ast.unparse(parts[1]) not in shapes or ast.unparse(parts[2]) != "'.'":
            return None
        if not (isinstance(parts[0], ast.Constant) and isinstance(parts[0].value, str)):
            return None
        prefixes.append(parts[0].value)
    for node in ast.walk(function):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.JoinedStr):
            anywhere = anywhere or isinstance(node.ops[0], ast.In)
    return (tuple(dict.fromkeys(prefixes)), anywhere) if prefixes else None


def _function(tree: ast.AST | None, name: str) -> ast.FunctionDef | None:
    """The function `name` at the top of `tree` or in one of its classes."""
    nodes = [] if tree is None else list(ast.iter_child_nodes(tree))
    nodes += [child for node in nodes if isinstance(node, ast.ClassDef) for child in node.body]
    return next((node for node in nodes if isinstance(node, ast.FunctionDef) and node.name == name), None)


class _Config(dict[str, Any]):
    """The hf_config hf_config_override is handed: config.json's values, changed as it changes them."""

    def __bool__(self) -> bool:  # a PretrainedConfig is true however few its values
        return True


def mtp_drafter(source: bytes | None, config: dict[str, Any]) -> MtpDrafter | None:
    """What the tree's SpeculativeConfig.hf_config_override makes of `config`, run over its statements
    as Python would (model_type and architectures compared, renamed, n_predict read); None where a
    statement or a condition is of a shape this reading does not know."""
    function = _function(python_tree(source), "hf_config_override")
    if function is None or not function.args.args:
        return None
    hf, params = _Config(config), function.args.args
    names: dict[str, object] = {params[0].arg: hf}
    defaults = function.args.defaults
    for param, default in zip(
        params[len(params) - len(defaults) :], defaults, strict=True
    ):  # the defaults vLLM calls it with
        names[param.arg] = default.value if isinstance(default, ast.Constant) else UNKNOWN
    if _ran(function.body, names) is False:
        return None
    hf = names.get(RETURNED, hf)  # type: ignore[assignment]
    if not isinstance(hf, _Config):
        return None
    built = hf.get("architectures")
    first = built[0] if isinstance(built, list) and built else None
    return MtpDrafter(hf.get("model_type"), hf.get("n_predict"), hf.get("num_hidden_layers"), first)


def _ran(statements: list[ast.stmt], names: dict[str, object]) -> bool | None:
    """Run `statements`: True when they ran through, False where one is not read, None on a return."""
    for node in statements:
        if isinstance(node, ast.Return):  # the config it returns (NemotronH's: its text_config)
            names[RETURNED] = _value(node.value, names) if node.value is not None else UNKNOWN
            return None
        if isinstance(node, ast.If):
            test = _value(node.test, names)
            if test is UNKNOWN:
                return False
            done = _ran(node.body if test else node.orelse, names)
            if done is not True:
                return done
        elif not _step(node, names):
            return False
    return True


def _step(node: ast.stmt, names: dict[str, object]) -> bool:
    """One assignment or hf_config.update({...}) (a docstring, a comment's string: nothing)."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], _value(node.value, names)
        if isinstance(target, ast.Name):
            names[target.id] = value
            return True
        owner = _value(target.value, names) if isinstance(target, ast.Attribute) else None
        if isinstance(owner, _Config) and isinstance(target, ast.Attribute):
            owner[target.attr] = value
            return True
        return False
    call = node.value if isinstance(node, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "update"):
        return False
    owner, given = _value(call.func.value, names), call.args[0] if len(call.args) == 1 else None
    if not isinstance(owner, _Config) or not isinstance(given, ast.Dict):
        return False
    keys = [key.value if isinstance(key, ast.Constant) else None for key in given.keys]
    if not all(isinstance(key, str) for key in keys):
        return False
    owner.update({str(key): _value(value, names) for key, value in zip(keys, given.values, strict=True)})
    return True


def _value(node: ast.expr, names: dict[str, object]) -> object:
    """An expression's value, or UNKNOWN: names, constants, tuples and lists, hf_config's attributes,
    getattr(hf_config, KEY, DEFAULT), a subscript, ==, !=, in, not in, and, or, not, :=."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id, UNKNOWN)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(item, names) for item in node.elts]
        return (
            UNKNOWN if any(item is UNKNOWN for item in items) else items if isinstance(node, ast.List) else tuple(items)
        )
    if isinstance(node, ast.NamedExpr):
        names[node.target.id] = value = _value(node.value, names)
        return value
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, names)
        return _config(owner.get(node.attr, UNKNOWN)) if isinstance(owner, _Config) else UNKNOWN
    if isinstance(node, ast.Subscript):
        owner, index = _value(node.value, names), _value(node.slice, names)
        ok = isinstance(owner, list) and type(index) is int and -len(owner) <= index < len(owner)
        return owner[index] if ok else UNKNOWN  # type: ignore[index]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "intersection":
        owner = _value(node.func.value, names) if isinstance(node.func.value, ast.Set) else UNKNOWN
        other = _value(node.args[0], names) if len(node.args) == 1 else UNKNOWN
        if not isinstance(owner, tuple) or not isinstance(other, (list, tuple)):
            return UNKNOWN  # {...}.intersection(a list) alone is read
        return tuple(item for item in owner if item in other)
    if isinstance(node, ast.Call):
        return _getattr(node, names)
    if isinstance(node, ast.IfExp):
        test = _value(node.test, names)
        return UNKNOWN if _unknown(test) else _value(node.body if test else node.orelse, names)
    return _test(node, names)


def _getattr(node: ast.Call, names: dict[str, object]) -> object:
    """getattr(hf_config, "KEY", DEFAULT): config.json's value, else an Absent (the class may give one)."""
    if not (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 3):
        return UNKNOWN
    owner, key, default = (_value(arg, names) for arg in node.args)
    if not isinstance(owner, _Config) or not isinstance(key, str) or default is UNKNOWN:
        return UNKNOWN
    if key not in owner:  # getattr(hf_config, "text_config", hf_config): a text model's own config
        return default if isinstance(default, _Config) else Absent(key, default)
    return _config(owner[key])


def _config(value: object) -> object:
    """A config's object value as transformers holds it (text_config: a config of its own)."""
    return _Config(value) if isinstance(value, dict) and not isinstance(value, _Config) else value


def _test(node: ast.expr, names: dict[str, object]) -> object:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = _value(node.operand, names)
        return UNKNOWN if _unknown(value) else not value
    if isinstance(node, ast.BoolOp):  # as Python runs it: the first value that decides is the value
        for item in node.values:
            value = _value(item, names)
            if _unknown(value) or bool(value) != isinstance(node.op, ast.And):
                return UNKNOWN if _unknown(value) else value
        return value
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return UNKNOWN
    left, right = _value(node.left, names), _value(node.comparators[0], names)
    if _unknown(left) or _unknown(right):
        return UNKNOWN
    if isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        return (left == right) == isinstance(node.ops[0], ast.Eq)
    if isinstance(node.ops[0], (ast.Is, ast.IsNot)) and right is None:
        return (left is None) == isinstance(node.ops[0], ast.Is)
    if not isinstance(node.ops[0], (ast.In, ast.NotIn)) or not isinstance(right, (str, tuple, list)):
        return UNKNOWN
    if isinstance(right, str) and not isinstance(left, str):
        return UNKNOWN  # Python raises TypeError there
    return (left in right) == isinstance(node.ops[0], ast.In)


def _unknown(value: object) -> bool:
    """A value a condition cannot be told from: unknown, or absent (the config class decides)."""
    return value is UNKNOWN or isinstance(value, Absent)

"""The command's --speculative-config held to the installed vLLM's SpeculativeConfig (read statically
from vllm/config/speculative.py): it refuses, before any model loads, a method its SpeculativeMethod
Literal does not name (pydantic matches it exactly: "Eagle3" is refused), an empty drafter model, a
num_speculative_tokens without a drafter for a method that needs one, no method where the drafter
says none it knows (its name, or its model_type), mtp without "model" on a target whose model_type names no
method, ngram or mtp without num_speculative_tokens, a whole-number field outside its declared bounds
(disable_by_batch_size under 2), a draft_tensor_parallel_size other than 1 or the target's, and under
method draft_model a drafter whose vocab_size is not the target's; spec_limits: a max_model_len above
the drafter's or the target's, method suffix without arctic_inference."""

from __future__ import annotations

import ast
import functools
from typing import Any

from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding
from patchkit.launch.lax import lax_bool, lax_int
from patchkit.launch.method import built_model_type, settled_method
from patchkit.launch.mtp import mtp_own_config
from patchkit.launch.spec_limits import length_refused, suffix_refused
from patchkit.launch.spec_literals import MTP_TYPES, OLD_MTP_TYPES, literal_tables

SPEC_FILE = "vllm/config/speculative.py"
CHECK = "speculative-config"
METHODS = "SpeculativeMethod"
NO_DRAFTER_NEEDED = ("mtp", "ngram", "[ngram]", "suffix")  # methods whose model vLLM fills in itself
DRAFTER_FIX = 'give "model" the drafter\'s path or hub id'
DETECTED_TYPES = ("medusa", "mlp_speculator", "longcat_flash_mtp")  # a drafter model_type naming its method
VOCAB_RULE = b"self.verify_equal_vocab_size_if_draft_model()"  # 0.15 on, at the end of _verify_args
DRAFT_MODEL_REFUSED = b"Speculative decoding with draft model is not"  # 0.11-0.14 raise it for any drafter left
# 0.11-0.30: the target is made mtp's drafter only when num_speculative_tokens is given, and _verify_args
# refuses a config left without a count
FILLED_WITH_COUNT = b"if self.model is None and self.num_speculative_tokens is not None:"
COUNT_NEEDED = b"num_speculative_tokens must be provided"


def speculative_findings(context: LaunchContext) -> list[Finding]:
    """One failing finding where vLLM's SpeculativeConfig raises; none when it accepts the config or
    the installed file does not say (a release of another layout: vLLM's own validation judges)."""
    spec = context.command.speculative_config
    if spec is None:
        return []
    source = context.read(SPEC_FILE)
    literals = literal_tables(source)
    methods = literals.get(METHODS)
    if methods is None:
        return []
    refusals = [
        refusal
        for refusal in (
            _unknown_key(spec, config_fields(source)),
            _refusal(spec, methods, literals.get(MTP_TYPES, literals.get(OLD_MTP_TYPES, set())), context),
            _out_of_bounds(spec, field_bounds(source)),
            _not_text(spec, string_fields(source)),
            _not_bool(spec, bool_fields(source)),
            _draft_tensor_parallel_size(spec, source, context),
            _draft_vocab(source, context),
            length_refused(spec, source, context),
            suffix_refused(spec, source, context),
        )
        if refusal is not None
    ]  # each, not the first: every fault in one run
    if not refusals:
        return []
    why, fix = "; ".join(r[0] for r in refusals), "; ".join(r[1] for r in refusals)
    return [Finding(CHECK, False, f"vLLM refuses --speculative-config: {why}", fix)]


def _unknown_key(spec: dict[str, Any], fields: set[str]) -> tuple[str, str] | None:
    """SpeculativeConfig forbids a key it has no field for (pydantic extra="forbid")."""
    unknown = sorted(key for key in spec if fields and key not in fields)
    if not unknown:
        return None
    near = {key: _near(key, fields) for key in unknown}
    if all(near.values()):
        return f"it has no field {', '.join(unknown)}", "; ".join(f'write "{near[k]}" for "{k}"' for k in unknown)
    return f"it has no field {', '.join(unknown)}", "drop it, or spell it as vLLM's SpeculativeConfig does"


def _near(word: str, known: set[str]) -> str | None:
    """The one of `known` that `word` misspells: the same but for case and punctuation ("eagle-3",
    "Eagle3"), else the only one it shortens ("num_spec_tokens"); None when none or several.
    (No difflib: `run`'s fast path imports this module, and start-up is measured.)"""
    letters = _letters(word)
    same = [k for k in sorted(known) if _letters(k) == letters]
    if same:
        return same[0]
    longer = [k for k in sorted(known) if len(letters) >= 4 and _shortens(letters, _letters(k))]
    return longer[0] if len(longer) == 1 else None


def _shortens(short: str, word: str) -> bool:
    """Whether `short` is `word` with a few letters left out (its letters in order, the first the
    same, most of them kept: "num_spec_tokens", not "modle" for max_model_len)."""
    rest = iter(word)
    return short[:1] == word[:1] and 5 * len(short) >= 3 * len(word) and all(c in rest for c in short)


def _letters(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


def _refusal(
    spec: dict[str, Any], methods: set[str], mtp_types: set[str], context: LaunchContext
) -> tuple[str, str] | None:
    """(why, fix) as SpeculativeConfig refuses `spec` (its field types, then __post_init__ and
    _verify_args, in that order), or None."""
    method, model, tokens = spec.get("method"), spec.get("model"), spec.get("num_speculative_tokens")
    known = ", ".join(sorted(methods))
    if method is not None and (not isinstance(method, str) or method not in methods):
        near = _near(method, methods) if isinstance(method, str) else None
        fix = f'write "method": "{near}"' if near else f'give "method" one of: {known}'
        return f"method {method!r} is none of its methods ({known})", fix
    if spec.get("tensor_parallel_size") is not None:
        return "it takes no tensor_parallel_size", 'write "draft_tensor_parallel_size"'
    if model is not None and not isinstance(model, str):
        return f"model {model!r} is not a string", DRAFTER_FIX
    count = lax_int(tokens)
    if count is not None and (count is False or count <= 0):
        return f"num_speculative_tokens {tokens!r} is no count above 0", 'give "num_speculative_tokens" a count above 0'
    if model == "":
        return 'model "" names no drafter', DRAFTER_FIX
    method = "mtp" if method in mtp_types else method  # a str here: one of its methods
    method = "ngram" if method is None and model in ("ngram", "[ngram]") else method  # as vLLM names it
    if method in NO_DRAFTER_NEEDED and (method != "mtp" or model is None):
        return _own_drafter(method, tokens, mtp_types, context)  # their model is the target's or none
    if model is None:
        given = "num_speculative_tokens given but" if tokens is not None else "no num_speculative_tokens and"
        return f'{given} no "model" (method {method})', DRAFTER_FIX
    drafter = context.drafter.config if context.drafter is not None else None
    if model not in ("ngram", "[ngram]") and not _method_detected(model, method, mtp_types, context, drafter):
        return _undetected(model, method)
    if tokens is None and context.drafter is not None and context.drafter.get("n_predict") is None:
        return "no num_speculative_tokens, and the drafter's config has no n_predict", 'give "num_speculative_tokens"'
    return None


def _out_of_bounds(spec: dict[str, Any], bounds: dict[str, dict[str, int]]) -> tuple[str, str] | None:
    """A whole-number field outside the bounds its `Field(ge=, gt=, le=, lt=)` declares (pydantic
    refuses it: disable_by_batch_size 1 under ge=2), or no whole number at all."""
    for key, bound in sorted(bounds.items()):
        value = lax_int(spec.get(key))
        if value is None or key == "num_speculative_tokens":  # absent, or judged by _refusal
            continue
        if value is False or not all(_holds(value, rule, limit) for rule, limit in bound.items()):
            rules = " and ".join(f"{_WORDS[rule]} {limit}" for rule, limit in bound.items())
            return f"{key} {spec[key]!r} is no whole number {rules}", f'give "{key}" a whole number {rules}'
    return None


_WORDS = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}


def _not_text(spec: dict[str, Any], fields: set[str]) -> tuple[str, str] | None:
    """A field declared `str` (or `str | None`) given a value that is not a string: pydantic does
    not turn a number, a boolean or a list into one ("Input should be a valid string"). The drafter's
    `model` is judged by _refusal."""
    wrong = sorted(
        key for key in fields if key != "model" and spec.get(key) is not None and not isinstance(spec[key], str)
    )
    if not wrong:
        return None
    said = ", ".join(f"{key} {spec[key]!r}" for key in wrong)
    return f"{said} {'is' if len(wrong) == 1 else 'are'} not a string", "; ".join(
        f'give "{key}" as a JSON string' for key in wrong
    )


def _not_bool(spec: dict[str, Any], fields: set[str]) -> tuple[str, str] | None:
    """A field declared `bool` (or optional) given a value pydantic's lax mode reads as no bool
    (" true ", "maybe", 2): refused at start ("Input should be a valid boolean")."""
    wrong = sorted(key for key in fields if spec.get(key) is not None and lax_bool(spec[key]) is None)
    if not wrong:
        return None
    said = ", ".join(f"{key} {spec[key]!r}" for key in wrong)
    return f"{said} {'is' if len(wrong) == 1 else 'are'} no boolean", "; ".join(
        f'give "{key}" true or false' for key in wrong
    )


def _holds(value: int, rule: str, limit: int) -> bool:
    return {"ge": value >= limit, "gt": value > limit, "le": value <= limit, "lt": value < limit}[rule]


def _draft_tensor_parallel_size(
    spec: dict[str, Any], source: bytes | None, context: LaunchContext
) -> tuple[str, str] | None:
    """A drafter's draft_tensor_parallel_size is 1 or the target's -tp (vLLM's
    _verify_and_get_draft_tp, for every method with a drafter model: not ngram or suffix)."""
    value = lax_int(spec.get("draft_tensor_parallel_size"))
    if not isinstance(value, int) or isinstance(value, bool) or b"_verify_and_get_draft_tp" not in (source or b""):
        return None
    target = context.command.tensor_parallel_size
    if spec.get("method") in ("ngram", "[ngram]", "suffix") or value in (1, target):
        return None
    allowed = "1" if target == 1 else f"1 or {target}"
    return (
        f"draft_tensor_parallel_size {value} is neither 1 nor the target's tensor parallel size ({target})",
        f'give "draft_tensor_parallel_size" {allowed}, or drop it',
    )


def _draft_vocab(source: bytes | None, context: LaunchContext) -> tuple[str, str] | None:
    """Under method draft_model SpeculativeConfig refuses a drafter whose vocab_size (its text config's)
    is not the target's; a size either config does not give is left to vLLM's own validation."""
    drafter = context.drafter
    method = settled_method(context.command, drafter, context.read)
    if drafter is None or method != "draft_model" or VOCAB_RULE not in (source or b""):
        return None
    ours, theirs = drafter.text_config.get("vocab_size"), context.target.text_config.get("vocab_size")
    if type(ours) is not int or type(theirs) is not int or ours == theirs:
        return None
    said = f"under method draft_model the drafter's vocab_size {ours} is not the target's {theirs}"
    return said, f"use a drafter with the target's tokenizer (vocab_size {theirs}), or another method"


def _own_drafter(method: str, tokens: object, mtp_types: set[str], context: LaunchContext) -> tuple[str, str] | None:
    """ngram, and mtp without "model", as SpeculativeConfig takes them where the tree makes the target mtp's
    drafter only when num_speculative_tokens is given (0.11-0.30): without a count _verify_args refuses both;
    with one, mtp's method is told again from the target's own config.json (hf_config_override applied) as
    for a named drafter, and vLLM raises where that names none (a Llama). Another layout: vLLM judges."""
    source = context.read(SPEC_FILE) or b""
    if method not in ("mtp", "ngram", "[ngram]") or FILLED_WITH_COUNT not in source or COUNT_NEEDED not in source:
        return None
    if tokens is None:
        return f"method {method} with no num_speculative_tokens", 'give "num_speculative_tokens"'
    own = mtp_own_config(context.command, context.target) if method == "mtp" else None
    if not isinstance(own, dict):  # ngram; or the config.json the draft ModelConfig reads is not read: vLLM judges
        return None
    if _method_detected(str(context.command.model), method, mtp_types, context, own):
        return None
    model_type = built_model_type(own, context.read)
    why = f'method mtp without "model" makes the target its drafter, and its model_type {model_type!r} names no method'
    return why, 'drop the mtp method (vLLM reads no MTP layers in this model), or give "model" a drafter and its method'


def _method_detected(
    model: str, method: str | None, mtp_types: set[str], context: LaunchContext, drafter: dict[str, Any] | None
) -> bool:
    """Whether vLLM's SpeculativeConfig settles on a method for a drafter given as `model` (the same
    chain in 0.11-0.17): eagle or eagle3 given is kept; else "eagle-" or "eagle3" in the drafter's
    name (redirected); else its model_type as hf_config_override leaves it (medusa, an MTP type);
    else draft_model given, unless the tree refuses it (0.11-0.14). Any other method given (mtp, medusa) is replaced
    by that chain, and vLLM raises where it finds none. An unknown drafter config is not judged here."""
    if method in ("eagle", "eagle3"):
        return True
    name = context.command.draft_model_name(model).lower()
    if "eagle-" in name or "eagle3" in name:
        return True
    if method == "draft_model" and DRAFT_MODEL_REFUSED not in (context.read(SPEC_FILE) or b""):
        return True  # kept (0.15 on), or a tree that does not show it refused
    if drafter is None:
        return True
    model_type = built_model_type(drafter, context.read)
    return model_type is None or model_type in DETECTED_TYPES or model_type in mtp_types


def _undetected(model: str, method: str | None) -> tuple[str, str]:
    if method is None:
        return (
            f"no method, and the drafter {model} names none (by its name or model_type)",
            'give "method" (e.g. "eagle3")',
        )
    why = f"method {method} is replaced by the one the drafter {model} names (by its name or model_type), and it names none"
    fix = 'give the drafter\'s own "method" ("eagle3" for an EAGLE-3 head)'
    return why, fix + ('; for the target\'s own MTP layers drop "model"' if method == "mtp" else "")


def config_fields(source: bytes | None) -> set[str]:
    """The annotated fields of class SpeculativeConfig in `source` (empty when none are found)."""
    return set(_annotations(source))


def string_fields(source: bytes | None) -> set[str]:
    """The fields of class SpeculativeConfig in `source` annotated `str`, `str | None` or
    `Optional[str]` (revision, code_revision, ...)."""
    return {name for name, annotation in _annotations(source).items() if _is_type(annotation, "str")}


def bool_fields(source: bytes | None) -> set[str]:
    """The fields annotated `bool`, `bool | None` or `Optional[bool]` (parallel_drafting, ...)."""
    return {name for name, annotation in _annotations(source).items() if _is_type(annotation, "bool")}


def _is_type(annotation: ast.expr, name: str) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == name
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        parts = [annotation.left, annotation.right]
        none = [p for p in parts if isinstance(p, ast.Constant) and p.value is None]
        return len(none) == 1 and _is_type(next(p for p in parts if p is not none[0]), name)
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name):
        return annotation.value.id == "Optional" and _is_type(annotation.slice, name)
    return False


def _annotations(source: bytes | None) -> dict[str, ast.expr]:
    """Each annotated field of class SpeculativeConfig in `source` and its annotation."""
    return {f.target.id: f.annotation for f in _fields(source) if isinstance(f.target, ast.Name)}


@functools.lru_cache(maxsize=2)
def _fields(source: bytes | None) -> tuple[ast.AnnAssign, ...]:
    """The annotated statements of class SpeculativeConfig in `source`, parsed once a file."""
    tree = python_tree(source)
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            return tuple(f for f in node.body if isinstance(f, ast.AnnAssign))
    return ()


def field_bounds(source: bytes | None) -> dict[str, dict[str, int]]:
    """The whole-number bounds each field of class SpeculativeConfig declares in `source`
    (`x: int | None = Field(default=None, ge=2)`: {"x": {"ge": 2}})."""
    bounds: dict[str, dict[str, int]] = {}
    for node in _fields(source):
        call = node.value
        if (
            isinstance(node.target, ast.Name)
            and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "Field"
        ):
            found = {
                k.arg: k.value.value
                for k in call.keywords
                if k.arg in _WORDS and isinstance(k.value, ast.Constant) and type(k.value.value) is int
            }
            if found:
                bounds[node.target.id] = found
    return bounds

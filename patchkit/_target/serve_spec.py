"""The spec of the installed vLLM's own launch parsers, for patchkit/launch/serve_parser.py: each
option of `vllm serve` and of the api_server module, with its option strings, nargs and kind, read
from the parser objects vLLM builds (vLLM imported; nothing parsed, nothing served).

Run in vLLM's interpreter: python serve_spec.py ANSWER.json < {}  (stdlib and vLLM only)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from typing import Any

KINDS = {
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
    argparse._CountAction: "count",
    argparse._HelpAction: "help",
    argparse._VersionAction: "version",
    argparse.BooleanOptionalAction: "boolean_optional",
    argparse._AppendAction: "append",
    argparse._AppendConstAction: "append_const",
    argparse._ExtendAction: "extend",
}


def describe(action: argparse.Action, parser: argparse.ArgumentParser) -> dict[str, Any]:
    kind = next((name for cls, name in KINDS.items() if isinstance(action, cls)), "store")
    nargs = (
        0
        if kind in ("store_true", "store_false", "store_const", "count", "help", "version", "append_const")
        else action.nargs
    )
    if kind == "boolean_optional":
        nargs = 0
    try:
        const = json.loads(json.dumps(action.const))
    except (TypeError, ValueError):
        const = None
    described = {"options": _option_strings(action, parser), "dest": action.dest, "nargs": nargs, "kind": kind}
    described = {**described, "const": const, "type": _type(action.type), **_value_rules(action)}
    negative = getattr(action, "negative_option_strings", None)  # 0.33.0's --enable-x/--disable-x pairs
    return {**described, "negative": sorted(negative)} if kind == "boolean_optional" and negative else described


def _option_strings(action: argparse.Action, parser: argparse.ArgumentParser) -> list[str]:
    """The strings the parser reads as this action: its own, then those it keeps out of the help
    (0.33.0's --no-enable-x), which take part in prefix matching all the same."""
    hidden = [s for s, a in parser._option_string_actions.items() if a is action and s not in action.option_strings]
    return [*action.option_strings, *hidden]


def _type(converter: object) -> str | None:
    """The value's type when it is one a reader can apply as vLLM does: int, float, JSON (else None).
    Kept as older readers know it: an optional type (`optional`) and the others are in _value_rules."""
    if converter is int or converter is float:
        return converter.__name__
    return "json" if converter is json.loads else None


# vLLM's type functions (vllm/engine/arg_utils.py) by name, as the reader transcribes them
NAMED_TYPES = {
    "human_readable_int": "human_readable_int",
    "human_readable_int_or_auto": "human_readable_int_or_auto",
    "union_dict_and_str": "dict_or_str",
    "parse_dataclass": "dataclass",
}


def _value_rules(action: argparse.Action) -> dict[str, Any]:
    """What the parser holds a value to: its type (`value_type`: int, float, str, json,
    human_readable_int, human_readable_int_or_auto, dict_or_str, dataclass; None: not known, not
    held), whether "" and "None" are None (vLLM's optional_type), the choices, a config dataclass's
    fields (it forbids others), and api_server's --lora-modules action with its LoRAModulePath fields."""
    converter, optional = _unwrapped(action.type)
    rules: dict[str, Any] = {"value_type": _kind(converter), "optional": optional}
    if action.choices is not None:
        rules["choices"] = json.loads(json.dumps(list(action.choices)))
    if rules["value_type"] == "dataclass":
        rules["fields"] = _dataclass_fields(converter)
    if type(action).__name__ == "LoRAParserAction":
        rules["action"] = "lora_modules"
        rules["lora_fields"], rules["lora_required"] = _lora_fields(action)
    return rules


def _unwrapped(converter: object) -> tuple[object, bool]:
    """The type function inside vLLM's optional_type and parse_type closures, and whether an
    optional_type wrapped it."""
    optional = False
    for _ in range(4):
        name = getattr(converter, "__qualname__", "")
        cells = getattr(converter, "__closure__", None) or ()
        if not name.startswith(("optional_type.", "parse_type.")) or not cells:
            break
        optional = optional or name.startswith("optional_type.")
        converter = cells[0].cell_contents
    return converter, optional


def _kind(converter: object) -> str | None:
    if converter is None or converter is str:
        return "str"
    if converter is int or converter is float:
        return converter.__name__
    if converter is json.loads:
        return "json"
    return NAMED_TYPES.get(getattr(converter, "__name__", ""))


def _dataclass_fields(converter: Any) -> list[str] | None:
    """The keys a config dataclass accepts (None: it accepts others too, or they cannot be told)."""
    cls = (getattr(converter, "__defaults__", None) or (None,))[0]
    config = getattr(cls, "__pydantic_config__", None) or {}
    if cls is None or not dataclasses.is_dataclass(cls) or config.get("extra") != "forbid":
        return None
    return sorted(f.name for f in dataclasses.fields(cls) if f.init)


def _lora_fields(action: argparse.Action) -> tuple[list[str], list[str]]:
    """LoRAModulePath's fields, and those without a default (the action builds it with `**item`)."""
    cls = sys.modules[type(action).__module__].LoRAModulePath
    fields = dataclasses.fields(cls)
    missing = dataclasses.MISSING
    required = [f.name for f in fields if f.default is missing and f.default_factory is missing]
    return [f.name for f in fields], required


def actions(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    return [describe(a, parser) for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]


def parsers() -> dict[str, Any]:
    _force_cpu_platform_when_none()
    parser_class = _parser_class()
    make_arg_parser = _first(
        "make_arg_parser",
        "vllm.entrypoints.openai.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.common.cli_args",
    )
    serve = importlib.import_module("vllm.entrypoints.cli.serve")
    top = parser_class()
    subparsers = top.add_subparsers(required=False, dest="subparser")
    [command] = [c for c in serve.cmd_init() if c.name == "serve"]
    serve_parser = command.subparser_init(subparsers)
    api_server = make_arg_parser(parser_class())
    vllm = importlib.import_module("vllm")
    return {
        "vllm": str(vllm.__version__),
        "python": sys.version.split()[0],
        "serve": actions(serve_parser),
        "api_server": actions(api_server),
    }


def _parser_class() -> type[argparse.ArgumentParser]:
    found: type[argparse.ArgumentParser] = _first("FlexibleArgumentParser", "vllm.utils.argparse_utils", "vllm.utils")
    return found


def _first(name: str, *modules: str) -> Any:
    """`name` from the first of `modules` (newest layout first) that has it: vLLM moves its modules."""
    failed = []
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError as exc:
            failed.append(f"{module}: {exc}")
            continue
        if found is not None:
            return found
        failed.append(f"{module}: no {name}")
    raise ImportError(f"this vLLM has no {name}: {'; '.join(failed)}")


def _force_cpu_platform_when_none() -> None:
    """On a machine with no accelerator vLLM infers no device and its config defaults fail: CPU."""
    try:
        platforms: Any = importlib.import_module("vllm.platforms")
        if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
            platforms._current_platform = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
    except Exception:  # an older layout: vLLM decides itself
        pass


def work(request: dict[str, Any]) -> dict[str, Any]:
    return parsers()


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


def _unshadow() -> None:
    """Run by path, this directory is sys.path[0]: drop it, so that its modules shadow nothing of vLLM's."""
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


if __name__ == "__main__":
    _unshadow()
    write_answer(sys.argv[1], work(json.load(sys.stdin)))

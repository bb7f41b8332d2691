"""Property (issue 20 item 3), fast tier: on every generated `vllm serve` command line patchkit reads what
vLLM 0.16.0's parser reads, the parser here rebuilt from the recorded spec with argparse's own action
classes and FlexibleArgumentParser's rewrite transcribed step by step as vLLM writes it (its
processed_args, its delete set). The real parser is the oracle in tests/vllm_import/test_serve_parser_real.py."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import defaultdict
from pathlib import Path

from helpers import examples
from hypothesis import example, given, settings
from serve_lines import agree, patchkit_reading, serve_arguments

SPEC = Path(__file__).resolve().parent.parent / "patchkit" / "launch" / "specs" / "serve-0.16.0.json"
ACTIONS = {
    "store_true": "store_true",
    "store_false": "store_false",
    "boolean_optional": argparse.BooleanOptionalAction,
    "count": "count",
    "append": "append",
    "extend": "extend",
    "store": "store",
}


class Refused(Exception):
    pass


class Oracle(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)


# vLLM 0.16.0's type functions (vllm/engine/arg_utils.py), transcribed as written there
def parse_type(return_type):
    def _parse_type(val):
        try:
            return return_type(val)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"Value {val} cannot be converted to {return_type}.") from e

    return _parse_type


def optional_type(return_type):
    def _optional_type(val):
        if val == "" or val == "None":
            return None
        return parse_type(return_type)(val)

    return _optional_type


def union_dict_and_str(val):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return optional_type(json.loads)(val)


def human_readable_int(value):
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        decimal_multiplier = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        binary_multiplier = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        number, suffix = match.groups()
        if suffix in decimal_multiplier:
            return int(float(number) * decimal_multiplier[suffix])
        elif suffix in binary_multiplier:
            try:
                return int(number) * binary_multiplier[suffix]
            except ValueError as e:
                raise argparse.ArgumentTypeError("Decimals are not allowed") from e
    return int(value)


def human_readable_int_or_auto(value):
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def parse_dataclass(fields):
    """pydantic's TypeAdapter(cls).validate_json as far as the spec tells: an object of the fields."""

    def parse(val):
        value = json.loads(val)
        if not isinstance(value, dict) or (fields is not None and not set(value) <= set(fields)):
            raise argparse.ArgumentTypeError("ValidationError")
        return value

    return parse


class LoRAParserAction(argparse.Action):
    """vllm/entrypoints/openai/cli_args.py's, LoRAModulePath(**lora_dict) held to the spec's fields."""

    fields: tuple = ()
    needed: tuple = ()  # not `required`: argparse.Action's own attribute (a bool) would hide it

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values or []:
            if item in [None, ""]:
                continue
            if "=" in item and "," not in item:
                _name, _path = item.split("=")
            else:
                try:
                    lora_dict = json.loads(item)
                    if not isinstance(lora_dict, dict):
                        raise TypeError("argument after ** must be a mapping")
                    if not set(lora_dict) <= set(self.fields) or not set(self.needed) <= set(lora_dict):
                        raise TypeError("unexpected or missing argument")
                except json.JSONDecodeError:
                    parser.error(f"Invalid JSON format for --lora-modules: {item}")
                except TypeError as e:
                    parser.error(f"Invalid fields for --lora-modules: {item} - {e!s}")
        setattr(namespace, self.dest, values)


def vllm_type(action: dict):
    kind = action.get("value_type")
    plain = {
        "int": int,
        "float": float,
        "json": json.loads,
        "human_readable_int": human_readable_int,
        "human_readable_int_or_auto": human_readable_int_or_auto,
        "dict_or_str": union_dict_and_str,
        "dataclass": parse_dataclass(action.get("fields")),
    }.get(kind, str)
    if kind == "json" and not action.get("optional"):
        return plain  # json.loads itself
    return optional_type(plain) if action.get("optional") else plain


def oracle_parser() -> argparse.ArgumentParser:
    parser = Oracle(prog="serve", add_help=False)
    for action in json.loads(SPEC.read_text())["serve"]:
        options, kind = action["options"], action["kind"]
        if not options:
            parser.add_argument(action["dest"], nargs=action["nargs"])
        elif kind in ("help", "version"):
            parser.add_argument(*options, action="store_true", dest="asked_for_" + kind)
        elif kind == "boolean_optional":
            parser.add_argument(options[0], dest=action["dest"], action=argparse.BooleanOptionalAction)
        elif action["nargs"] == 0:
            parser.add_argument(*options, dest=action["dest"], action=ACTIONS.get(kind, "store_true"))
        elif action.get("action") == "lora_modules":
            lora = type(
                "Lora", (LoRAParserAction,), {"fields": action["lora_fields"], "needed": action["lora_required"]}
            )
            parser.add_argument(
                *options, dest=action["dest"], nargs=action["nargs"], action=lora, type=vllm_type(action)
            )
        else:
            parser.add_argument(
                *options,
                dest=action["dest"],
                nargs=action["nargs"],
                action=ACTIONS.get(kind, "store"),
                type=vllm_type(action),
                choices=action.get("choices"),
            )
    return parser


PARSER = oracle_parser()


def vllm_0_16_parse(args: list[str]) -> argparse.Namespace:
    """FlexibleArgumentParser.parse_args of vLLM 0.16.0 (for `["serve", ...]`), step by step."""
    args = ["serve", *args]
    model_idx = next((i for i, a in enumerate(args) if a == "--model" or a.startswith("--model=")), None)
    if model_idx is not None:
        if args[model_idx] == "--model":
            if model_idx + 1 >= len(args):
                raise Refused("IndexError")
            model_tag, rest = args[model_idx + 1], model_idx + 2
        else:
            model_tag, rest = args[model_idx].removeprefix("--model="), model_idx + 1
        args = ["serve", model_tag, *args[1:model_idx], *args[rest:]]
    pattern = re.compile(r"(?<=--)[^\.]*")
    processed = []
    for i, arg in enumerate(args):
        if arg.startswith("--help="):
            processed.append("--help")
        elif arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                processed.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + "=" + value)
            else:
                processed.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1))
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
    delete: set[int] = set()
    dict_args: dict = defaultdict(dict)
    for i, arg in enumerate(processed):
        if i in delete:
            continue
        if arg.startswith("--") and "." not in arg:
            continue
        if arg.startswith("-") and "." in arg:
            if "=" in arg:
                arg, value_str = arg.split("=", 1)
                if "." not in arg:
                    continue
            else:
                if i + 1 >= len(processed):
                    raise Refused("IndexError")
                value_str = processed[i + 1]
                delete.add(i + 1)
            if arg.endswith("+"):
                arg = arg[:-1]
                value_str = json.dumps(list(value_str.split(",")))
            key, *keys = arg.split(".")
            try:
                value = json.loads(value_str)
            except json.JSONDecodeError:
                value = value_str
            for part in reversed(keys):
                value = {part: value}
            _update(dict_args[key], value)
            delete.add(i)
    processed = [a for i, a in enumerate(processed) if i not in delete]
    for key, value in dict_args.items():
        processed += [key, json.dumps(value)]
    namespace = PARSER.parse_args(processed[1:])
    if getattr(namespace, "asked_for_help", False) or getattr(namespace, "asked_for_version", False):
        raise Refused("help")
    if namespace.model_tag is not None:
        namespace.model = namespace.model_tag
    return namespace


def _update(original: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _update(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


def oracle_reading(arguments: list[str]) -> dict:
    try:
        namespace = vllm_0_16_parse(arguments)
        tp = getattr(namespace, "tensor_parallel_size", None)
        reading = {
            "refused": False,
            "model": getattr(namespace, "model", None),
            "tensor_parallel_size": int(tp) if tp is not None else 1,
            "trust_remote_code": bool(getattr(namespace, "trust_remote_code", False)),
        }
        spec = getattr(namespace, "speculative_config", None)
        reading["speculative_config"] = json.loads(spec) if isinstance(spec, str) else spec
        if isinstance(getattr(namespace, "hf_overrides", None), str):
            json.loads(namespace.hf_overrides)
    except (Refused, ValueError):  # argparse refuses, or vLLM's types (int, JSON) would
        return {"refused": True}
    return reading


@settings(max_examples=examples(1500), deadline=None)
@given(serve_arguments)
@example(["org/m", "--lora-modules", '{"name": "a", "path": "p"}'])  # a LoRA module vLLM takes
def test_patchkit_reads_what_the_recorded_0_16_parser_reads(arguments):
    agree(arguments, patchkit_reading(arguments), oracle_reading(arguments))


def test_reading_a_command_never_asks_the_terminals_size(monkeypatch):
    """Issue 21: argparse makes a help formatter for each of the ~200 options added, and one of the
    default width asks the terminal's size each time (a syscall each, on `run`'s fast path): the
    launch parser's formatters are of a fixed width (it prints nothing)."""
    import shutil

    from patchkit.launch import serve_parser

    def asked(*_args: object, **_kwargs: object) -> os.terminal_size:
        raise AssertionError("the terminal's size was asked")

    monkeypatch.setattr(shutil, "get_terminal_size", asked)
    serve_parser._parser.cache_clear()
    try:
        parsed = serve_parser._parser("0.16.0", True).parse_known_args(["MODEL", "--port", "8123"])[0]
    finally:
        serve_parser._parser.cache_clear()
    assert vars(parsed)["port"] == 8123

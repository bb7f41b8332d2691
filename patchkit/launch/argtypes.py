"""What vLLM's launch parser holds an option's value to, transcribed from vllm/engine/arg_utils.py for
the kinds a recorded spec names (patchkit/_target/serve_spec.py's `value_type`): its type functions
(int, float, JSON, human-readable integers, a dict or a string, a config dataclass with its fields),
optional_type's "" and "None", and api_server's --lora-modules action. A value one refuses is
argparse's refusal (ArgumentTypeError, with the accepted values), exit 2 as vLLM exits.

A JSON value is checked and kept as text (the command's readers parse it); a number, a human-readable
integer and optional_type's None are what vLLM's function returns, so that `choices` compare alike.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from packaging.version import Version

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_AN_OBJECT = re.compile(r"(?s)^\s*{.*}\s*$")  # union_dict_and_str's test for JSON
_QUOTED = re.compile(r'("(?:[^"\\]|\\.)*")')
_BARE_NUMBER = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")
_TERA = Version("0.13.0")  # human_readable_int's t and T
_EXPANDS_JSON = Version("0.20.0")
_LORA_PATH_KEEPS_EQUALS = Version("0.30.0")  # LoRAParserAction's item.split("=", 1)


def converter(action: dict[str, Any], release: Version, *, all_kinds: bool = True) -> Callable[[str], Any]:
    """The type function of a recorded action in vLLM `release`: its kind, wrapped as optional_type
    wraps it (not `all_kinds`: only the int, float and JSON of its `type`, as a spec before
    value_type has it)."""
    if not all_kinds:
        return _KINDS.get(action.get("type") or "str", _text)
    kind = action.get("value_type") or action.get("type") or "str"
    convert = _KINDS.get(kind, _text)
    if kind == "dataclass":
        fields, expand = action.get("fields"), release >= _EXPANDS_JSON
        convert = lambda text: _config_object(_expanded(text) if expand else text, fields)  # noqa: E731
    elif kind.startswith("human_readable_int") and release < _TERA:
        auto = kind.endswith("_or_auto")
        convert = lambda text: _human_readable_int(text, auto=auto, suffixes="kKmMgG")  # noqa: E731
    if not action.get("optional"):
        return convert
    return lambda text: None if text in ("", "None") else convert(text)


def _text(text: str) -> str:
    return text


_SHOWN = 60  # a value quoted in a refusal: whole up to this, else cut with "…" (a typo may be at its end)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}…"


HINT = "\n"  # parts a refusal from its fix (argparse keeps only the text of a type's error)
_BEFORE, _AFTER = 40, 12  # the excerpt of bad JSON: mostly what json read before it stopped


def _near(text: str, pos: int) -> str:
    """The JSON around where json stopped (its column can be past a start-of-text excerpt)."""
    start, end = max(0, pos - _BEFORE), min(len(text), pos + _AFTER)
    excerpt = text[start:end]
    shown = excerpt if excerpt.isprintable() else repr(excerpt)[1:-1]
    return ("…" if start else "") + shown + ("…" if end < len(text) else "")


def _json_hint(text: str, exc: json.JSONDecodeError) -> str:
    """The fix of the shell mistakes that make bad JSON: single quotes, a trailing comma, double
    quotes the shell removed (the value not in single quotes)."""
    quoting = 'in the shell, put the whole JSON in single quotes: \'{"method": "eagle3", ...}\''
    before = text[: exc.pos].rstrip()
    if before.endswith(",") and text[exc.pos : exc.pos + 1] in "}]":
        return f"remove the comma before the {text[exc.pos]} at column {exc.colno} (JSON allows no trailing comma)"
    if text[exc.pos : exc.pos + 1] == "'":
        return f"JSON wants double quotes around its names and strings; {quoting}"
    if exc.msg.startswith("Expecting property name") or exc.msg.startswith("Expecting value"):
        return f"its double quotes may have been removed by the shell; {quoting}"
    return quoting


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number") from None


def _json(text: str) -> str:
    try:
        json.loads(text)
    except RecursionError:
        raise argparse.ArgumentTypeError("its JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:  # where json stopped: the typo is there, so the excerpt ends there
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc.msg} at column {exc.colno}): {_near(text, exc.pos)}{HINT}{_json_hint(text, exc)}"
        ) from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not valid JSON") from None
    return text


def _dict_or_text(text: str) -> str:
    """union_dict_and_str: a value shaped `{...}` must be JSON; anything else is text."""
    return _json(text) if _AN_OBJECT.match(text) else text


def _config_object(text: str, fields: Sequence[str] | None) -> str:
    """A config dataclass as pydantic validates its JSON: an object, with only its fields (when the
    spec names them: vLLM's config classes forbid others). Its fields' values are vLLM's to judge."""
    value = json.loads(_json(text))
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a JSON object")
    unknown = sorted(set(value) - set(fields)) if fields is not None else []
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown key {', '.join(map(repr, unknown[:3]))}; the keys are: {', '.join(fields or [])}"
        )
    return text


def _expanded(text: str) -> str:
    """From 0.20.0 a config object's JSON has its bare human-readable numbers (`80m`, outside any
    string) written out before pydantic reads it (_expand_json_human_readable_numbers)."""
    parts = _QUOTED.split(text)
    for index in range(0, len(parts), 2):  # even: outside strings
        parts[index] = _BARE_NUMBER.sub(lambda m: str(_human_readable_int(m.group())), parts[index])
    return "".join(parts)


def _human_readable_int(text: str, *, auto: bool = False, suffixes: str = "kKmMgGtT") -> int:
    """vLLM's human_readable_int: 1k = 1,000, 1K = 1,024, 25.6k; a decimal with K/M/G/T refused
    (`auto`: human_readable_int_or_auto, where -1 and auto mean "as the model says"; `suffixes`:
    those the release knows, no t/T before 0.13.0)."""
    value = text.strip()
    if auto and (value == "-1" or value.lower() == "auto"):
        return -1
    match = _HUMAN.fullmatch(value)
    if match and match.group(2) in suffixes:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return _decimal_multiple(text, float(number) * _DECIMAL[suffix])
        if "." in number:
            raise argparse.ArgumentTypeError(f"no decimals with {suffix}: did you mean {number}{suffix.lower()}?")
        return int(number) * _BINARY[suffix]
    try:
        return int(value)
    except ValueError:
        like = "4096, 32k = 32,000 or 32K = 32,768" + (", or auto" if auto else "")
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number (like {like})") from None


def _decimal_multiple(text: str, value: float) -> int:
    """vLLM's int(float(number) * multiplier): too large a number makes the float infinite, and vLLM
    stops with an OverflowError traceback; here that is the value refused."""
    try:
        return int(value)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is too large a number (vLLM cannot read it)") from None


_KINDS: dict[str, Callable[[str], Any]] = {
    "str": _text,
    "int": _whole,
    "float": _number,
    "json": _json,
    "dict_or_str": _dict_or_text,
    "human_readable_int": _human_readable_int,
    "human_readable_int_or_auto": lambda text: _human_readable_int(text, auto=True),
}


class LoraModules(argparse.Action):
    """api_server's LoRAParserAction in vLLM `release`: each item `name=path` (before 0.30.0 a second
    `=` fails it; from 0.30.0 the path keeps it), or JSON of LoRAModulePath's fields."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        fields: Sequence[str],
        needed: Sequence[str],
        release: Version,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.fields, self.needed = list(fields), list(needed)
        self.one_equals = release < _LORA_PATH_KEEPS_EQUALS

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        for item in values or []:
            if item in (None, ""):
                continue
            if "=" in item and "," not in item:
                if self.one_equals and item.count("=") != 1:
                    parser.error(f"--lora-modules {item[:40]!r}: give name=path (vLLM fails on a second '=')")
                continue
            self._module(parser, str(item))
        setattr(namespace, self.dest, list(values or []))

    def _module(self, parser: argparse.ArgumentParser, item: str) -> None:
        try:
            module = json.loads(item)
        except (ValueError, RecursionError):
            parser.error(f"Invalid JSON format for --lora-modules: {item[:40]}")
        keys = set(module) if isinstance(module, dict) else None
        if keys is None or not keys <= set(self.fields) or not set(self.needed) <= keys:
            parser.error(
                f"Invalid fields for --lora-modules: {item[:40]}: give a JSON object with "
                f"{', '.join(self.needed)} (and optionally {', '.join(sorted(set(self.fields) - set(self.needed)))})"
            )

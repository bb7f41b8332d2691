"""The spec of the installed vLLM's own launch parsers, for patchkit/launch/serve_parser.py: each
option of `vllm serve` and of the api_server module, with its option strings, nargs and kind, read
from the parser objects vLLM builds (vLLM imported; nothing parsed, nothing served).

Run in vLLM's interpreter: python serve_spec.py ANSWER.json < {}  (stdlib and vLLM only)
"""

from __future__ import annotations

import argparse
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


def describe(action: argparse.Action, parser: argparse.ArgumentParser) -> dict:
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
    described = {**described, "const": const, "type": _type(action.type)}
    negative = getattr(action, "negative_option_strings", None)  # 0.33.0's --enable-x/--disable-x pairs
    return {**described, "negative": sorted(negative)} if kind == "boolean_optional" and negative else described


def _option_strings(action: argparse.Action, parser: argparse.ArgumentParser) -> list[str]:
    """The strings the parser reads as this action: its own, then those it keeps out of the help
    (0.33.0's --no-enable-x), which take part in prefix matching all the same."""
    hidden = [s for s, a in parser._option_string_actions.items() if a is action and s not in action.option_strings]
    return [*action.option_strings, *hidden]


def _type(converter: object) -> str | None:
    """The value's type when it is one a reader can apply as vLLM does: int, float, JSON (else None)."""
    if converter is int or converter is float:
        return converter.__name__
    return "json" if converter is json.loads else None


def actions(parser: argparse.ArgumentParser) -> list[dict]:
    return [describe(a, parser) for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]


def parsers() -> dict:
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
    return _first("FlexibleArgumentParser", "vllm.utils.argparse_utils", "vllm.utils")


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


def work(request: dict) -> dict:
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

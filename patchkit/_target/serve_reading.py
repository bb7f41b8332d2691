"""What the installed vLLM's own parser reads from launch command lines: `vllm serve`'s (built as the
`vllm` CLI builds it) or the api_server's, each line parsed, nothing validated or served.

request: {"lines": [{"arguments": [...], "serve": bool}, ...]}
answer:  {"status": "ok", "readings": [{"refused": bool, "model", "speculative_config",
          "tensor_parallel_size", "trust_remote_code", "hf_overrides", "tokenizer"}, ...]} | {"status": "no-vllm", "error"}

Run in vLLM's interpreter: python serve_reading.py ANSWER.json < request.json  (stdlib and vLLM only)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
from typing import Any

FIELDS = (
    "model",
    "speculative_config",
    "tensor_parallel_size",
    "trust_remote_code",
    "hf_overrides",
    "tokenizer",
    "revision",
    "hf_config_path",
    "tokenizer_revision",
)


def readings(lines: list[dict[str, Any]]) -> dict[str, Any]:
    try:
        _force_cpu_platform_when_none()
        serve = importlib.import_module("vllm.entrypoints.cli.serve")
        make_arg_parser = _make_arg_parser()
        parser_class = _parser_class()
    except Exception as exc:
        return {"status": "no-vllm", "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok", "readings": [_read(serve, make_arg_parser, parser_class, line) for line in lines]}


def _make_arg_parser() -> Any:
    """The api_server's parser builder, wherever the release keeps it (0.30.0 moved it out of openai/)."""
    modules = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args")
    return _first("make_arg_parser", *modules, "vllm.entrypoints.common.cli_args")


def _read(
    serve: Any, make_arg_parser: Any, parser_class: type[argparse.ArgumentParser], line: dict[str, Any]
) -> dict[str, Any]:
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            if line["serve"]:
                top = parser_class()
                subparsers = top.add_subparsers(required=False, dest="subparser")
                [command] = [c for c in serve.cmd_init() if c.name == "serve"]
                command.subparser_init(subparsers)
                args = top.parse_args(["serve", *line["arguments"]])
                if getattr(args, "model_tag", None) is not None:
                    args.model = args.model_tag
            else:
                args = make_arg_parser(parser_class()).parse_args(line["arguments"])
    except (Exception, SystemExit) as exc:
        return {"refused": True, "error": f"{type(exc).__name__}: {exc} {said.getvalue()[-300:]}"}
    return {"refused": False, **{name: _plain(getattr(args, name, None)) for name in FIELDS}}


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


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
    return readings(request["lines"])


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

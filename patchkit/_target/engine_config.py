"""vLLM's own validation of a launch: EngineArgs from the command's arguments, then
create_engine_config(). No weights are loaded; nothing is downloaded (HF_HUB_OFFLINE).

request: {"args": [the arguments vLLM's engine parser reads], "env": {VAR: VALUE}}
answer:  {"status": "ok" | "invalid" | "no-vllm", "error": text}
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any


def work(request: dict) -> dict:
    os.environ.update(request.get("env") or {})
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        AsyncEngineArgs = importlib.import_module("vllm.engine.arg_utils").AsyncEngineArgs
    except Exception as exc:  # vLLM does not import here: the validation is skipped, not failed
        return {"status": "no-vllm", "error": f"{type(exc).__name__}: {exc}"}
    _force_cpu_platform_when_none()
    try:
        parser = AsyncEngineArgs.add_cli_args(_parser_class()())
        args, _unknown = parser.parse_known_args(request["args"])
        AsyncEngineArgs.from_cli_args(args).create_engine_config()
    except Exception as exc:
        return {"status": "invalid", "error": _error_text(exc)}
    except BaseException as exc:  # argparse exits on an argument it refuses: vLLM would refuse it too
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"status": "invalid", "error": f"vLLM's argument parser refused the command (status {exc})"}
    return {"status": "ok"}


def _parser_class():
    for module in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            found = getattr(importlib.import_module(module), "FlexibleArgumentParser", None)
        except ImportError:
            continue
        if found is not None:
            return found
    import argparse

    return argparse.ArgumentParser


def _force_cpu_platform_when_none() -> None:
    try:
        platforms: Any = importlib.import_module("vllm.platforms")
        if platforms.current_platform.is_unspecified():
            platforms._current_platform = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
    except Exception:  # an older layout: vLLM decides itself
        pass


def _error_text(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-2000:]


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


def _unshadow() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


if __name__ == "__main__":
    _unshadow()
    write_answer(sys.argv[1], work(json.load(sys.stdin)))

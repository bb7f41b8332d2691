"""Behaviour test of a vLLM streaming tool-call parser file: streamed calls must equal non-streamed ones.

Usage: python behaviour.py PARSER_FILE ... [--installed] [--vllm-version V] [--top-up NAME ...] [--random N]
                           [--quiet | --json]
       python behaviour.py --version-keys V ...

The driver is the same file in every set; the set's scenario.py beside it names the parser classes,
their markers and the model outputs. The parser file is loaded without vLLM (which needs torch):
every `vllm.*` import is served by the small stand-ins below; with --installed it is instead
imported as the module it is in this interpreter's vLLM, with vLLM's real classes (run by the
Python of an environment where vLLM imports). A fake tokenizer makes each marker one token; each
output is streamed at SPLITS tokens per delta, in two deltas cut in the middle of each text between
markers (uneven: the end of one call and the start of the next in one delta) and all at once (and
--random N seeded random splits), with the end-of-stream top-up of the chat server of the tree the file is in (read from its
serving file; without one, that of --vllm-version; without either, every top-up), and compared
with extract_tool_calls. Every split is judged.
A file whose source defines none of the scenario's parser classes is skipped (said); patchkit's
`verify` passes every Python file the set's series change, with --json: one JSON document on stdout
(ok, runs, failed, judged, skipped, failures: each with its parser, case, split and what was lost;
read: the other files the verdict depends on, the tree's serving code).
Exit 0: every streamed result matches; 1: some differ (each named with what was lost);
2: a file cannot be loaded, or none defines the scenario's parsers. --version-keys prints, as one
JSON object ({"version_keys": {V: key}}), what the test reads of each --vllm-version (its top-up):
patchkit's `verify` of releases judges releases with the same key and the same files once.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import random
import re
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

SPLITS = (1, 2, 3, 4, 6, 8, 16)
Call = tuple[Any, str, Any]  # id, name, arguments (an id or arguments of None: whatever extract_tool_calls says)


# --- stand-ins for what the parser files import from vllm ------------------------------------


class _Model:
    """A pydantic-like model: keyword fields with defaults, model_dump(exclude_none=...)."""

    _fields: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        for name, default in self._fields.items():
            value = kwargs.get(name, default() if callable(default) else default)
            setattr(self, name, value)

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        dump = {name: getattr(self, name) for name in self._fields}
        return {k: v for k, v in dump.items() if v is not None} if exclude_none else dump


class FunctionCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"name": None, "arguments": None}


class ToolCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {
        "id": lambda: f"chatcmpl-tool-{uuid.uuid4().hex}",
        "type": "function",
        "function": None,
    }


class ExtractedToolCallInformation(_Model):
    _fields: ClassVar[dict[str, Any]] = {"tools_called": False, "tool_calls": list, "content": None}


class DeltaFunctionCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"name": None, "arguments": None}


class DeltaToolCall(_Model):
    _fields: ClassVar[dict[str, Any]] = {"id": None, "type": None, "index": None, "function": None}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(self.function, dict):  # vLLM's pydantic model validates a dict into the class
            self.function = DeltaFunctionCall(**self.function)


class DeltaMessage(_Model):
    _fields: ClassVar[dict[str, Any]] = {
        "role": None,
        "content": None,
        "reasoning": None,
        "reasoning_content": None,
        "tool_calls": list,
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.tool_calls is None:
            self.tool_calls = []


class ToolParser:
    """vLLM's ToolParser base, as far as the streaming parsers use it."""

    def __init__(self, tokenizer: Any, tools: Any = None) -> None:
        self.prev_tool_call_arr: list[dict] = []
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.streamed_args_for_tool: list[str] = []
        self.model_tokenizer = tokenizer
        self.tools = tools or []

    @property
    def vocab(self) -> dict[str, int]:
        return self.model_tokenizer.get_vocab()

    def adjust_request(self, request: Any) -> Any:
        return request

    def get_remaining_unstreamed_args(self) -> str:
        """vLLM 0.23's: the arguments of the last call parsed but not yet streamed."""
        if not self.prev_tool_call_arr:
            return ""
        index = len(self.prev_tool_call_arr) - 1
        args = self.prev_tool_call_arr[index].get("arguments", {})
        expected = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        actual = self.streamed_args_for_tool[index] if index < len(self.streamed_args_for_tool) else ""
        return expected[len(actual) :] if expected.startswith(actual) else ""


class ToolParserManager:
    @classmethod
    def register_module(cls, *args: Any, **kwargs: Any) -> Callable[[type], type]:
        return lambda module: module


class _Placeholder:
    """Type-only names (requests, tokenizers, tools): the parsers never build them."""


class ChatCompletionRequest(_Placeholder):
    """A request with no tool schemas (the parsers then keep parameter values as written)."""

    tools = None
    tool_choice = "auto"
    skip_special_tokens = True


# Names the parser engine's modules import for tool choices "required" and named, structured outputs,
# strict tools and reasoning: the harness's requests (tool_choice "auto", no tools) never use them.
ENGINE_UNUSED = (
    "ChatCompletionMessageParam",
    "ChatCompletionNamedToolChoiceParam",
    "FunctionDefinition",
    "ReasoningParser",
    "ResponseInputOutputItem",
    "SamplingParams",
    "StructuredOutputsParams",
    "check_json_nesting",
    "extract_named_tool_call_streaming",
    "extract_required_tool_call_streaming",
    "resolve_tool_strictness",
    "get_structural_tag_tools",
    "limit_to_single_tool_call",
    "RequiredToolCallScanner",
    "rfind_tokens",
)


def _never(name: str) -> Callable[..., Any]:
    """A function the harness's requests never reach (a named or required tool choice): said if reached."""

    def never(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"behaviour.py has no stand-in for {name} (its requests use tool_choice auto)")

    return never


def partial_tag_overlap(text: str, tag: str) -> int:
    """vllm/tool_parsers/utils.py's: the longest end of `text` that begins `tag`."""
    return next((size for size in range(min(len(text), len(tag) - 1), 0, -1) if text.endswith(tag[:size])), 0)


# vllm/tool_parsers/utils.py's schema helpers, for a request without tools (the harness sends none):
# no tool's properties, so every parameter's types are ["string"] and its value stays as written
NO_TOOLS_SCHEMA_HELPERS: dict[str, Any] = {
    "find_tool_properties": lambda tools, tool_name: {},
    "find_tool_name": lambda tools, tool_name: False,
    "extract_types_from_schema": lambda schema: ["string"],
    "coerce_to_schema_type": lambda value, schema_type: value,
}

STAND_INS: dict[str, Any] = {
    **NO_TOOLS_SCHEMA_HELPERS,
    "FunctionCall": FunctionCall,
    "ToolCall": ToolCall,
    "ExtractedToolCallInformation": ExtractedToolCallInformation,
    "DeltaFunctionCall": DeltaFunctionCall,
    "DeltaToolCall": DeltaToolCall,
    "DeltaMessage": DeltaMessage,
    "ToolParser": ToolParser,
    "ToolParserManager": ToolParserManager,
    "init_logger": logging.getLogger,
    "make_tool_call_id": lambda *args, **kwargs: f"chatcmpl-tool-{uuid.uuid4().hex}",
    "random_uuid": lambda: uuid.uuid4().hex,
    "partial_tag_overlap": partial_tag_overlap,
    "ChatCompletionRequest": ChatCompletionRequest,
    **{name: type(name, (_Placeholder,), {}) for name in ("ResponsesRequest", "Tool", "TokenizerLike", "AnyTokenizer")},
    # what vLLM's parser engine (0.25 on, loaded from the tree: see _VllmStandIns) imports besides it:
    # ids of the default type, no metrics, and types of named and required tool choices, structured
    # outputs and reasoning, which a request with tool_choice "auto" and no tools never builds
    "get_tool_call_id_type": lambda *args, **kwargs: "random",
    "record_tool_parser_invocation": lambda *args, **kwargs: None,
    **{name: type(name, (_Placeholder,), {}) if name[0].isupper() else _never(name) for name in ENGINE_UNUSED},
    "VLLMValidationError": type("VLLMValidationError", (ValueError,), {}),  # vllm.exceptions' (0.31 on)
}
# Packages besides vLLM that the parser engine imports (named tool choices, structured outputs):
# served by placeholders where this interpreter lacks them, as the harness's requests never use them.
FOREIGN = ("openai", "pydantic", "xgrammar")
# vllm/parser/ modules not loaded from the tree: Prometheus counters, and the module that imports
# every model's parser engine (its adapters are built for the one asked: registered_adapter)
NOT_FROM_THE_TREE = ("vllm.parser.metrics", "vllm.parser.engine.registered_adapters")
FROM_THE_TREE = ("vllm.tool_parsers.tool_strict_level",)  # besides vllm/parser/: an enum its Parser reads


class NoStandIn(ImportError):
    """A name of vllm.* the stand-ins do not serve (an ImportError, as `from M import name` says)."""


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name in STAND_INS:
            return STAND_INS[name]
        if name.startswith("__"):  # a module attribute asked with a default (getattr(m, "__file__", None))
            raise AttributeError(name)
        if self.__name__.split(".")[0] in FOREIGN:
            return type(name, (Exception if name.endswith("Error") else _Placeholder,), {})
        if self.__name__ == "vllm.parser.engine.registered_adapters":
            return registered_adapter(name)
        raise NoStandIn(f"behaviour.py has no stand-in for {self.__name__}.{name}{_not_in_the_tree(self.__name__)}")


def _not_in_the_tree(module: str) -> str:
    """Why a module of vLLM's parser engine is a stand-in: its file is not in the tree (a fetch
    brings what the set's behaviour_reads names; a new release may import one it does not name)."""
    if not module.startswith("vllm.parser.") or module in NOT_FROM_THE_TREE or not _VllmStandIns.tree.joinpath(
        "vllm/parser/engine"
    ).is_dir():
        return ""
    return f" (the tree has no {module.replace('.', '/')}.py beside vllm/parser/engine/: behaviour_reads in set.toml)"


def registered_adapter(name: str) -> type:
    """vllm/parser/engine/registered_adapters.py's `name` (`(A, B) = make_adapters(CParser)`), built
    from the tree's modules it names: that file imports every model's parser engine."""
    path = _VllmStandIns.tree / "vllm/parser/engine/registered_adapters.py"
    missing = f"behaviour.py has no stand-in for vllm.parser.engine.registered_adapters.{name}"
    if not path.is_file():
        raise ImportError(f"{missing} (the tree has no vllm/parser/engine/ beside the file)")
    try:
        return _made_adapter(name, ast.parse(path.read_bytes(), str(path)))
    except NoStandIn:  # it names what is missing (an engine module the tree lacks) itself
        raise
    except Exception as e:  # an ImportError, as `from ... import name` reports it (not a module of that name)
        raise ImportError(f"{missing} ({type(e).__name__}: {e})") from e


def _made_adapter(name: str, source: ast.Module) -> type:
    imported = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in source.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    for node in source.body:
        targets = node.targets[0] if isinstance(node, ast.Assign) else None
        names = [t.id for t in targets.elts if isinstance(t, ast.Name)] if isinstance(targets, ast.Tuple) else []
        call = node.value if isinstance(node, ast.Assign) else None
        if name in names and isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.args:
            argument = call.args[0]
            if isinstance(argument, ast.Name) and call.func.id in imported and argument.id in imported:
                make, engine = (imported[call.func.id], imported[argument.id])
                made = getattr(importlib.import_module(make[0]), make[1])(
                    getattr(importlib.import_module(engine[0]), engine[1])
                )
                return made[names.index(name)]
    raise NoStandIn(f"behaviour.py has no stand-in for vllm.parser.engine.registered_adapters.{name}")


class _VllmStandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every `vllm` and `vllm.*` module (as a package, so any depth imports) with STAND_INS, but
    vllm/parser/'s modules (vLLM's parser engine, 0.25 on: plain Python), which are the tree's own
    files where it has them (the package vllm.parser itself imports every model's parser: not it)."""

    tree = Path()  # the directory holding the judged file's vllm/
    foreign: tuple[str, ...] = ()  # FOREIGN packages this interpreter lacks

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if (fullname.startswith("vllm.parser.") and fullname not in NOT_FROM_THE_TREE) or fullname in FROM_THE_TREE:
            base = self.tree.joinpath(*fullname.split("."))
            if (base / "__init__.py").is_file():
                return importlib.util.spec_from_file_location(
                    fullname, base / "__init__.py", submodule_search_locations=[str(base)]
                )
            if base.with_suffix(".py").is_file():
                return importlib.util.spec_from_file_location(fullname, base.with_suffix(".py"))
        if fullname == "vllm" or fullname.startswith("vllm.") or fullname.split(".")[0] in self.foreign:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def load_module(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_package(path: Path) -> tuple[Path, Path] | None:
    """(the vllm/ package directory `path` is in, `path` as seen from it): by the path as given, where a
    vllm/ moved to another volume under another name (`vllm -> /data/vllm-pkg`) is still `vllm`, else
    with symlinks resolved; None: in no vllm package."""
    for seen in (Path.cwd() / path, path.resolve()):
        package = next((parent for parent in seen.parents if parent.name == "vllm"), None)
        if package is not None:
            return package, seen
    return None


def load_parser_module(path: Path) -> types.ModuleType:
    """Execute the parser file with vllm.* served by stand-ins (and the `regex` package by `re`)."""
    sys.dont_write_bytecode = True  # the file's tree is not the harness's to write into
    if not any(isinstance(finder, _VllmStandIns) for finder in sys.meta_path):
        _VllmStandIns.foreign = tuple(name for name in FOREIGN if importlib.util.find_spec(name) is None)
        sys.meta_path.insert(0, _VllmStandIns())
    package = in_package(path)
    _VllmStandIns.tree = package[0].parent if package else Path()
    if importlib.util.find_spec("regex") is None:
        sys.modules["regex"] = re  # the parsers' patterns are plain `re` patterns
    return load_module(path, f"behaviour_parser_{path.stem}")


def load_installed_module(path: Path) -> types.ModuleType:
    """The parser file imported as the module it is in this interpreter's vLLM: vLLM's real classes."""
    resolved, package = path.resolve(), in_package(path)
    if package is None:
        raise ImportError(f"{path} is not in a vllm package")
    name = ".".join(package[1].relative_to(package[0].parent).with_suffix("").parts)
    module = importlib.import_module(name)
    if Path(module.__file__ or "").resolve() != resolved:
        raise ImportError(f"this interpreter imports {name} from {module.__file__}, not from {path}")
    return module


def load_scenario(path: Path = Path(__file__).with_name("scenario.py")) -> types.ModuleType:
    """The set's scenario: STOP, MARKERS, CASES ({label: output}) and PARSERS ({class name: render}),
    where render(output) gives the model's text and what extract_tool_calls must read from it."""
    return load_module(path, f"behaviour_scenario_{path.parent.name}")


# --- a tokenizer whose markers are single tokens -------------------------------------------------


class FakeTokenizer:
    """Each marker (and the stop token) is one token; other text is cut into short word-like tokens."""

    def __init__(self, markers: tuple[str, ...], stop: str) -> None:
        self.vocab: dict[str, int] = {}
        self.markers, self.stop = (*markers, stop), stop
        for marker in self.markers:
            self.token_id(marker)
        self._split = re.compile("(" + "|".join(map(re.escape, self.markers)) + ")")

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    # What vLLM's parser engine (0.25 on) asks of a tokenizer besides the vocabulary: each id's text,
    # and the special tokens (the markers and the stop token, as a model's tokenizer has them).
    @property
    def all_special_tokens(self) -> list[str]:
        return list(self.markers)

    @property
    def all_special_ids(self) -> list[int]:
        return [self.vocab[marker] for marker in self.markers]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        pieces = {token: piece for piece, token in self.vocab.items()}
        return "".join(pieces[i] for i in ids if not (skip_special_tokens and pieces[i] in self.markers))

    def token_id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab) + 1000)

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """(id, text) per token of `text` and the stop token, which vLLM does not detokenize."""
        tokens = []
        for part in self._split.split(text + self.stop):
            pieces = [part] if part in self.markers else re.findall(r" ?\w{1,4}|\s|[^\w\s]", part)
            tokens += [(self.token_id(p), "" if p == self.stop else p) for p in pieces]
        return tokens


# --- the chat server's end-of-stream top-up ------------------------------------------------------


@dataclass(frozen=True)
class TopUp:
    """Up to 0.22 the server rewrites the final delta when its first entry carries arguments: one entry
    for the last call, with the recorded arguments (json.dumps-ed, or a str as is from 0.17) less those
    streamed, keeping that call's id and name from 0.14. From 0.23 it appends the unstreamed rest."""

    keeps_strings: bool = False
    keeps_ids: bool = False
    appends: bool = False

    def __str__(self) -> str:
        return next((name for name, top_up in TOP_UPS.items() if top_up == self), "bare, str as is")

    def apply(self, parser: Any, delta: DeltaMessage | None) -> DeltaMessage | None:
        if self.appends:
            if delta and delta.tool_calls and delta.tool_calls[-1].function:
                last = delta.tool_calls[-1].function
                rest = getattr(type(parser), "get_remaining_unstreamed_args", ToolParser.get_remaining_unstreamed_args)
                last.arguments = (last.arguments or "") + rest(parser)
            return flushed(parser, delta)
        first = delta.tool_calls[0] if delta and delta.tool_calls else None
        if first is None or first.function is None or first.function.arguments is None:
            return delta
        index = len(parser.prev_tool_call_arr) - 1 if parser.prev_tool_call_arr else 0
        args = parser.prev_tool_call_arr[index].get("arguments", {})
        expected = args if self.keeps_strings and isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        actual = parser.streamed_args_for_tool[index]
        if first.function.arguments:
            actual = actual[: -len(first.function.arguments)]
        original = next((c for c in delta.tool_calls if c.index == index), None) if self.keeps_ids else None
        name = original.function.name if original and original.function else None
        function = DeltaFunctionCall(name=name, arguments=expected.replace(actual, "", 1))
        return DeltaMessage(
            tool_calls=[
                DeltaToolCall(
                    index=index,
                    id=original.id if original else None,
                    type=original.type if original else None,
                    function=function,
                )
            ]
        )


def flushed(parser: Any, delta: DeltaMessage | None) -> DeltaMessage | None:
    """Then the server flushes a parser on vLLM's parser engine (0.25 on: _flush_engine_parsers):
    what finish_streaming gives joins the last delta."""
    if not getattr(parser, "engine_based_streaming", False):
        return delta
    flush = parser.finish_streaming()
    if flush is None or delta is None:
        return flush if delta is None else delta
    if flush.content:
        delta.content = (delta.content or "") + flush.content
    if flush.tool_calls:
        delta.tool_calls = (delta.tool_calls or []) + flush.tool_calls
    return delta


TOP_UPS = {
    "bare": TopUp(),  # 0.11-0.13
    "dumps": TopUp(keeps_ids=True),  # 0.14-0.16
    "replace": TopUp(keeps_strings=True, keeps_ids=True),  # 0.17-0.22
    "append": TopUp(appends=True),  # 0.23 on
}
SERVING_FILES = ("entrypoints/openai/chat_completion/serving.py", "entrypoints/openai/serving_chat.py")
APPENDING_FILE = "parser/abstract_parser.py"  # 0.23 on: DelegatingParser._append_unstreamed_tool_args


def top_up_of_version(version: str) -> TopUp:
    """The top-up of vLLM `version`'s chat server (e.g. 0.16.0, 0.33.1.dev12+gabc)."""
    line = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    since = {(0, 11): "bare", (0, 14): "dumps", (0, 17): "replace", (0, 23): "append"}
    return TOP_UPS[since[max((s for s in since if s <= line), default=(0, 11))]]


def top_up_of_tree(parser_file: Path) -> tuple[TopUp, Path] | None:
    """The top-up the serving code of the tree `parser_file` is in runs, and the file it was read from."""
    package = in_package(parser_file)
    root = package[0] if package else None
    serving = next((root / rel for rel in SERVING_FILES if (root / rel).is_file()), None) if root else None
    if root is None or serving is None:
        return None
    nodes = list(ast.walk(ast.parse(serving.read_text(encoding="utf-8"), str(serving))))
    if any(isinstance(node, ast.Name) and node.id == "expected_call" for node in nodes):
        keeps_ids = any(isinstance(n, ast.FunctionDef) and n.name == "_create_remaining_args_delta" for n in nodes)
        return TopUp(keeps_strings=any(map(_keeps_str_arguments, nodes)), keeps_ids=keeps_ids), serving
    appending = root / APPENDING_FILE
    if appending.is_file() and "def _append_unstreamed_tool_args(" in appending.read_text(encoding="utf-8"):
        return TOP_UPS["append"], appending
    return None


def _keeps_str_arguments(node: ast.AST) -> bool:
    """`if isinstance(X, str): expected_call = X`, or `expected_call = X if isinstance(X, str) else ...`."""

    def str_check(test: ast.AST) -> str | None:
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance":
            checked, kind = test.args if len(test.args) == 2 else (None, None)
            if isinstance(checked, ast.Name) and isinstance(kind, ast.Name) and kind.id == "str":
                return checked.id
        return None

    def assigns_expected(statement: ast.AST, name: str) -> bool:
        return (
            isinstance(statement, ast.Assign)
            and [getattr(t, "id", None) for t in statement.targets] == ["expected_call"]
            and isinstance(statement.value, ast.Name)
            and statement.value.id == name
        )

    if isinstance(node, ast.If) and (name := str_check(node.test)):
        return any(assigns_expected(statement, name) for statement in node.body)
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
        name = str_check(node.value.test)
        return name is not None and assigns_expected(ast.Assign(targets=node.targets, value=node.value.body), name)
    return False


# --- streaming as vLLM's chat server does --------------------------------------------------------


@dataclass
class Streamed:
    content: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, delta: DeltaMessage | None) -> None:
        if delta is None:
            return
        self.content += delta.content or ""
        for call in delta.tool_calls or []:
            seen = self.calls.setdefault(call.index, {"ids": [], "name": None, "arguments": ""})
            if call.id is not None:
                seen["ids"].append(call.id)
            if call.function is not None and call.function.name:
                if seen["name"] is not None:
                    self.problems.append(f"call {call.index}: name sent twice")
                seen["name"] = call.function.name
            if call.function is not None:
                seen["arguments"] += call.function.arguments or ""


def chunks(tokens: list[tuple[int, str]], sizes: list[int]) -> Iterator[list[tuple[int, str]]]:
    start = 0
    for size in sizes:
        yield tokens[start : start + size]
        start += size


def fixed_split(count: int, size: int) -> list[int]:
    return [min(size, count - start) for start in range(0, count, size)]


def cuts_between_markers(tokens: list[tuple[int, str]], tokenizer: FakeTokenizer) -> list[list[int]]:
    """Two deltas cut in the middle of each text between markers (of 2 tokens or more): one delta then
    ends inside a call and the next holds its end and what follows (the next call, the end markers),
    which even splits may never give (vLLM 0.20-0.22's Kimi parser loses a call's tail only so)."""
    markers = {tokenizer.vocab[marker] for marker in tokenizer.markers}
    cuts, start = [], 0
    for index, (token_id, _) in enumerate(tokens):  # the last token is the stop token: a marker
        if token_id in markers:
            if index - start >= 2:
                cuts.append(start + (index - start) // 2)
            start = index + 1
    return [[cut, len(tokens) - cut] for cut in cuts]


def splits_of(tokens: list[tuple[int, str]], tokenizer: FakeTokenizer, randoms: int, rng: random.Random) -> list:
    """(delta sizes, name) of every split of one output: SPLITS, the cuts between markers, `randoms`
    random ones, all at once (an uneven or random split is named by its sizes: name "")."""
    total = len(tokens)
    splits = [(fixed_split(total, size), f"{size} token(s) per delta") for size in SPLITS]
    splits += [(sizes, "") for sizes in cuts_between_markers(tokens, tokenizer)]
    splits += [(random_split(total, rng), "") for _ in range(randoms)]
    return [*splits, ([total], "all at once")]


def random_split(count: int, rng: random.Random) -> list[int]:
    """Delta sizes cut at up to 12 random places, as the runs speculative decoding accepts vary."""
    cuts = sorted(rng.sample(range(1, count), rng.randint(0, min(12, count - 1))))
    return [b - a for a, b in zip([0, *cuts], [*cuts, count], strict=True)]


def stream(parser_class: type, tokenizer: FakeTokenizer, text: str, sizes: list[int], top_up: TopUp) -> Streamed:
    parser = parser_class(tokenizer)
    request = ChatCompletionRequest()
    result = Streamed()
    previous_text, previous_ids = "", []
    pieces = list(chunks(tokenizer.tokenize(text), sizes))
    for number, piece in enumerate(pieces, 1):
        delta_ids = [token_id for token_id, _ in piece]
        delta_text = "".join(text for _, text in piece)
        current_text, current_ids = previous_text + delta_text, previous_ids + delta_ids
        delta = parser.extract_tool_calls_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids, request
        )
        result.add(top_up.apply(parser, delta) if number == len(pieces) else delta)
        previous_text, previous_ids = current_text, current_ids
    return result


# --- comparing -----------------------------------------------------------------------------------


def expected_result(parser_class: type, tokenizer: FakeTokenizer, text: str) -> tuple[str, list[Call]]:
    info = parser_class(tokenizer).extract_tool_calls(text, ChatCompletionRequest())
    return info.content or "", [(c.id, c.function.name, c.function.arguments) for c in info.tool_calls]


def matches(got: tuple[str, list[Call]], intended: tuple[str, list[Call]]) -> bool:
    """extract_tool_calls read what the model wrote (an intended id or arguments of None: any)."""
    (content, calls), (want_content, want_calls) = got, intended
    return (
        content == want_content
        and len(calls) == len(want_calls)
        and all(w is None or g == w for call, want in zip(calls, want_calls) for g, w in zip(call, want, strict=True))
    )


def differences(streamed: Streamed, content: str, calls: list[Call], stable_ids: list[bool]) -> list[str]:
    found = list(streamed.problems)
    if streamed.content != content:
        found.append(f"content {streamed.content!r}, expected {content!r}")
    for index, ((ident, name, arguments), stable_id) in enumerate(zip(calls, stable_ids, strict=True)):
        seen = streamed.calls.get(index)
        if seen is None:
            found.append(f"call {index} ({name}) lost")
            continue
        if seen["name"] != name:
            found.append(f"call {index} ({name}) name {seen['name']!r}")
        if seen["arguments"] != arguments:
            found.append(f"call {index} ({name}) arguments {seen['arguments']!r}, expected {arguments!r}")
        if len(seen["ids"]) != 1 or (stable_id and seen["ids"] != [ident]):
            found.append(f"call {index} ({name}) ids {seen['ids']}, expected {[ident] if stable_id else 'one'}")
    found += [f"extra call {index}: {streamed.calls[index]}" for index in sorted(streamed.calls) if index >= len(calls)]
    return found


@dataclass
class Tally:
    failed: int = 0
    runs: int = 0


EVERY_SPLIT = "every split"


@dataclass(frozen=True)
class Failure:
    """One streamed run that differs: which parser, output, split and top-up, and what was lost."""

    parser: str
    case: str
    split: str
    top_up: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        if self.split == EVERY_SPLIT:  # extract_tool_calls misreads the output: no split was streamed
            return f"FAIL {self.parser} [{self.case}] {'; '.join(self.problems)}"
        return f"FAIL {self.parser} [{self.case}] {self.split}, top-up {self.top_up}: {'; '.join(self.problems)}"

    def tokens_per_delta(self) -> int:
        """The smallest splits first (random ones and all at once after them)."""
        count = self.split.split(" ", 1)[0]
        return int(count) if count.isdigit() else sys.maxsize

    def to_json(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in ("parser", "case", "split", "top_up")}, "lost": short(self.problems)}


def short(problems: tuple[str, ...]) -> str:
    """What was lost, in a few words (the long form quotes the texts): for a one-line report."""
    words = []
    for problem in problems:
        found = re.match(r"(call \d+ \([^)]*\)) (arguments|ids|name) ", problem)
        if found:
            words.append(f"{found[1]} {found[2]} differ")
        elif problem.startswith("content "):
            words.append("content differs")
        elif problem.startswith("raised "):
            words.append(problem.split(":", 1)[0])
        else:
            words.append(problem if len(problem) <= 60 else problem[:59] + "\u2026")
    return "; ".join(words)


def check_class(
    parser_class: type, render: Callable, scenario: Any, top_ups: list[TopUp], random_splits: int, say: Callable
) -> Tally:
    """Stream every output at every split under every top-up; say each run that differs and how."""
    rng = random.Random(0)  # the same random splits on every run
    tokenizer = FakeTokenizer(scenario.MARKERS, scenario.STOP)
    tally = Tally()
    for label, output in scenario.CASES.items():
        text, intended = render(output)
        splits = splits_of(tokenizer.tokenize(text), tokenizer, random_splits, rng)
        tally.runs += len(splits) * len(top_ups)
        content, calls = expected_result(parser_class, tokenizer, text)
        if not matches((content, calls), intended):
            problem = f"extract_tool_calls reads {content!r} {calls!r}"
            say(Failure(parser_class.__name__, label, EVERY_SPLIT, "any", (problem,)))
            tally.failed += len(splits) * len(top_ups)  # no split can be judged against it
            continue
        stable_ids = [ident is not None for ident, _, _ in intended[1]]
        for top_up in top_ups:
            for sizes, split in splits:
                try:
                    streamed = stream(parser_class, tokenizer, text, sizes, top_up)
                    problems = differences(streamed, content, calls, stable_ids)
                except Exception as e:  # the parser's or the top-up's: that split fails, the others still run
                    problems = [f"raised {type(e).__name__}: {e}"]
                if problems:
                    tally.failed += 1
                    where = split or f"deltas of {sizes} tokens"
                    say(Failure(parser_class.__name__, label, where, str(top_up), tuple(problems)))
    return tally


def defines_a_parser(path: Path, names: Any) -> bool:
    """Whether the file's source defines one of the scenario's classes (one that cannot be read is
    loaded, and its loading says what is wrong)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return True
    return any(isinstance(node, ast.ClassDef) and node.name in names for node in ast.walk(tree))


def chosen_top_ups(parser_file: Path, options: argparse.Namespace) -> tuple[list[TopUp], str]:
    """--top-up; else the tree's serving code; else --vllm-version's; else every one."""
    if options.top_up:
        return [TOP_UPS[name] for name in options.top_up], "as asked"
    from_tree = top_up_of_tree(parser_file)
    if from_tree:
        options.read.add(str(from_tree[1]))  # a file besides the judged ones the verdict depends on
        return [from_tree[0]], f"read from {from_tree[1]}"
    if options.vllm_version:
        return [top_up_of_version(options.vllm_version)], f"vLLM {options.vllm_version}'s"
    return list(TOP_UPS.values()), "no serving file or version: every one"


@dataclass
class Report:
    """What every judged file gave: the text lines, or (--json) one document."""

    judged: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    error: str | None = None
    read: set[str] = field(default_factory=set)  # the other files read (the tree's serving code)

    def document(self, loaded: str) -> dict[str, Any]:
        runs = sum(j["runs"] for j in self.judged.values())
        failed = sum(j["failed"] for j in self.judged.values())
        return {
            "ok": self.error is None and not failed,
            "error": self.error,
            "loaded": loaded,
            "runs": runs,
            "failed": failed,
            "judged": self.judged,
            "skipped": self.skipped,
            "failures": [f.to_json() for f in sorted(self.failures, key=Failure.tokens_per_delta)[:20]],
            "read": sorted(self.read),
        }


def judge_file(parser_file: Path, scenario: Any, options: argparse.Namespace, report: Report, say: Callable) -> None:
    """Every split of every output on the file's parser classes; a file that defines none is skipped."""
    if not defines_a_parser(parser_file, scenario.PARSERS):
        report.skipped.append(str(parser_file))
        say(f"skipped {parser_file}: it defines none of {', '.join(scenario.PARSERS)}")
        return
    load = load_installed_module if options.installed else load_parser_module
    module = load(parser_file)
    top_ups, source = chosen_top_ups(parser_file, options)
    classes = [(getattr(module, name), render) for name, render in scenario.PARSERS.items() if hasattr(module, name)]
    if not classes:
        raise ImportError(f"{parser_file} defines none of {', '.join(scenario.PARSERS)} once loaded")

    def keep(failure: Failure) -> None:
        report.failures.append(failure)
        say(str(failure))

    tallies = [check_class(cls, render, scenario, top_ups, options.random, keep) for cls, render in classes]
    failed, runs = sum(t.failed for t in tallies), sum(t.runs for t in tallies)
    names = ", ".join(cls.__name__ for cls, _ in classes)
    top_up_names = ", ".join(map(str, top_ups))
    report.judged[str(parser_file)] = {
        "parsers": [cls.__name__ for cls, _ in classes],
        "runs": runs,
        "failed": failed,
        "top_up": top_up_names,
        "top_up_source": source,
    }
    say(
        f"{'FAIL' if failed else 'PASS'} {names}: {failed} of {runs} streamed runs differ (top-up {top_up_names}: {source})",
        summary=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("parser_files", type=Path, nargs="*", metavar="parser_file")
    args.add_argument("--installed", action="store_true", help="import the file from this interpreter's vLLM")
    args.add_argument("--top-up", action="append", choices=list(TOP_UPS), help="judge under this top-up only")
    args.add_argument("--vllm-version", help="the top-up of that release, when the tree has no serving file")
    args.add_argument("--random", type=int, default=0, metavar="N", help="also N seeded random splits per output")
    shown = args.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="only the summary lines")
    shown.add_argument("--json", action="store_true", help="one JSON document on stdout, nothing else")
    args.add_argument("--version-keys", nargs="+", metavar="V", help="print the top-up of each release and exit")
    options = args.parse_args(argv)
    if options.version_keys:
        print(json.dumps({"version_keys": {v: str(top_up_of_version(v)) for v in options.version_keys}}))
        return 0
    if not options.parser_files:
        args.error("give a parser file")
    logging.disable(logging.CRITICAL)  # the parsers log (and log.exception) freely

    def say(line: str, summary: bool = False) -> None:
        if not options.json and (summary or not options.quiet):
            print(line)

    report = Report()
    options.read = report.read
    stdout = sys.stdout
    if options.json:  # what the loaded modules print goes to stderr: stdout is the document's
        sys.stdout = sys.stderr
    try:
        for parser_file in options.parser_files:
            judge_file(parser_file, load_scenario(), options, report, say)
    except Exception as e:  # a file that does not load is the report, not a traceback
        report.error = f"cannot load {parser_file}: {type(e).__name__}: {e}"
    finally:
        sys.stdout = stdout
    if not report.judged and report.error is None:
        names = ", ".join(load_scenario().PARSERS)
        report.error = f"{', '.join(map(str, options.parser_files))} define(s) none of {names}"
    if options.json:
        print(json.dumps(report.document("installed" if options.installed else "stand-ins")))
    elif report.error:
        print(f"error: {report.error}")
    if report.error:
        return 2
    return 1 if any(j["failed"] for j in report.judged.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

"""The one reader of what a launch names: its files (the YAML `--config`, a model's config.json, a hub
cache's refs/main, the tree's files) and its JSON values (`--speculative-config`, `--hf-overrides`,
a dotted value). Each file is read bounded and without blocking (fsutil.read_regular); each value
is refused (BadInput) when deeper than MAX_DEPTH, larger than MAX_NODES once YAML aliases are
expanded, or holding an integer Python will not convert: never a hang, a crash or exit 70.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from patchkit.base.errors import BadInput
from patchkit.base.fsutil import NotRegularFile
from patchkit.launch import observed

if TYPE_CHECKING:  # pragma: no cover
    from yaml.events import Event

_Value = TypeVar("_Value")  # a JSON or YAML value, returned as it was given
MAX_DEPTH = 64  # far beyond any vLLM config (they nest 3 or 4 deep), far below the interpreter's stack
MAX_NODES = 100_000  # values in one document, aliases expanded (a YAML alias bomb expands to 10^8)
CONFIG_FILE_LIMIT = 1 << 20  # a `--config` YAML: options, a few KB
REF_LIMIT = 4096  # a hub cache's refs/main: a commit hash
TIMESTAMP_TAG, STR_TAG = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:str"
NO_FILE_NAME = "no file name can hold it (a NUL or a lone surrogate)"


def read_named_file(path: Path | str, limit: int, what: str) -> bytes:
    """A regular file a launch names (symlinks followed, as vLLM follows them), at most `limit`
    bytes: FileNotFoundError when absent; BadInput for a fifo, a device, a directory or a larger file."""
    try:
        return observed.read_regular(path, limit, follow_symlinks=True)  # a drafter's index: kept findings read it
    except FileNotFoundError:
        raise
    except NotRegularFile as exc:
        if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG):  # a file on the way, a name too long: no such file
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None
        if exc.errno == errno.EFBIG:  # vLLM reads any size: the limit is patchkit's bound on what it reads
            raise BadInput(
                f"{what} {path}: {exc.strerror}, patchkit's limit (not vLLM's)",
                hint="run's --no-preflight launches it without these checks",
            ) from None
        raise BadInput(
            f"{what} {path}: {exc.strerror}",
            hint=f"put the file itself there (vLLM reads {path} as a file too), then run the same command again",
        ) from None
    except OSError as exc:
        raise BadInput(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError:  # a NUL, a lone surrogate: os.open refuses the name itself
        raise BadInput(f"{what} {str(path)!a}: {NO_FILE_NAME}") from None


def file_name(text: str, what: str) -> str:
    """`text`, a name the launch turns into a path, when a file name can hold it: no NUL, and
    encodable as os.fsencode encodes it; else BadInput (vLLM never finds such a file either)."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise BadInput(f"{what} {text!a}: {NO_FILE_NAME}") from None
    if "\0" in text:
        raise BadInput(f"{what} {text!a}: {NO_FILE_NAME}")
    return text


def read_head(path: Path | str, size: int) -> bytes:
    """The first `size` bytes of a regular file (b"" for anything else: absent, a fifo, a device)."""
    try:
        return observed.read_regular(path, size, follow_symlinks=True, head=True)
    except (OSError, ValueError):  # ValueError: a name no file can have (a NUL)
        return b""


def load_json(text: str | bytes, what: str, *, strict: bool = True) -> Any:
    """JSON within the limits; not JSON: BadInput, or (not `strict`) the text itself, as vLLM keeps
    a dotted value that is not JSON."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if not strict:
            return text
        raise BadInput(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:  # nested past the stack; an integer of > 4300 digits
        raise BadInput(f"{what} cannot be read: {_why(exc)}") from None
    return within_limits(value, what)


def load_yaml_config(path: str) -> dict[str, Any]:
    """A `--config` YAML file: a mapping, within the limits (its aliases counted expanded, before
    anything is built from them), read as vLLM reads it: PyYAML's pure-Python yaml.safe_load, which
    refuses what libyaml takes (a tab after `key:`) and takes what it refuses (`%YAML 1.3`)."""
    # lazy: PyYAML loads only for a launch that names a --config file
    import yaml

    where = f"--config {path}"
    try:
        raw = read_named_file(path, CONFIG_FILE_LIMIT, "--config")
    except FileNotFoundError as exc:
        raise BadInput(f"{where}: cannot read it: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
        _check_bounds(yaml, text, where)
        data = _safe_load(yaml, text)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInput(f"{where}: not valid YAML (vLLM's yaml.safe_load refuses it): {exc}") from None
    except (RecursionError, ValueError) as exc:
        raise BadInput(f"{where} cannot be read: {_why(exc)}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{where}: expected a mapping of option names to values (vLLM fails on anything else)")
    return within_limits(data, where)


def _safe_load(yaml: ModuleType, text: str) -> Any:
    """vLLM's yaml.safe_load as its CLI runs it: a timestamp (`2024-01-01`) read as the text written,
    for lm-format-enforcer (a vLLM requirement, imported with `vllm serve`'s parser) makes SafeLoader
    construct timestamps as strings at its import (jsonschemaobjectutil.py)."""
    loader = yaml.SafeLoader(text)
    constructors = loader.yaml_constructors
    loader.yaml_constructors = {**constructors, TIMESTAMP_TAG: constructors[STR_TAG]}  # this loader's alone
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def within_limits(value: _Value, what: str) -> _Value:
    """`value` when no deeper than MAX_DEPTH, of at most MAX_NODES values, and its text encodable
    (a JSON `\\ud800` is no file name, no environment value, no output); else BadInput."""
    stack: list[tuple[object, int]] = [(value, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH or count > MAX_NODES:
            raise BadInput(f"{what} cannot be read: {_too_big(depth > MAX_DEPTH)}")
        if isinstance(item, str):
            _check_encodable(item, what)
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str):
                    _check_encodable(key, what)
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return value


def _check_encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8", "surrogateescape")  # as os.fsencode encodes a path
    except UnicodeEncodeError as exc:
        bad = ascii(text[exc.start : exc.end])
        raise BadInput(f"{what} holds a lone surrogate {bad}: no file name or text can hold it") from None


def _check_bounds(yaml: ModuleType, text: str, what: str) -> None:
    """The document's depth and size counted on libyaml's events (fast, no recursion); where libyaml
    refuses the text, on the pure parser's, which vLLM's loader then reads (its events come one at a
    time, from no recursion either)."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            _check_events(yaml, yaml.parse(text, Loader=fast), what)
            return
        except yaml.YAMLError as exc:
            # libyaml stops at 1000 levels, far past ours: the pure parser need not scan it (~0.4 s)
            if "maximum nesting depth" in str(getattr(exc, "problem", "")):
                raise BadInput(f"{what} cannot be read: {_too_big(True)}") from None
    _check_events(yaml, yaml.parse(text, Loader=yaml.SafeLoader), what)


def _check_events(yaml: ModuleType, events: Iterable[Event], what: str) -> None:
    """The document's depth and its size with every alias expanded, counted from the parser's
    events (of `yaml`, PyYAML loaded by the caller) as they come (an anchor's size is known once its
    node ends): nothing is built."""
    sizes: dict[str, int] = {}
    open_nodes: list[list[Any]] = [[0, None]]  # [values so far (int), anchor (str | None)] of each node not ended yet
    for event in events:
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_nodes.append([1, event.anchor])
            if len(open_nodes) > MAX_DEPTH + 1:
                raise BadInput(f"{what} cannot be read: {_too_big(True)}")
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            size, anchor = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            size, anchor = 1, event.anchor
        elif isinstance(event, yaml.AliasEvent):
            size, anchor = sizes.get(event.anchor or "", 1), None
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        open_nodes[-1][0] += size
        if open_nodes[-1][0] > MAX_NODES:
            raise BadInput(f"{what} cannot be read: {_too_big(False)}")


def _too_big(deep: bool) -> str:
    return f"nested deeper than {MAX_DEPTH} levels" if deep else f"more than {MAX_NODES} values (YAML aliases expanded)"


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return f"nested deeper than {MAX_DEPTH} levels"
    return str(exc).split(";")[0]


def closest(word: str, words: list[str], cutoff: float) -> str | None:
    """The one of `words` that `word` most looks like (a typo of it), or None."""
    import difflib  # lazy: a misspelt option or parser only; `run`'s fast path loads this module

    close = difflib.get_close_matches(word, words, n=1, cutoff=cutoff)
    return close[0] if close else None

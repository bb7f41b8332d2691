"""A JSON file or value a VLLM_* variable gives, read as vLLM reads it: logger.py reads the file
VLLM_LOGGING_CONFIG_PATH names as `import vllm` runs, envs.py's maybe_convert_json_str_or_file the
one a VLLM_HUMMING_*_QUANT_CONFIG names right after the model's load. Each is read here once, bounded
(BOUND + 1 bytes tell a larger one), and never opened where it is no regular file: vLLM reads it to
its end, so a fifo blocks the launch and a device fills its memory. A value is quoted cut (SHOWN)."""

from __future__ import annotations

import json

from patchkit.base.errors import escaped, quoted
from patchkit.base.values import FrozenValue, frozen
from patchkit.launch import observed

BOUND = 1 << 20
SHOWN = 80  # characters of a variable's value a finding quotes: a typo is seen, a long value is cut
DIRECTORY = "is a directory: vLLM's open of it raises"
SPECIAL = "is no regular file: vLLM reads it to its end (a fifo blocks it, a device fills memory)"
OVER = "is over 1 MiB: not read here"
NOT_JSON = object()  # what json.loads raises on, as vLLM's own json.loads of it raises


@frozen
class NamedFile(FrozenValue):
    """The file a variable names: its bytes (`data`, at most BOUND), or why vLLM's read of it raises
    or never ends (`refused`), or why it is not read here (`unread`: cannot judge)."""

    data: bytes = b""
    refused: str | None = None
    unread: str | None = None


def read_named(path: str) -> NamedFile | None:
    """The file at `path` (relative: the launch's directory joined already), read once; None where
    there is none (vLLM's os.path.exists says False: it then reads the value as JSON, or raises)."""
    try:
        if not observed.exists(path):
            return None
        refused = refused_kind(path)
        if refused:
            return NamedFile(refused=refused)
        data = observed.read_regular(path, BOUND + 1, follow_symlinks=True, head=True)
    except (OSError, ValueError) as exc:  # not searchable, or replaced since: vLLM's own open says
        return NamedFile(unread=f"is not read here ({getattr(exc, 'strerror', None) or type(exc).__name__})")
    return NamedFile(unread=OVER) if len(data) > BOUND else NamedFile(data=data)


def refused_kind(path: str) -> str | None:
    """DIRECTORY or SPECIAL where vLLM's open and read of the existing `path` raises or never ends
    (None: a regular file), told from its stat alone; OSError as os.stat raises it."""
    if observed.isdir(path):
        return DIRECTORY
    return None if observed.regular(path) else SPECIAL


def loaded(text: str) -> object:
    """json.loads(text), NOT_JSON where it raises: a JSONDecodeError; a plain ValueError (a number
    past Python's 4300-digit limit for int()); a RecursionError (nested past Python's limit)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return NOT_JSON


def file_json(data: bytes, encoding: str) -> object:
    """json.load of a file of `data` opened as text in `encoding` (strictly, as open() decodes: a BOM
    is kept, and json.loads refuses it): NOT_JSON where it raises; LookupError for a codec this
    Python does not know."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return NOT_JSON
    return loaded(text)


def shown_setting(name: str, value: str) -> str:
    """NAME='value' as a finding quotes it: escaped, its head alone past SHOWN characters."""
    text = escaped(value)
    return f"{name}={text!r}" if len(text) <= SHOWN else f"{name}={text[:SHOWN]!r}... ({len(value):,} characters)"


def shown_path(path: str) -> str:
    """A path a variable gives, as a finding quotes it (a path that is not there may be of any length)."""
    return quoted(escaped(path))

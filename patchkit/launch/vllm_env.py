"""vLLM's integer flags as its envs.py reads them: bool(int(value)) (VLLM_MLA_DISABLE,
VLLM_USE_V2_MODEL_RUNNER in every release 0.11-0.34; maybe_convert_bool is the same with None for
unset). Python's int() takes what a "set and not 0" test misreads: "00", "+0", " 0 ", "0_0", any
Unicode zero digit; and it raises on "true", "yes", "", which stops vLLM as it starts."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from patchkit.base.errors import escaped
from patchkit.launch.findings import Finding

CHECK = "vllm-environment"
ENVS = "vllm/envs.py"
MLA_DISABLE = "VLLM_MLA_DISABLE"
V2_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
INT_FLAGS = (MLA_DISABLE, V2_RUNNER)


def int_flag(environ: Mapping[str, str], name: str, default: str | None = "0") -> bool | None:
    """bool(int(value)) of the launch's `name`, `default` where unset (None: unset, vLLM decides);
    raises ValueError where vLLM's int() does."""
    value = environ.get(name, default)
    return None if value is None else bool(int(value))


def refused_flags(environ: Mapping[str, str], read: Callable[[str], bytes | None]) -> list[Finding]:
    """A failing finding for each integer flag the launch sets to what int() refuses, where the tree's
    envs.py reads it with int() (vLLM raises as it reads the variable, at start)."""
    envs = read(ENVS) or b""
    found = []
    for name in INT_FLAGS:
        value = environ.get(name)
        if value is None or not _read_by_int(envs, name):
            continue
        try:
            int(value)
        except ValueError:
            why = f"{name}={escaped(value)!r} is not an integer: vLLM's envs.py reads it with int(), which raises"
            found.append(Finding(CHECK, False, why, f"give {name}=1 or {name}=0, or unset it"))
    return found


def _read_by_int(envs: bytes, name: str) -> bool:
    """Whether the tree's envs.py entry for `name` converts it with int() (directly or through
    maybe_convert_bool, which is bool(int(value)))."""
    key = b'"' + name.encode() + b'":'
    start = envs.find(key)
    if start < 0:
        return False
    entry = envs[start + len(key) : start + len(key) + 300]
    following = re.search(rb'\n\s*"[A-Z0-9_]+":', entry)
    entry = entry[: following.start()] if following else entry
    return re.search(rb"\bint\(|maybe_convert_bool\(", entry) is not None

"""Where this interpreter's vllm package is, and which version its metadata names, without importing it:
find_spec on a top-level name and importlib.metadata read only the finders and the dist-info files."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import stat
import sys
from typing import Any  # loaded already: importlib.metadata imports typing


def work(request: dict[str, Any]) -> dict[str, Any]:
    package = request.get("package", "vllm")
    out: dict[str, Any] = {"python": sys.executable, "python_version": list(sys.version_info[:3])}
    try:
        spec = importlib.util.find_spec(package)
    except Exception as exc:  # a broken finder or package: reported, not raised
        spec = None
        out["error"] = repr(exc)
    if spec is not None and spec.submodule_search_locations:
        out["package_dir"] = next(iter(spec.submodule_search_locations))
        # False: found by a finder (an editable install's), its directory not on sys.path
        out["dir_on_path"] = _on_path(os.path.dirname(out["package_dir"]))
    # what start-up left (a .pth line or sitecustomize may set it), and whether it is more than the
    # interpreter's options and environment give: then the launch has it whatever they say
    out["pycache_prefix"] = sys.pycache_prefix
    configured = sys._xoptions.get("pycache_prefix")
    if configured is None and not sys.flags.ignore_environment:
        configured = os.environ.get("PYTHONPYCACHEPREFIX") or None
    out["prefix_set_at_startup"] = sys.pycache_prefix != (configured if isinstance(configured, str) else None)
    try:
        dist = importlib.metadata.distribution(package)
        unreadable = _not_regular(dist)
        if unreadable:  # importlib.metadata would open it and wait: patchkit's own reading says what it is
            out["metadata_error"] = unreadable
        else:
            out.update(_version(dist))
        out["dist_root"] = str(dist.locate_file(""))
    except importlib.metadata.PackageNotFoundError:
        pass
    return out


def _version(dist: importlib.metadata.Distribution) -> dict[str, str]:
    """The version importlib.metadata reads; where it raises (a METADATA not UTF-8, unreadable), no
    version: patchkit reads the dist-info itself then, and says what is wrong with it."""
    try:
        return {"version": dist.version}
    except (ValueError, OSError) as exc:  # UnicodeDecodeError is a ValueError
        return {"metadata_error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def _not_regular(dist: importlib.metadata.Distribution) -> str | None:
    """The dist-info file `dist.version` reads (METADATA, an egg-info's PKG-INFO) when it is there but
    not a regular file (a fifo, a device): reading it may never end. Never opened here but without
    blocking; None: a regular file, none, or a distribution not on a path."""
    base = getattr(dist, "_path", None)
    for name in ("METADATA", "PKG-INFO"):
        path = os.path.join(str(base), name) if base is not None else None
        if path is None or not os.path.lexists(path):
            continue
        try:
            return None if stat.S_ISREG(os.stat(path).st_mode) else f"{path} is not a regular file"
        except OSError:
            return None
    return None


def _on_path(directory: str) -> bool:
    """Whether `directory` is an entry of sys.path (where a module beside vllm/ is found too)."""
    wanted = os.path.realpath(directory)
    return any(os.path.realpath(entry or os.curdir) == wanted for entry in sys.path)


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
    asked = json.load(sys.stdin)
    if isinstance(asked.get("first_path"), str):  # the launch's own sys.path[0], as Python puts it there
        sys.path.insert(0, asked["first_path"])
    write_answer(sys.argv[1], work(asked))

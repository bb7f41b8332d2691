"""Where this interpreter's vllm package is, and which version its metadata names, without importing it:
find_spec on a top-level name and importlib.metadata read only the finders and the dist-info files.

importlib.metadata's import is most of this worker's time (the email package, zipfile, pathlib: ~45 ms of
~60, on every --python command), so where its answer is known to be a plain lookup (CPython 3.10-3.13,
whose lookup and METADATA reading are the same code, the stock path finder alone answering, plain
directories) the same lookup is done here with os alone; anything else is importlib.metadata's to answer."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import stat
import sys

# typing.TYPE_CHECKING without typing's import (~4.5 ms of each run: every --python command); mypy reads it as True
TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.metadata
    from typing import Any


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
    found = _plain_distribution(package)
    out.update(_metadata_answer(package) if found is None else found)
    return out


def _metadata_answer(package: str) -> dict[str, Any]:
    """The version and root of `package`'s distribution as importlib.metadata finds them ({}: none)."""
    # lazy: importlib.metadata (~45 ms: the email package) loads only where the plain lookup is not sure
    import importlib.metadata

    out: dict[str, Any] = {}
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


def _plain_distribution(package: str) -> dict[str, Any] | None:
    """_metadata_answer's answer, found as importlib.metadata.distribution finds it (the first dist-info or
    egg-info directory of that normalized name, sys.path in order, each directory in listdir's order) where
    nothing but that lookup can answer: None where another could, or where what it finds is not plain (a
    zip or .egg on sys.path, an unreadable directory, a METADATA not a plain UTF-8 file with one Version)."""
    return _plain_lookup(package, sys.path) if _stock_lookup() and package else None


def _plain_lookup(package: str, paths: list[str]) -> dict[str, Any] | None:
    """_plain_distribution on the sys.path `paths`, the lookup being the stock one."""
    wanted = _normalize(package)
    for root in paths:
        if not isinstance(root, str) or os.path.basename(root).lower().endswith(".egg"):
            return None
        try:
            children = os.listdir(root or ".")
        except FileNotFoundError:  # nothing there, for importlib.metadata too
            continue
        except OSError:  # a zip file, an unreadable directory: importlib.metadata's to read
            return None
        for child in children:
            low = child.lower()
            name = low.rpartition(".")[0].partition("-")[0]
            if low.endswith((".dist-info", ".egg-info")) and _normalize(name) == wanted:
                # pathlib's str() of root/child is that string where root is absolute and normal
                plain = root.startswith("/") and not root.startswith("//") and os.path.normpath(root) == root
                version = _plain_version(os.path.join(root, child)) if plain else None
                return None if version is None else {"version": version, "dist_root": root}
    return {}


def _stock_lookup() -> bool:
    """Whether importlib.metadata.distribution here is the lookup _plain_distribution does: CPython 3.10-3.13
    on POSIX, importlib.metadata not imported by start-up (which may have changed it), and of the finders on
    sys.meta_path only the standard path finder declaring find_distributions."""
    if sys.implementation.name != "cpython" or os.name != "posix" or "importlib.metadata" in sys.modules:
        return False
    if not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return False
    try:
        for finder in sys.meta_path:
            declared = getattr(finder, "find_distributions", None)
            stock = getattr(declared, "__qualname__", None) == "PathFinder.find_distributions"
            if declared is not None and not (finder is importlib.machinery.PathFinder and stock):
                return False
    except Exception:  # a finder that raises on the question: importlib.metadata's to meet
        return False
    return True


def _normalize(name: str) -> str:
    """importlib.metadata's Prepared.normalize (each run of - _ . one -, lower case, - as _), without re."""
    chars: list[str] = []
    for char in name:
        if char not in "-_." or not chars or chars[-1] != "-":
            chars.append("-" if char in "-_." else char)
    return "".join(chars).lower().replace("-", "_")


def _plain_version(info: str) -> str | None:
    """The Version importlib.metadata reads from the METADATA of the dist-info directory `info` (its email
    parser, compat32), where that file is a regular UTF-8 file whose headers are plain: None elsewhere."""
    path = os.path.join(info, "METADATA")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, encoding="utf-8") as f:  # as pathlib's read_text: universal newlines, every end "\n"
            text = f.read()
    except (OSError, ValueError):
        return None
    return _first_header(text, "version") if text else None


def _first_header(text: str, wanted: str) -> str | None:
    """The value email.message_from_string(text)[wanted] gives (compat32) for `text` with "\\n" line ends only,
    where that header is there on one line: None where not sure (none, folded, after a "From " line)."""
    lines = text.split("\n")
    for number, line in enumerate(lines):  # the header block: up to its first line that is no header
        if line.startswith("From "):
            return None
        if line[:1] in (" ", "\t"):
            continue  # a continuation of a header before it (not the wanted one: returned by then)
        colon = line.find(":")
        if colon < 0 or any(not "!" <= c <= "~" for c in line[:colon]):
            return None  # the blank line (or the body's first): no such header
        if colon > 0 and line[:colon].lower() == wanted:
            folded = number + 1 < len(lines) and lines[number + 1][:1] in (" ", "\t")
            return None if folded else line[colon + 1 :].lstrip(" \t")
    return None


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

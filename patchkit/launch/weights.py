"""The weight files vLLM's DefaultModelLoader would load for a model given as a local directory (or,
in an offline launch, a hub id's cached snapshot), found as vLLM 0.16.0's _prepare_weights finds them:
the patterns its load format globs in turn, the safetensors index that filters them, the files it
leaves out. A directory with none fails the launch only once the load begins (a drafter: after the
target's whole load), so preflight judges it first. Of each weight file only the head is read: a
safetensors file's length prefix and JSON header, as safetensors' reader checks them before any tensor
(a Git LFS pointer, a cut-short download), a torch file's first bytes. Online, a hub id's weights are
vLLM's to download: not judged."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import stat
from pathlib import Path

from patchkit.base.errors import BadInput, TargetError, escaped, few
from patchkit.base.fsutil import read_regular
from patchkit.launch import observed
from patchkit.launch.command import LaunchCommand
from patchkit.launch.drafter_load import OwnFormat
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.models import (
    WALK_LIMIT,
    ModelConfig,
    fetched_by,
    hf_download,
    hf_hub_cache,
    offline,
    offline_model_path,
    offline_snapshot,
    redirected,
)
from patchkit.launch.values import read_named_file

# DefaultModelLoader's load formats, each with the patterns it globs in turn (the first that matches
# wins); vLLM adds *.pt for most model classes (fall_back_to_pt): a few turn it off, and taking it
# always is never a refusal where vLLM loads
PATTERNS = {
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors", "*.pt"),
    "fastsafetensors": ("*.safetensors", "*.pt"),
    "mistral": ("consolidated*.safetensors", "*.pt"),
    "pt": ("*.pt",),
    "npcache": ("*.bin", "*.pt"),
}
NO_WEIGHTS = "dummy"  # vLLM's DummyModelLoader: random values, no file read
SHARDED = "sharded_state"
SHARDED_PATTERN = "model-rank-{rank}-part-{part}.safetensors"  # vLLM's ShardedStateLoader.DEFAULT_PATTERN
_SAFETENSORS = ("safetensors", "fastsafetensors", "mistral")  # filtered by the index whatever matched
_INDEX = "model.safetensors.index.json"
_MISTRAL_INDEX = "consolidated.safetensors.index.json"
_NP_NAMES = os.path.join("np", "weight_names.json")  # np_cache_weights_iterator's dump, once made
_NOT_WEIGHTS = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
INDEX_LIMIT = 64 << 20  # a shard index: a weight name per tensor, a few MB for the largest models
MAX_HEADER = 100_000_000  # the longest header safetensors' reader takes (MAX_HEADER_SIZE, "header too large")
HEADER_READ = 16 << 20  # patchkit's bound on a header it parses: a longer one has only its length judged
# patchkit's bound on the header bytes it parses of one model's files (real ones: < 20 MB in all);
# past it, the rest have only their lengths judged: 1,000 shards of 16 MB headers are not an hour
HEADER_BUDGET = 256 << 20
LFS = "a Git LFS pointer (cloned without git-lfs?)"
_LFS_HEAD = b"version https://git-lfs"


def weights_problem(directory: str, load_format: str, *, local: bool = True) -> str | None:
    """Why vLLM finds no weights to load in `directory` (a model's directory as vLLM names it, or a
    cached snapshot), or why its index makes the load fail; None when it finds some, or when the
    load format is not DefaultModelLoader's. `local`: vLLM names the directory itself (its `auto`
    then looks for Mistral's consolidated*.safetensors at any depth; not in a snapshot it finds offline)."""
    why = weights_verdict(directory, load_format, local=local)
    return None if isinstance(why, Judged | Unjudged) else why


def weights_verdict(directory: str, load_format: str, *, local: bool = True) -> str | None:
    """weights_problem's answer, with a Judged for weights judged and found loadable (None: not judged)."""
    if load_format == "auto":
        mistral = _consolidated(directory) if local else False
        if mistral is None:
            return _too_large_verdict(directory)
        load_format = "mistral" if mistral else "hf"
    patterns = PATTERNS.get(load_format)
    if patterns is None:
        return None
    found: list[str] = []
    use_safetensors, globs = load_format in _SAFETENSORS, _Globs(directory)
    for pattern in patterns:
        found = globs[pattern]
        if found:
            use_safetensors = use_safetensors or pattern == "*.safetensors"
            break
    if use_safetensors:
        index = os.path.join(directory, _MISTRAL_INDEX if load_format == "mistral" else _INDEX)
        named = _index_files(index, directory) if os.path.isfile(index) else None
        if isinstance(named, str):
            return named
        if named is not None:
            present, indexed = set(found), set(named.values())  # sets: a hostile index names millions
            absent = sorted(name for name, path in named.items() if path not in present)
            if absent:
                more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
                return f"{os.path.basename(index)} names {escaped(absent[0])}{more}, not there"
            found = [path for path in found if path in indexed]
    else:
        kept = [path for path in found if not path.endswith(_NOT_WEIGHTS)]
        if found and not kept:  # a training file vLLM stops its glob at, then filters out
            later = [p for p in patterns[patterns.index(pattern) + 1 :] if globs[p]]
            if later:
                return _hidden(found, pattern, later)
        found = kept
    dangling = [path for path in found if not os.path.exists(path)]
    if dangling:
        return f"{escaped(os.path.basename(dangling[0]))} is a link to nothing (its file is gone)"
    if not found:
        other = [os.path.basename(path) for pattern in PATTERNS["hf"] for path in globs[pattern]]
        if load_format != "hf" and other:  # an explicit --load-format that leaves out the files there
            return _other_format(load_format, patterns, other)
        return f"no weight file vLLM loads ({', '.join(patterns)})"
    if load_format == "npcache" and os.path.exists(os.path.join(directory, _NP_NAMES)):
        return None  # its iterator reads the numpy dump, never the .bin files again
    padded = load_format == "fastsafetensors"  # its own reader takes bytes past the tensors (alignment)
    budget = HeaderBudget()
    bad = [why for path in sorted(found) if (why := file_problem(path, use_safetensors, padded=padded, budget=budget))]
    if not bad:
        return Judged(budget.said())
    return Damaged(bad[0] + (f" (and {len(bad) - 1} more weight files)" if len(bad) > 1 else ""))


def _too_large_verdict(directory: str) -> str:
    """A tree too large to walk hides whether vLLM's auto takes Mistral's format (a consolidated*.safetensors
    at any depth) or Hugging Face's: hf's problem when neither loads (vLLM fails either way), else Unjudged."""
    hf = weights_verdict(directory, "hf")
    if hf is not None and not isinstance(hf, Judged) and not isinstance(weights_verdict(directory, "mistral"), Judged):
        return hf
    return Unjudged(
        f"more than {WALK_LIMIT:,} files under it: patchkit cannot tell which format vLLM's auto loads "
        "(Mistral's if a consolidated*.safetensors is at any depth)"
    )


def _hidden(found: list[str], pattern: str, later: list[str]) -> Hidden:
    names = few(sorted(os.path.basename(path) for path in found), sep=", ")
    hidden = Hidden(
        f"vLLM stops at {pattern} ({names}: before {', '.join(later)}, where the weights are) and leaves "
        "that out as a training file, so it finds no weights"
    )
    hidden.files = names
    return hidden


class Hidden(str):
    """No weights found: training files (`files`) match the pattern vLLM's glob stops at, before the weights'."""

    files = ""


class NotSharded(str):
    """No pre-sharded checkpoint files, the only ones vLLM's sharded_state loader reads."""


class OtherFormat(str):
    """No weight file of the launch's --load-format, but files of another (`files`) vLLM's auto loads."""

    files = ""


def _other_format(load_format: str, patterns: tuple[str, ...], names: list[str]) -> OtherFormat:
    shown = few(sorted(escaped(name) for name in names), sep=", ")
    said = OtherFormat(
        f"no weight file --load-format {load_format} loads ({', '.join(patterns)}); it holds {shown}, which it leaves out"
    )
    said.files = shown
    return said


class _Globs(dict[str, list[str]]):
    """vLLM's globs in one directory (joined unescaped, hidden files left out), each pattern's made once:
    a failure's other-format question asks again patterns the format's own globs asked."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory

    def __missing__(self, pattern: str) -> list[str]:
        self[pattern] = found = glob.glob(os.path.join(self.directory, pattern))
        return found


def _sharded_files(command: LaunchCommand) -> tuple[str, int]:
    """(the file pattern, the tensor-parallel size) of vLLM's ShardedStateLoader: each -tp rank reads
    its own model-rank-R-part-*.safetensors (--model-loader-extra-config's "pattern" when given)."""
    extra = command.options.get("model-loader-extra-config")
    try:
        given = json.loads(extra) if isinstance(extra, str) else None
    except ValueError:
        given = None
    pattern = given.get("pattern") if isinstance(given, dict) else None
    return (pattern if isinstance(pattern, str) else SHARDED_PATTERN), command.tensor_parallel_size


def _sharded_verdict(directory: str, pattern: str, ranks: int) -> str | None:
    """Why vLLM's sharded_state loader finds no files for some rank in `directory`; None: each has some."""
    for rank in range(max(ranks, 1)):
        try:
            wanted = pattern.format(rank=rank, part="*")
        except (KeyError, IndexError, ValueError):
            return None  # vLLM's own format() raises first, at the loader's start: not judged here
        if not glob.glob(os.path.join(directory, wanted)):
            return NotSharded(f"no pre-sharded checkpoint files {escaped(wanted)} (the only files sharded_state loads)")
    return None


class Damaged(str):
    """A weights problem that is a weight file there vLLM's reader refuses (its fix fetches it again)."""


class Unjudged(str):
    """Weights not judged, and why: preflight says so ("cannot judge"), never a silent pass."""


class Judged(str):
    """Weights judged and found loadable ("" when whole; else what was judged of them only in part)."""


class HeaderBudget:
    """The header bytes left to parse of one model's weight files, and how many were judged by
    their lengths alone once none were left."""

    def __init__(self) -> None:
        self.left, self.skipped, self.files = HEADER_BUDGET, 0, 0

    def takes(self, length: int) -> bool:
        """Whether a header of `length` bytes is parsed (counted), or judged by its length alone."""
        self.files += 1
        if length > self.left:
            self.skipped += 1
            return False
        self.left -= length
        return True

    def said(self, *, adapters: bool = False) -> str:
        """What was judged only in part (`adapters`: of one adapter, once the launch's are past it)."""
        if adapters:
            return (
                f" (its header by its length alone: patchkit parses up to {HEADER_BUDGET >> 20} MB of adapter headers)"
            )
        if not self.skipped:
            return ""
        return (
            f"the headers of {self.skipped:,} of its {self.files:,} safetensors files were judged by their length "
            f"alone (patchkit parses up to {HEADER_BUDGET >> 20} MB of headers a model)"
        )


def file_problem(
    path: str,
    safetensors: bool,
    *,
    padded: bool = False,
    budget: HeaderBudget | None = None,
    names: list[list[str]] | None = None,
) -> str | None:
    """Why vLLM's reader of `path` refuses it before reading any tensor: safetensors' (`safetensors`:
    its length prefix, JSON header and the data length the header declares, which the file holds
    exactly or, `padded` (fastsafetensors), at least) or torch.load's (only what is certain: a
    regular file, not empty, not a Git LFS pointer's text); None when not. `budget`: the header bytes
    still to parse of the model's files (None: no bound but the file's own); `names`: given, the
    header's tensor names are appended to it as a list once it is parsed."""
    name = escaped(os.path.basename(path))  # a file's name in a message: a newline would split its line
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return f"{name} is a directory, not a file"
        if not stat.S_ISREG(info.st_mode):  # never opened: a fifo's reader would wait
            return f"{name} is not a regular file (a fifo or a device)"
        head = read_regular(path, len(_LFS_HEAD), follow_symlinks=True, head=True)  # never waits on a fifo
        if head.startswith(_LFS_HEAD):
            return f"{name} is {LFS}"
        if not head:
            return f"{name} is empty"
        if not safetensors:
            return None
        if len(head) < 8:
            return f"{name} holds {len(head)} bytes, too few for a safetensors file's header"
        length = int.from_bytes(head[:8], "little")
        return _safetensors_problem(path, name, length, info.st_size, padded, (budget, names))
    except OSError as exc:  # a fifo, a device, no permission: vLLM's open fails too
        return f"cannot read {name} ({exc.strerror or exc})"
    except ValueError:  # a name no file can have: vLLM's glob never gives one
        return None


def _safetensors_problem(
    path: str,
    name: str,
    length: int,
    size: int,
    padded: bool,
    read: tuple[HeaderBudget | None, list[list[str]] | None],
) -> str | None:
    """safetensors' read_metadata on `path` (`length`: the header length its first 8 bytes say;
    `read`: file_problem's budget and names)."""
    budget, names = read
    if length > MAX_HEADER:
        return f"{name} is no safetensors file (its header length {length} is over safetensors' {MAX_HEADER})"
    if 8 + length > size:
        return f"{name} is cut short (its header needs {8 + length} bytes, the file holds {size})"
    if length > HEADER_READ or (budget is not None and not budget.takes(length)):
        return None
    raw = read_regular(path, 8 + length, follow_symlinks=True, head=True)[8:]
    lone: list[str] = []  # the strings holding a lone surrogate escape ("\\ud800"), which serde refuses
    try:  # as serde_json reads it: no NaN or Infinity, -0 a float, a field given twice kept in sight
        header = json.loads(
            raw.decode("utf-8"),
            parse_constant=_no_constant,
            parse_int=_int,
            object_pairs_hook=lambda pairs: _Object.of(pairs, lone),
        )
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        header = None
    if not isinstance(header, dict):
        return f"{name} is no safetensors file (its header is no JSON object in UTF-8)"
    if names is not None:
        names.append([str(key) for key in header if key != "__metadata__"])
    if lone and not padded:
        said = f"`{_shown(lone[0])}` holds a lone surrogate escape (a \\uD800-\\uDFFF not in a pair)"
        return f"{name}: safetensors refuses its header: invalid JSON in header: {said}"
    if padded:  # fastsafetensors' own reader: only the data length judged, where the header gives it
        ends = [_end(info) for key, info in header.items() if key != "__metadata__"]
        if None in ends:
            return None
        declared = max((end for end in ends if end is not None), default=0)
    else:
        found = header_refusal(header)
        if isinstance(found, str):
            return f"{name}: safetensors refuses its header: {found}"
        if found is None:
            return None
        declared = found
    data = size - 8 - length
    if declared > data:
        return f"{name} is cut short (its header declares {declared} bytes of tensors, the file holds {data})"
    if declared < data and not padded:
        return f"{name} holds {data - declared} bytes more than its header declares (safetensors refuses it)"
    return None


# safetensors' (0.8.0) dtypes, each with its size in bits
_DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64}
_DTYPE_BITS |= {t: 8 for t in ("U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")}
_DTYPE_BITS |= {t: 16 for t in ("I16", "U16", "F16", "BF16")} | {t: 32 for t in ("I32", "U32", "F32")}
_DTYPE_BITS |= {t: 64 for t in ("F64", "I64", "U64")}
_FIELDS = ("dtype", "shape", "data_offsets")
_USIZE = 1 << 64  # serde reads a larger integer as a float: no usize


class _Object(dict[str, object]):
    """A JSON object, with the keys it gives more than once (serde refuses a struct's field twice)."""

    doubled: frozenset[str] = frozenset()

    @classmethod
    def of(cls, pairs: list[tuple[str, object]], lone: list[str]) -> _Object:
        """The object of `pairs`; each string in it (a key, a value, one in a list) holding a lone
        surrogate added to `lone` (Python's json takes one, serde_json refuses it)."""
        if not lone:
            lone += [text for text in _strings(pairs) if not text.isascii() and _SURROGATE.search(text)][:1]
        made = cls(pairs)
        if len(made) < len(pairs):
            made.doubled = frozenset(k for k in made if sum(key == k for key, _ in pairs) > 1)
        return made


_SURROGATE = re.compile("[\ud800-\udfff]")  # only an escape gives one: the header is UTF-8


def _strings(pairs: list[tuple[str, object]]) -> list[str]:
    """The keys and string values of an object's pairs, and the strings in its lists (the objects
    in them are each checked as they are read)."""
    found, lists = [], []
    for key, value in pairs:
        found.append(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            lists.append(value)
    while lists:
        for item in lists.pop():
            if isinstance(item, str):
                found.append(item)
            elif isinstance(item, list):
                lists.append(item)
    return found


def _no_constant(text: str) -> object:
    raise ValueError(f"{text} is no JSON")


def _int(text: str) -> object:
    return -0.0 if text == "-0" else int(text)


def _size(value: object) -> bool:
    """Whether serde reads `value` as a usize."""
    return type(value) is int and 0 <= value < _USIZE


def _shown(key: str) -> str:
    """A tensor's name (or a dtype) from a header, as a message quotes it: escaped, its head alone."""
    return escaped(key if len(key) <= 60 else key[:57] + "...")


def header_refusal(header: dict[str, object]) -> str | int | None:
    """What safetensors' reader (0.8.0: its header types, then Metadata.validate) refuses of a
    header, in its words; else where the tensors' data ends (None: a header not judged)."""
    meta = header.get("__metadata__")
    if "__metadata__" in getattr(header, "doubled", ()):
        return "invalid JSON in header: duplicate field `__metadata__`"
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        return "invalid JSON in header: __metadata__ is not a map of strings"
    tensors = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        entry = _entry(info)
        if isinstance(entry, str):
            return f"invalid JSON in header: tensor `{_shown(key)}`: {entry}"
        if entry is None:
            return None
        tensors.append((entry[2], entry[0], entry[1], key))
    start = 0
    for (begin, end), dtype, shape, key in sorted(tensors, key=lambda t: t[0]):
        if begin != start or end < begin:
            return (
                f"invalid offset for tensor `{_shown(key)}` (the tensors' data must run on from 0, no gap or overlap)"
            )
        start = end
        elements = 1
        for dim in shape:  # as its checked product: an overflow before a 0 dimension is one too
            elements *= dim
            if elements >= _USIZE:
                return "overflow computing buffer size from shape and/or element type"
        bits = elements * _DTYPE_BITS[dtype]
        if bits >= _USIZE:
            return "overflow computing buffer size from shape and/or element type"
        if bits % 8:
            return f"tensor `{_shown(key)}`: its {dtype} data does not end up at a byte boundary"
        if end - begin != bits // 8:
            said = f"{bits // 8} bytes of {dtype} {list(shape)}, its data_offsets span {end - begin}"
            return f"invalid shape, data type, or offset for tensor `{_shown(key)}` ({said})"
    return start


def _entry(info: object) -> tuple[str, list[int], tuple[int, int]] | str | None:
    """(dtype, shape, data_offsets) of a tensor's header entry as serde reads its struct (an object,
    or a list of the three); else what it refuses (None: not judged)."""
    if isinstance(info, list):
        if len(info) != 3:
            return f"invalid length {len(info)}, expected struct TensorInfo with 3 elements"
        info = dict(zip(_FIELDS, info, strict=True))
    if not isinstance(info, dict):
        return "no struct TensorInfo (dtype, shape, data_offsets)"
    doubled = [field for field in _FIELDS if field in getattr(info, "doubled", ())]
    missing = [field for field in _FIELDS if field not in info]
    if doubled or missing:
        return f"duplicate field `{doubled[0]}`" if doubled else f"missing field `{missing[0]}`"
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if isinstance(dtype, dict):  # an enum as a map: {"F32": null} is F32 to serde
        if len(dtype) != 1 or None not in dtype.values():
            return None
        dtype = next(iter(dtype))
    if not isinstance(dtype, str) or dtype not in _DTYPE_BITS:
        said = f"`{_shown(dtype)}`" if isinstance(dtype, str) else "no string"
        return f"unknown dtype {said}, expected one of {', '.join(_DTYPE_BITS)}"
    if not isinstance(shape, list) or not all(_size(dim) for dim in shape):
        return "its shape is not a list of sizes (integers 0 or more)"
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_size(o) for o in offsets):
        return "its data_offsets are not two integers 0 or more"
    return dtype, shape, (offsets[0], offsets[1])


def _end(info: object) -> int | None:
    """Where a tensor's data ends, as its header entry says (None: no such entry)."""
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    if isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets):
        return int(offsets[1])
    return None


def _consolidated(directory: str) -> bool | None:
    """Whether a consolidated*.safetensors file is under `directory` at any depth (vLLM's `auto` then
    loads Mistral's format); None when the tree is too large to walk."""
    seen = 0
    for _, files in observed.walk(directory, WALK_LIMIT):
        seen += len(files) + 1
        if any(fnmatch.fnmatch(f, "consolidated*.safetensors") for f in files):
            return True
        if seen > WALK_LIMIT:
            return None
    return False


def _index_files(index: str, directory: str) -> dict[str, str] | str:
    """The shard files a safetensors index names, each with the path vLLM compares to its globs;
    else why vLLM cannot read it (json.load, then ["weight_map"]): the load fails on it."""
    try:
        data = json.loads(read_named_file(index, INDEX_LIMIT, "weights index").decode("utf-8"))
        names = {str(name) for name in data["weight_map"].values()}
    except (BadInput, FileNotFoundError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return f"{os.path.basename(index)} is no JSON object with a weight_map, as vLLM reads it"
    return {name: os.path.join(directory, name) for name in names}


def header_keys(path: str, budget: HeaderBudget | None = None) -> list[str] | None:
    """The tensor names a safetensors file's header holds (its __metadata__ left out); None when its
    header is not read: no such regular file, no JSON object, longer than patchkit parses, past `budget`."""
    try:
        length = int.from_bytes(observed.read_regular(path, 8, follow_symlinks=True, head=True), "little")
        if not 2 <= length <= HEADER_READ or (budget is not None and not budget.takes(length)):
            return None
        header = json.loads(
            observed.read_regular(path, 8 + length, follow_symlinks=True, head=True)[8:].decode("utf-8")
        )
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return [str(key) for key in header if key != "__metadata__"] if isinstance(header, dict) else None


def weight_names(directory: str, *, local: bool = True) -> set[str] | str:
    """The tensor names of the Hugging Face safetensors checkpoint vLLM loads from `directory` (the
    keys of its index's weight_map, else of each *.safetensors file's header); else why they are not
    read. `local`: as weights_verdict's (vLLM's `auto` then takes Mistral's format where it finds it)."""
    mistral = _consolidated(directory) if local else False
    if mistral is None:
        return f"more than {WALK_LIMIT:,} files are under it, too many to tell which format vLLM loads"
    if mistral:
        return "it may hold Mistral's consolidated format, whose weight names patchkit does not read"
    index = os.path.join(directory, _INDEX)
    if observed.isfile(index):
        try:
            data = json.loads(read_named_file(index, INDEX_LIMIT, "weights index").decode("utf-8"))
            return {str(name) for name in data["weight_map"]}
        except (BadInput, OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return f"its {_INDEX} is not read (no JSON object with a weight_map)"
    found, budget = observed.glob(os.path.join(directory, "*.safetensors")), HeaderBudget()
    if not found:
        return "it holds no safetensors weights, the only ones whose names patchkit reads"
    names: set[str] = set()
    for path in found:
        keys = header_keys(path, budget)
        if keys is None:
            return f"the header of its {escaped(os.path.basename(path))} is not read"
        names.update(keys)
    return names


# the parts of the weight names a command read of each directory: preflight judges the launch's
# adapters once per set it covers, and a large model's index is read once (cli/percommand.py empties it)
_PARTS: dict[tuple[str, bool], frozenset[str] | str] = {}


def weight_parts(directory: str, *, local: bool = True) -> frozenset[str] | str:
    """Every dot-separated part of the weight names weight_names reads (each layer's name is one);
    else why they are not read."""
    if (directory, local) not in _PARTS:
        names = weight_names(directory, local=local)
        parts = names if isinstance(names, str) else frozenset(p for name in names for p in name.split("."))
        _PARTS[directory, local] = parts
    return _PARTS[directory, local]


# a command's verdicts on the directories it judged: preflight judges the launch once per set it
# covers, and each header is parsed once (cli/percommand.py empties it)
_JUDGED: dict[tuple[str, str, bool, tuple[str, int] | None], str | None] = {}


def weight_findings(
    command: LaunchCommand, target: ModelConfig, check: str, drafter_format: str | None = None
) -> list[Finding]:
    """The `check` findings for the target and the drafter whose weights were judged: failed when vLLM
    would find no weights to load in the directory it loads them from; a pass is a note when it was
    judged only in part; a loader patchkit does not model is said, never passed in silence.
    `drafter_format`: the load format vLLM loads the drafter with (drafter_load; None: the launch's)."""
    load_format = _loader(command, target, command.optional_text("load-format") or "auto")
    if load_format not in (NO_WEIGHTS, *PATTERNS, "auto", SHARDED):
        reason = f"--load-format {load_format}: patchkit does not read what that loader loads"
        return [cannot_judge(check, reason, "check that the model and the drafter hold what it loads")]
    found = []
    model = target_directory(command)
    if model is not None and load_format != NO_WEIGHTS:
        found += _problem(command, "model", *model, load_format, "the load fails at its start")
    drafter = drafter_directory(command)
    own = load_format if drafter_format is None else _loader(command, target, drafter_format)
    if drafter is not None and (own not in (NO_WEIGHTS, *PATTERNS, "auto", SHARDED) or _own_sharded(own)):
        unread = "draft_load_config's pattern and -tp ranks are not read" if _own_sharded(own) else "not read"
        reason = f"drafter '{escaped(drafter[0])}': what its load format {escaped(own)} loads: {unread}"
        return [*as_findings(check, found), cannot_judge(check, reason, "check that the drafter holds what it loads")]
    if drafter is not None and own != NO_WEIGHTS:  # random values: no file is read, nothing can be missing
        found += _problem(command, "drafter", *drafter, own, "the launch fails once the target has loaded")
    return as_findings(check, found)


def _own_sharded(load_format: str) -> bool:
    """draft_load_config's sharded_state: its pattern and ranks are the drafter's loader's own (not read)."""
    return isinstance(load_format, OwnFormat) and load_format == SHARDED


def _loader(command: LaunchCommand, target: ModelConfig, load_format: str) -> str:
    """The loader `load_format` picks: BitsAndBytesModelLoader's own files where the launch or the
    target's config quantizes with bitsandbytes."""
    quantization = target.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    if "bitsandbytes" in (command.options.get("quantization"), method) and load_format in (*PATTERNS, "auto"):
        return "bitsandbytes"
    return load_format


def as_findings(check: str, found: list[tuple[bool | None, str, str | None, bool]]) -> list[Finding]:
    """`check`'s findings of (ok, message, fix, note) tuples; ok None: not judged (a bound patchkit hit)."""
    return [
        Finding(check, ok is not False, message, fix, judged=ok is not None, note=note)
        for ok, message, fix, note in found
    ]


def _problem(
    command: LaunchCommand, role: str, name: str, directory: str, local: bool, load_format: str, when: str
) -> list[tuple[bool | None, str, str | None, bool]]:
    """The finding for `name`, whose weights vLLM loads from `directory` (`name` itself, or its
    cached snapshot: the fix then fetches the model whole); none where they are not judged."""
    sharded = _sharded_files(command) if load_format == SHARDED else None
    key = (os.path.join(command.working_directory(), directory), load_format, local, sharded)
    if key not in _JUDGED:
        _JUDGED[key] = (
            weights_verdict(key[0], load_format, local=local) if sharded is None else _sharded_verdict(key[0], *sharded)
        )
    why = _JUDGED[key]
    hub_id = name
    name, directory = escaped(name), escaped(directory)
    place = "" if directory == name else f" (its cached snapshot {directory})"
    if why is None:
        return []
    if isinstance(why, Unjudged):  # the check's bound: said, with what lets it judge
        fix = f"move what is not the {role}'s out of {directory}, or check by hand that vLLM finds its weights"
        return [(None, f"cannot judge: {role} '{name}'{place}: {why}", fix, False)]
    if isinstance(why, Judged):  # a pass counted: preflight then says what it judged, not "nothing judged"
        message = f"{role} '{name}'{place}: its weights are there, as vLLM's loader reads them"
        return [(True, f"{message}; {why}" if why else message, None, bool(why))]
    damaged = isinstance(why, Damaged)
    if isinstance(why, Hidden):
        fix = f"move {why.files} out of {directory} (vLLM then reaches the weights)"
    elif isinstance(why, NotSharded):
        also = " too (it loads with the launch's --load-format)" if role == "drafter" else ""
        dropped = command.where("load-format", "--load-format")[1]  # where the launch gives it: a --config file too
        fix = f"pre-shard it{also} with vLLM's examples/offline_inference/save_sharded_state.py, or {dropped}"
    elif isinstance(why, OtherFormat):
        dropped = command.where("load-format", f"--load-format {load_format}")[1]
        fix = f"{dropped} (auto loads {why.files}), or convert the {role}'s weights to it"
    elif directory == name and LFS in why:
        fix = f"run `git lfs pull` in {name} (it fetches the weights the pointers name)"
    elif directory == name:
        again = "again, whole " if damaged else ""
        fix = f"put the {role}'s weights into {name} {again}(or give the directory that holds them)"
    else:
        download = _whole_download(command, role, hub_id, key[0], damaged=damaged)
        fix = f"fetch it whole: {fetched_by(download, 'weights too, as an offline launch needs')}"
    return [(False, f"{role} '{name}'{place}: {why}: {when}", fix, False)]


def _whole_download(command: LaunchCommand, role: str, name: str, snapshot: str, *, damaged: bool) -> str:
    """The `hf download` that fills the cached `snapshot` of hub id `name` whole: into the cache it
    is under (cache/models--org--m/snapshots/C), at the revision the launch asks of that role."""
    spec = command.speculative_config or {}
    revision = command.optional_text("revision") if role == "model" else spec.get("revision")
    cache = Path(snapshot).parent.parent.parent
    return hf_download(name, revision if isinstance(revision, str) else None, cache, force=damaged)


def target_directory(command: LaunchCommand) -> tuple[str, str, bool] | None:
    """(name, directory, named by the launch) vLLM loads the target's weights from; None when it
    would download them (online, a hub id)."""
    name = path = str(command.model)
    revision = command.optional_text("revision")
    if offline(command.environ):  # EngineArgs takes the cached snapshot first, then redirects
        try:
            path = offline_model_path(name, revision, command.environ)
        except (TargetError, BadInput):  # the models finding says it
            return None
    path = redirected(path, command.environ, command.cwd)
    shown = name if path != name and not os.path.isdir(os.path.join(command.working_directory(), name)) else path
    return (shown, path, True) if os.path.isdir(os.path.join(command.working_directory(), path)) else None


def drafter_tensors(
    command: LaunchCommand, load_format: str | None = None
) -> dict[str, tuple[str, list[int]]] | str | None:
    """name -> (file name, shape) of each tensor vLLM's safetensors loader hands the drafter: its
    directory's *.safetensors (filtered by its index) as weights_verdict finds them, each header read
    bounded. Else why they are not read (a load format other than auto/hf/safetensors, auto's Mistral
    files, torch files, a header past the bounds); None where nothing is to be said: no local drafter
    (vLLM downloads it), an index vLLM refuses (the weights finding says it). `load_format`: the one
    vLLM loads the drafter with (drafter_load; None: the launch's)."""
    launch_format = command.optional_text("load-format") or "auto"
    load_format = launch_format if load_format is None else load_format
    found = drafter_directory(command)
    if found is None:
        return None
    if load_format not in ("auto", "hf", "safetensors"):
        given = "--load-format" if load_format == launch_format else "its own load format (draft_load_config)"
        return f"{given} {escaped(load_format)}: patchkit reads the tensor names of safetensors files only"
    directory = os.path.join(command.working_directory(), found[1])
    if load_format == "auto" and _consolidated(directory) is not False:
        return "its weights are Mistral's consolidated*.safetensors, whose layout patchkit does not read"
    # each read through observed: run's kept findings hold while these files say the same
    files = observed.glob(os.path.join(directory, "*.safetensors"))
    index = os.path.join(directory, _INDEX)
    named = _index_files(index, directory) if observed.isfile(index) else None
    if isinstance(named, str):
        return None
    if not files:
        return _torch_files(directory) if load_format != "safetensors" else "it holds no safetensors file"
    kept = set(named.values()) if named is not None else set(files)
    budget, tensors = HeaderBudget(), {}
    for path in sorted(path for path in files if path in kept):
        header = _header(path, budget)
        if header is None:
            return f"the header of its {escaped(os.path.basename(path))} is not read whole (patchkit's bounds)"
        for key, info in header.items():
            shape = info.get("shape") if isinstance(info, dict) and key != "__metadata__" else None
            if isinstance(shape, list) and all(_size(dim) for dim in shape):
                tensors[key] = (os.path.basename(path), shape)
    return tensors


class TorchFiles(str):
    """The drafter's weights are torch files (`paths`, as vLLM's hf glob takes them): their names are read
    apart (torch_names, imported only by the launch checks that read them)."""

    paths: tuple[str, ...] = ()


def _torch_files(directory: str) -> str | None:
    """Why a drafter without safetensors files has no names read here: the torch files vLLM's glob takes
    (*.bin but training files, else *.pt), or none (its weights finding says it)."""
    found = observed.glob(os.path.join(directory, "*.bin"))
    kept = [path for path in found if not path.endswith(_NOT_WEIGHTS)]
    if found and not kept:
        return None  # vLLM stops at the training files and finds no weights: the weights finding fails it
    paths = sorted(kept or observed.glob(os.path.join(directory, "*.pt")))
    if not paths:
        return "it holds no safetensors file"
    names = few([os.path.basename(path) for path in paths], sep=", ")
    said = TorchFiles(f"they are torch files ({names}), whose pickle patchkit does not read")
    said.paths = tuple(paths)
    return said


def _header(path: str, budget: HeaderBudget) -> dict[str, object] | None:
    """A safetensors file's JSON header, read bounded (None: not a regular file, too long a header for
    the bounds, or no JSON object)."""
    try:
        if not observed.regular(path):
            return None
        head = observed.read_regular(path, 8, follow_symlinks=True, head=True)
        length = int.from_bytes(head, "little") if len(head) == 8 else HEADER_READ + 1
        if length > HEADER_READ or not budget.takes(length):
            return None
        header = json.loads(
            observed.read_regular(path, 8 + length, follow_symlinks=True, head=True)[8:].decode("utf-8")
        )
    except (OSError, ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def drafter_directory(command: LaunchCommand) -> tuple[str, str, bool] | None:
    """(name, directory, named by the launch) of the drafter's weights: its directory, or offline
    the snapshot snapshot_download(local_files_only) finds under --download-dir or the hub cache."""
    spec = command.speculative_config or {}
    drafter = spec.get("model")
    if not isinstance(drafter, str) or not drafter or drafter in ("ngram", "[ngram]"):
        return None
    name = redirected(drafter, command.environ, command.cwd)
    if observed.isdir(os.path.join(command.working_directory(), name)):
        return name, name, True
    if not offline(command.environ) or name.count("/") != 1:
        return None
    cache = command.optional_text("download-dir") or str(hf_hub_cache(command.environ))
    revision = spec.get("revision")
    try:
        snapshot = offline_snapshot(name, revision if isinstance(revision, str) else None, Path(cache))
    except (TargetError, BadInput):
        return None
    return (name, str(snapshot), False) if snapshot is not None else None


# The names a Hugging Face tokenizer is read from (tokenizer_config.json names its class, the rest are
# vocabularies: sentencepiece, BPE, WordPiece, tiktoken, Mistral's tekken): AutoTokenizer loads none
# from a directory that holds none of them (checked with vLLM 0.16.0's get_tokenizer: it raises at start).
TOKENIZER_NAMES = ("tokenizer", "vocab", "merges", "spiece", "sentencepiece", "tekken", "spm", "bpe", "qwen")
TOKENIZER_SUFFIXES = (".model", ".tiktoken", ".spm", ".vocab", ".codes")
TOKENIZER_MODES = ("auto", "hf", "slow")  # the modes that load through AutoTokenizer
SOME_TOKENIZER_FILES = "tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json, ..."


def tokenizer_findings(command: LaunchCommand) -> list[tuple[bool | None, str, str | None, bool]]:
    """A failed finding (as weight_findings's) when the tokenizer vLLM loads at start (--tokenizer,
    else the model's own directory) is a local path that holds none: a directory with no tokenizer
    file, or no directory at all (a GGUF file aside: vLLM reads its tokenizer). A hub id, a cached
    snapshot, another tokenizer mode or --skip-tokenizer-init: not judged."""
    mode = command.optional_text("tokenizer-mode") or "auto"
    if command.options.get("skip-tokenizer-init") or mode not in TOKENIZER_MODES:
        return []
    if command.tokenizer is not None:
        path, said = command.tokenizer, f"--tokenizer {escaped(command.tokenizer)}"
        fix = f"give --tokenizer the directory (or hub id) that holds the tokenizer's files ({SOME_TOKENIZER_FILES})"
    else:
        model = target_directory(command)
        if model is None or model[0] != model[1]:  # a hub id's snapshot, a redirect: not judged here
            return []
        path, said = model[1], f"model '{escaped(model[1])}' (vLLM loads the tokenizer from it: no --tokenizer)"
        fix = (
            f"put the tokenizer's files ({SOME_TOKENIZER_FILES}) into {escaped(path)}, "
            "or give --tokenizer the directory (or hub id) that holds them"
        )
    why = _no_tokenizer(os.path.join(command.working_directory(), path))
    if isinstance(why, Unjudged):
        return [
            (None, f"cannot judge: {said}: {why}", f"check by hand that {escaped(path)} holds its tokenizer", False)
        ]
    return [] if why is None else [(False, f"{said}: {why}: vLLM fails loading it at start", fix, False)]


def _no_tokenizer(path: str) -> str | None:
    """Why `path` holds no tokenizer AutoTokenizer loads; None when it may (or is no path here)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None  # a hub id: vLLM's to fetch
    if stat.S_ISDIR(info.st_mode):
        try:
            with os.scandir(path) as entries:
                names = [entry.name for _, entry in zip(range(WALK_LIMIT), entries, strict=False)]
        except OSError:
            return None
        if any(_tokenizer_file(name) for name in names):
            return None
        if len(names) == WALK_LIMIT:  # past the bound, a tokenizer file may still be there
            return Unjudged(f"more than {WALK_LIMIT:,} entries in it, none of the first a tokenizer file")
        return f"the directory holds no tokenizer file ({SOME_TOKENIZER_FILES})"
    if not stat.S_ISREG(info.st_mode):
        kind = "a fifo" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode) else "no file"
        return f"it is {kind}, not a directory"
    try:
        head = read_regular(path, 4, follow_symlinks=True, head=True)
    except OSError:
        head = b""
    return None if path.endswith(".gguf") or head == b"GGUF" else "it is a file, not a directory (nor a GGUF file)"


def _tokenizer_file(name: str) -> bool:
    low = name.lower()
    return low.startswith(TOKENIZER_NAMES) or low.endswith(TOKENIZER_SUFFIXES)

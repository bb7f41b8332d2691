"""vLLM's own build of a launch's drafter, run by engine_config.py (loaded by path, in the launch's
interpreter) once create_engine_config() accepts the launch: the class vLLM's registry picks for the
draft model config, built as its proposer's get_model() builds it, on the meta device, then the
launch's model loader's load_weights() over meta tensors made from the safetensors headers (names,
shapes, dtypes: no tensor data is read). Stdlib only at import; vLLM and torch inside build().

answer: {"status": "built" | "failed" | "cannot", "method", "model": the drafter's path or name,
         "class": the model class, "stage": "build" | "load" (failed), "error": vLLM's error
         (failed), "reason": why it was not judged (cannot), "loaded": false when the launch loads
         no weights (--load-format dummy)}
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeGuard

try:
    import resource
except ImportError:  # not on this platform: no memory bound, the time bound still holds
    resource = None  # type: ignore[assignment]

# the speculative methods whose proposer builds its drafter with get_model(), and the model tag it sets
METHODS = {"eagle": "eagle_head", "eagle3": "eagle_head", "mtp": "eagle_head", "draft_model": "draft_model"}
MEMORY_BOUND = 2 << 30  # bytes over what the process maps already: the meta build allocates no tensor data
HEADER_BOUND = 100 << 20  # safetensors' own limit on one header
HEADERS_BOUND = 512 << 20  # all the drafter's headers together
# safetensors' dtype names -> torch's (a name this torch lacks is not judged)
DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}  # fmt: skip


_ALLOCATION = re.compile(r"(?i)can't allocate memory|cannot allocate memory|out of memory")


class NotJudged(Exception):
    """The build or the load cannot be attempted here (its reason): no verdict on the drafter."""


class OutOfTime(BaseException):  # not an Exception: vLLM's own `except Exception` must not swallow it
    """The time bound was hit."""


def build(
    config: Any,
    seconds: float,
    said: Callable[[BaseException], str],
    platform: Callable[[BaseException], bool],
    *,
    forced: bool = False,
) -> dict[str, Any] | None:
    """The drafter's verdict (the module's answer), or None when the launch names no drafter model.
    `said`: an exception's text; `platform`: whether it is the forced platform's own refusal;
    `forced`: the CPU platform was forced (its MLA layers are then built with MLA_BACKEND's class)."""
    spec = getattr(config, "speculative_config", None)
    draft = getattr(spec, "draft_model_config", None)
    if spec is None or draft is None:
        return None
    method = str(getattr(spec, "method", None))
    answer: dict[str, Any] = {"method": method, "model": str(getattr(draft, "model", ""))}
    if method not in METHODS:
        return {**answer, "status": "cannot", "reason": f"vLLM's {method} drafter is not built here"}
    stage = ["setup"]
    try:
        with _bounded(seconds), _scratch_removed():
            known = set(_layers(config))
            _built(config, spec, method, stage, answer, forced)
            ranks = _ranks(config, spec, method)
            if ranks > 1:  # once whole (every name and shape), then as rank 0 of the launch's -tp: its shards
                for name in set(_layers(config)) - known:  # the first build's layers: vLLM refuses a name twice
                    del _layers(config)[name]
                return _as_rank_zero(config, spec, method, answer, forced, ranks, said)
    except NotJudged as exc:
        return {**answer, "status": "cannot", "reason": str(exc)}
    except OutOfTime:
        return {**answer, "status": "cannot", "reason": f"the {stage[0]} did not finish within {seconds:.0f} s"}
    except MemoryError:
        return {**answer, "status": "cannot", "reason": f"the {stage[0]} needs more than {MEMORY_BOUND >> 30} GiB"}
    except (ImportError, NotImplementedError) as exc:  # an optional dependency, a kernel this machine lacks
        return {**answer, "status": "cannot", "reason": f"the {stage[0]} needs what is not here: {said(exc)}"}
    except Exception as exc:
        if _ALLOCATION.search(str(exc)) is not None:  # torch's allocator at the memory bound
            return {**answer, "status": "cannot", "reason": f"the {stage[0]} needs more than {MEMORY_BOUND >> 30} GiB"}
        if stage[0] == "setup":  # this vLLM's layout, not the drafter
            return {**answer, "status": "cannot", "reason": f"vLLM's build does not start here: {said(exc)}"}
        if platform(exc):
            return {**answer, "status": "cannot", "reason": f"the platform here refuses the {stage[0]}: {said(exc)}"}
        return {**answer, "status": "failed", "stage": stage[0], "error": said(exc)}
    return {**answer, "status": "built"}


def _built(config: Any, spec: Any, method: str, stage: list[str], answer: dict[str, Any], forced: bool) -> None:
    """Build the drafter as the proposer's get_model() does, then load the headers' meta tensors
    with the launch's loader; "class" and "loaded" set in `answer` as they are known (stage[0] says
    how far it got, for a raise: "setup", vLLM's modules and distributed state; "build"; "load")."""
    torch: Any = importlib.import_module("torch")
    loaders: Any = importlib.import_module("vllm.model_executor.model_loader")
    current = importlib.import_module("vllm.config").set_current_vllm_config
    initialize = importlib.import_module("vllm.model_executor.model_loader.utils").initialize_model
    dtyped = importlib.import_module("vllm.model_executor.model_loader.base_loader").set_default_torch_dtype
    tag: Any = getattr(importlib.import_module("vllm.compilation.backends"), "set_model_tag", None)
    _single_process()
    vllm_config, model_config, prefix = config, spec.draft_model_config, ""
    if method == "draft_model":  # its proposer builds it with a config of its own (the drafter's as the model)
        drafts: Any = importlib.import_module("vllm.v1.spec_decode.draft_model")
        vllm_config, model_config, prefix = drafts.create_vllm_config_for_draft_model(config), None, "draft_model"
        model_config = vllm_config.model_config
    load_config = getattr(spec, "draft_load_config", None) or vllm_config.load_config
    stage[0] = "build"
    tagged = tag(METHODS[method]) if tag is not None else contextlib.nullcontext()
    with current(vllm_config), tagged, torch.device("meta"), dtyped(model_config.dtype), _mla_on_cpu(forced):
        model = initialize(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
    answer["class"] = named = f"{type(model).__module__}.{type(model).__name__}"
    loader = loaders.get_model_loader(load_config)
    answer["loaded"] = not isinstance(loader, getattr(loaders, "DummyModelLoader", ()))
    if not answer["loaded"]:
        return
    if type(loader) is not getattr(loaders, "DefaultModelLoader", None):
        raise NotJudged(
            f"built ({named}); its weights' load with --load-format {load_config.load_format} is not run here"
        )
    stage[0] = "load"
    with _meta_weights(torch), current(vllm_config), torch.device("meta"), dtyped(model_config.dtype):
        loader.load_weights(model, model_config)


DIVISIBILITY = "is not divisible by"  # vLLM's ensure_divisibility: a size -tp does not split


def _ranks(config: Any, spec: Any, method: str) -> int:
    """The tensor-parallel size vLLM builds the drafter with: the draft's own for draft_model (its
    proposer's config of its own), else the target's group."""
    parallel = getattr(spec, "draft_parallel_config", None) if method == "draft_model" else None
    ranks = getattr(parallel or getattr(config, "parallel_config", None), "tensor_parallel_size", 1)
    return ranks if isinstance(ranks, int) and ranks > 1 else 1


def _asserted(exc: BaseException) -> str:
    """Where vLLM raised (its file, line and source line): a bare assert says nothing else."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "where not known"
    last = frames[-1]
    return f"{last.filename.rpartition('/vllm/')[2] or last.filename}:{last.lineno}: {(last.line or '').strip()[:160]}"


def _layers(config: Any) -> dict[str, Any]:
    """The layers vLLM's config registers by name as they are built (its static forward context)."""
    context = getattr(getattr(config, "compilation_config", None), "static_forward_context", None)
    return context if isinstance(context, dict) else {}


def _as_rank_zero(
    config: Any,
    spec: Any,
    method: str,
    answer: dict[str, Any],
    forced: bool,
    ranks: int,
    said: Callable[[BaseException], str],
) -> dict[str, Any]:
    """The drafter built and loaded again as rank 0 of `ranks` (the one process's tensor-parallel group
    says so while it lasts: each layer takes its shard, as on that rank). A size -tp does not split
    (vLLM's ensure_divisibility; a layer's bare assert on its shard sizes, building) fails; any other
    error of this stand-in group is not judged."""
    group: Any = importlib.import_module("vllm.distributed.parallel_state").get_tp_group()
    whole, stage = group.world_size, ["build"]
    group.world_size = ranks
    try:
        _built(config, spec, method, stage, dict(answer), forced)
    except Exception as exc:
        if DIVISIBILITY in str(exc) or (isinstance(exc, AssertionError) and stage[0] == "build"):
            error = f"{said(exc)} ({_asserted(exc)}) with -tp {ranks}"
            return {**answer, "status": "failed", "stage": stage[0], "error": error, "ranks": ranks}
        why = f"built whole; as one of {ranks} tensor-parallel ranks the {stage[0]} is not judged here: {said(exc)}"
        return {**answer, "status": "cannot", "reason": why}
    finally:
        group.world_size = whole
    return {**answer, "status": "built", "ranks": ranks}


# a GPU MLA backend's class: the forced CPU platform builds no MLA layer (the drafter is only built,
# on the meta device, never run)
MLA_BACKEND = "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"


@contextlib.contextmanager
def _mla_on_cpu(forced: bool) -> Iterator[None]:
    """While it lasts, the forced CPU platform gives MLA_BACKEND for an MLA layer (as a GPU
    platform gives one of its MLA backends); every other layer's backend is its own."""
    if not forced:
        yield
        return
    platform: Any = getattr(importlib.import_module("vllm.platforms"), "current_platform", None)
    original = getattr(platform, "get_attn_backend_cls", None)
    if original is None or importlib.util.find_spec(MLA_BACKEND.rpartition(".")[0]) is None:
        yield
        return
    signature = inspect.signature(original)

    def chosen(*args: Any, **kwargs: Any) -> Any:
        asked = signature.bind_partial(*args, **kwargs).arguments
        selector = asked.get("attn_selector_config")
        if asked.get("use_mla") is True or getattr(selector, "use_mla", False) is True:
            return MLA_BACKEND
        return original(*args, **kwargs)

    platform.get_attn_backend_cls = chosen
    try:
        yield
    finally:
        del platform.get_attn_backend_cls


SCRATCH: list[str] = []  # the directories _single_process made


@contextlib.contextmanager
def _scratch_removed() -> Iterator[None]:
    try:
        yield
    finally:
        while SCRATCH:
            shutil.rmtree(SCRATCH.pop(), ignore_errors=True)


def _single_process() -> None:
    """vLLM's distributed state as one process with gloo (what the layers' constructors ask of it); its
    file store's directory is removed once the build is over (the worker ends with os._exit: no atexit)."""
    state: Any = importlib.import_module("vllm.distributed.parallel_state")
    if state.model_parallel_is_initialized():
        return
    scratch = tempfile.mkdtemp(prefix="patchkit-drafter-")
    SCRATCH.append(scratch)
    state.init_distributed_environment(1, 0, f"file://{os.path.join(scratch, 'init')}", 0, "gloo")
    state.initialize_model_parallel(1, 1)


@contextlib.contextmanager
def _meta_weights(torch: Any) -> Iterator[None]:
    """vLLM's default loader (its file choice, index filtering, prefixes and strict check as they
    are) with its weight iterators replaced: safetensors files give meta tensors from their headers;
    .bin and .pt files, whose names and shapes need their data read, are not judged."""
    loader: Any = importlib.import_module("vllm.model_executor.model_loader.default_loader")

    def meta(files: list[str], *_: Any, **__: Any) -> Iterator[tuple[str, Any]]:
        return _meta_tensors(torch, files)

    def pickled(*_: Any, **__: Any) -> Iterator[tuple[str, Any]]:
        raise NotJudged("its weights are .bin or .pt files: their names and shapes are read only with their data")

    names = (
        "safetensors_weights_iterator",
        "multi_thread_safetensors_weights_iterator",
        "fastsafetensors_weights_iterator",
    )
    swapped = {name: meta for name in names}
    swapped.update(
        dict.fromkeys(("pt_weights_iterator", "multi_thread_pt_weights_iterator", "np_cache_weights_iterator"), pickled)
    )
    kept = {name: getattr(loader, name) for name in swapped if hasattr(loader, name)}
    try:
        for name in kept:
            setattr(loader, name, swapped[name])
        yield
    finally:
        for name, value in kept.items():
            setattr(loader, name, value)


def _meta_tensors(torch: Any, files: list[str]) -> Iterator[tuple[str, Any]]:
    """(name, a meta tensor of its dtype and shape) for each tensor of each file, in the files'
    order, names sorted in a file (as safetensors' safe_open gives them); a one-element one is a CPU zero."""
    total = 0
    for path in files:
        header, size = _header(path)
        total += size
        if total > HEADERS_BOUND:
            raise NotJudged(f"its safetensors headers are over {HEADERS_BOUND >> 20} MiB together")
        for name in sorted(header):
            entry = header[name]
            if name == "__metadata__":
                continue
            dtype = getattr(torch, DTYPES.get(str(entry.get("dtype")), ""), None) if isinstance(entry, dict) else None
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if not isinstance(dtype, torch.dtype) or not _shape(shape):
                raise NotJudged(f"{path}: {name[:100]}: a dtype or shape this build cannot read")
            # vLLM's loader calls .item() on a one-element weight (an FP8 drafter's k_scale): a real zero, a few bytes
            small = math.prod(shape) == 1
            yield (
                name,
                torch.zeros(shape, dtype=dtype, device="cpu")
                if small
                else torch.empty(shape, dtype=dtype, device="meta"),
            )


def _shape(shape: object) -> TypeGuard[list[int]]:
    return isinstance(shape, list) and len(shape) <= 16 and all(type(n) is int and 0 <= n < 1 << 48 for n in shape)


def _header(path: str) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (JSON) and its length: only those bytes are read, from a regular
    file opened non-blocking (a FIFO never waits)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise NotJudged(f"{path} cannot be opened: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotJudged(f"{path} is not a regular file")
        length = int.from_bytes(_read(fd, 8), "little")
        if size < 8 or length > HEADER_BOUND or 8 + length > size:
            raise NotJudged(f"{path}: its header length is not one safetensors reads (the weights check judges it)")
        header = json.loads(_read(fd, length))
    except (OSError, ValueError) as exc:
        raise NotJudged(f"{path}: its header does not read: {str(exc)[:120]}") from None
    finally:
        os.close(fd)
    if not isinstance(header, dict):
        raise NotJudged(f"{path}: its header is not a JSON object")
    return header, length


def _read(fd: int, count: int) -> bytes:
    parts, left = [], count
    while left > 0:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


@contextlib.contextmanager
def _bounded(seconds: float) -> Iterator[None]:
    """The build under a time bound (SIGALRM, in the main thread) and a memory bound (RLIMIT_AS:
    MEMORY_BOUND over what the process maps now), both as they were after."""
    timed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if timed:

        def out(*_: object) -> None:
            raise OutOfTime()

        handler = signal.signal(signal.SIGALRM, out)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1.0))
    limits = _limit_memory()
    try:
        yield
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, handler)
        if limits is not None and resource is not None:
            resource.setrlimit(resource.RLIMIT_AS, limits)


def _limit_memory() -> tuple[int, int] | None:
    """RLIMIT_AS lowered to MEMORY_BOUND over the process's size now (/proc/self/status); the limits
    it had, or None when it was left as it was."""
    if resource is None:
        return None
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            sizes = [line.split()[1] for line in status.read(1 << 16).splitlines() if line.startswith("VmSize:")]
        mapped = int(sizes[0]) * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        bound = mapped + MEMORY_BOUND
        if (soft != resource.RLIM_INFINITY and soft <= bound) or (hard != resource.RLIM_INFINITY and hard <= bound):
            return None
        resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
        return soft, hard
    except (OSError, ValueError, IndexError):
        return None

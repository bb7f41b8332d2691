"""The tensor names and shapes of a torch.save'd state dict (a drafter's pytorch_model.bin), read as
torch.load(weights_only=True) reads its pickle, yet without torch and without running code: the few
globals a state dict names resolve to stand-ins here, any other stops the reading (not judged).
Imported by the eagle3 set's launch checks only: pickle is no start-up path's. The file's head is read
through `observed` (run's kept findings hold while it says the same)."""

from __future__ import annotations

import io
import pickle
import struct

from patchkit.launch import observed

PICKLE_LIMIT = 16 << 20  # a state dict's pickle: names and shapes, a few MB for the largest drafters
FIRST_READ = 1 << 16  # most drafters' pickles: a few KB
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local file header (torch's data.pkl is the first)


class _Tensor:
    """A tensor the pickle rebuilds: its shape alone."""

    def __init__(self, shape: list[int]) -> None:
        self.shape = shape


def _rebuild_tensor(_storage: object, _offset: object, size: object, *_rest: object) -> _Tensor:
    if not isinstance(size, tuple) or not all(type(dim) is int for dim in size):
        raise pickle.UnpicklingError("a tensor whose size is no tuple of ints")
    return _Tensor(list(size))


def _rebuild_parameter(data: object, *_rest: object) -> object:
    return data


# what a state dict's pickle names (torch 1.6+'s zip format), each to its stand-in
_GLOBALS = {
    ("collections", "OrderedDict"): dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _StateDict(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "torch" and name.endswith("Storage"):  # the dtype of a storage its persistent id names
            return name
        found = _GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not read")
        return found

    def persistent_load(self, pid: object) -> object:
        return None  # a storage: its bytes are never read


def torch_tensors(path: str) -> dict[str, list[int]] | None:
    """name -> shape of each tensor the file's state dict holds; None where it is not read (not torch's
    zip format with data.pkl first and stored, a pickle past the bound, a global other than a state
    dict's, a value no tensor). The pickle ends at its STOP: the rest of the file is never parsed."""
    for limit in (FIRST_READ, PICKLE_LIMIT):
        try:
            head = observed.read_regular(path, limit, follow_symlinks=True, head=True)
        except OSError:
            return None
        if len(head) < LOCAL_HEADER.size:
            return None
        magic, _, _, method, _, _, _, _, _, named, extra = LOCAL_HEADER.unpack_from(head)
        name = head[LOCAL_HEADER.size : LOCAL_HEADER.size + named]
        if magic != b"PK\x03\x04" or method != 0 or name.rpartition(b"/")[2] != b"data.pkl":
            return None
        loaded = _loaded(head[LOCAL_HEADER.size + named + extra :])
        if loaded is not _TRUNCATED:
            break
        if len(head) < limit:
            return None
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, _Tensor) for k, v in loaded.items()
    ):
        return None
    return {name: tensor.shape for name, tensor in loaded.items()}


_TRUNCATED = object()


def _loaded(data: bytes) -> object:
    """The pickle's value (None: not a state dict's pickle); _TRUNCATED where it runs past `data`."""
    try:
        return _StateDict(io.BytesIO(data)).load()
    except EOFError:
        return _TRUNCATED
    except pickle.UnpicklingError as exc:
        return _TRUNCATED if "truncated" in str(exc) else None
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError, MemoryError):
        return None

"""The tensor names and shapes of a torch.save'd state dict (a drafter's pytorch_model.bin), read as
torch.load(weights_only=True) reads its pickle, yet without torch and without running code: the few
globals a state dict names resolve to stand-ins here, any other stops the reading (not judged).
Imported by the eagle3 set's launch checks only: pickle and zipfile are no start-up path's."""

from __future__ import annotations

import io
import pickle
import zipfile

PICKLE_LIMIT = 64 << 20  # a state dict's pickle: names and shapes, a few MB for the largest drafters


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
    """name -> shape of each tensor the file's state dict holds; None where it is not read (not a zip
    of torch's format, a pickle past the bound, a global other than a state dict's, a value no tensor)."""
    try:
        with zipfile.ZipFile(path) as archive:
            member = next((i for i in archive.infolist() if i.filename.rpartition("/")[2] == "data.pkl"), None)
            if member is None or member.file_size > PICKLE_LIMIT:
                return None
            loaded = _StateDict(io.BytesIO(archive.read(member))).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
        return None
    except (KeyError, IndexError, RecursionError, MemoryError):
        return None
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, _Tensor) for k, v in loaded.items()
    ):
        return None
    return {name: tensor.shape for name, tensor in loaded.items()}

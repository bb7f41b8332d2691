"""The kernel block sizes of the tree's attention backends, read statically. An MLA model's non-MLA
layers (an EAGLE-3 drafter's) share one KV cache group with its MLA layers, and vLLM's model runner
(select_common_block_size, 0.13-0.17) splits the group's blocks into one kernel block size that every
backend of the group takes: CUTLASS_MLA takes 128 only, FlashInfer 16, 32 or 64, so none."""

from __future__ import annotations

import ast

from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import Reader

# A size as a backend's get_supported_kernel_block_sizes lists it: an int, or ("multiple", base) for
# vLLM's MultipleOf(base)
Size = int | tuple[str, int]


def kernel_block_sizes(read: Reader, registries: tuple[str, ...], name: str) -> list[Size] | None:
    """The sizes the backend the tree's registry maps `name` (upper case) to returns from its own
    get_supported_kernel_block_sizes (the last return: FlashAttention's hybrid-model case comes
    first); None when the tree does not say them plainly (an inherited method, a computed list)."""
    where = _registered(read, registries, name.upper())
    if where is None:
        return None
    module, _, cls = where.rpartition(".")
    tree = python_tree(read(f"{module.replace('.', '/')}.py"))
    found = next((n for n in (tree.body if tree else ()) if isinstance(n, ast.ClassDef) and n.name == cls), None)
    method = next(
        (
            n
            for n in (found.body if found else ())
            if isinstance(n, ast.FunctionDef) and n.name == "get_supported_kernel_block_sizes"
        ),
        None,
    )
    last = method.body[-1] if method and method.body else None
    listed = last.value if isinstance(last, ast.Return) else None
    if not isinstance(listed, ast.List) or not listed.elts:
        return None
    sizes = [_size(element) for element in listed.elts]
    return [size for size in sizes if size is not None] if None not in sizes else None


def share_a_kernel_block(one: list[Size], other: list[Size]) -> bool:
    """Whether some kernel block size suits both lists, as select_common_block_size asks (for an engine
    block size the backends' own sizes divide: vLLM forces it so for an MLA backend of fixed sizes)."""
    if any(not isinstance(size, int) for size in one) and any(not isinstance(size, int) for size in other):
        return True  # two MultipleOf: their least common multiple
    fixed = [size for size in (*one, *other) if isinstance(size, int)]
    return any(_suits(one, size) and _suits(other, size) for size in fixed)


def _suits(sizes: list[Size], size: int) -> bool:
    return any(size == taken if isinstance(taken, int) else size % taken[1] == 0 for taken in sizes)


def _size(node: ast.expr) -> Size | None:
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value > 0:
        return node.value
    called = node.func if isinstance(node, ast.Call) else None
    if isinstance(called, ast.Name) and called.id == "MultipleOf" and isinstance(node, ast.Call):
        base = _size(node.args[0]) if len(node.args) == 1 and not node.keywords else None
        return ("multiple", base) if isinstance(base, int) else None
    return None


def _registered(read: Reader, registries: tuple[str, ...], name: str) -> str | None:
    """The dotted class path the tree's backend registry gives `name`."""
    for path in registries:
        tree = python_tree(read(path))
        for node in ast.walk(tree) if tree else ():
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and target.id == name and isinstance(node, ast.Assign):
                value = node.value
                return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return None

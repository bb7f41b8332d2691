"""Each Python content parsed once in this process: names runs pyflakes on the tree, contract reads
it (apply checks the same contents as planned and as written; fleet's node agent in phase 1 and
again in phase 2). Readers only read the tree (pyflakes adds only its own `_pyflakes_*` attributes
to the nodes). The syntax check compiles the text: a tree of Python objects costs more to build
than the compile."""

from __future__ import annotations

import ast
import warnings
from functools import lru_cache

# A tree takes 10-30 times its source in memory: only sources up to this size are kept, so the
# kept trees stay within a few hundred MB in a long-lived process (a fleet agent, a test run).
LARGEST_KEPT = 1 << 20


def parsed(data: bytes, path: str) -> ast.Module | Exception:
    """The tree of `data`, or the error the parser raised: a NUL byte is a ValueError, code nested
    deeper than the interpreter can parse a RecursionError or MemoryError (Python cannot import it
    either)."""
    return _kept(data, path) if len(data) <= LARGEST_KEPT else _parse(data, path)


def python_tree(data: bytes | None, path: str = "<tree file>") -> ast.Module | None:
    """parsed()'s tree of a tree file a rule reads; None for no file, an empty one, or one no Python
    parses (a hostile file nested past the parser's depth is not read, and never a crash)."""
    if not data:
        return None
    tree = parsed(data, path)
    return None if isinstance(tree, Exception) else tree


@lru_cache(maxsize=16)
def _kept(data: bytes, path: str) -> ast.Module | Exception:
    return _parse(data, path)


def _parse(data: bytes, path: str) -> ast.Module | Exception:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like: not a verdict
            return ast.parse(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return exc


def names(*nodes: ast.AST) -> set[str]:
    """The names (ast.Name ids) among `nodes` themselves, not their children."""
    return {node.id for node in nodes if isinstance(node, ast.Name)}

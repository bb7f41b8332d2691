"""One module per command; the options they share are declared once in commands.options."""

from __future__ import annotations


def make_ui(fmt: str = "text", quiet: bool = False, verbose: int = 0):
    from patchkit.ui import UI

    return UI(fmt=fmt, quiet=quiet, verbose=verbose)

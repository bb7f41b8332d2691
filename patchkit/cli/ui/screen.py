"""What the report writers (plan, reports) need of the console: console.UI, as a Protocol, since
the console imports them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from patchkit.cli.ui.findings import Failure


class Screen(Protocol):
    quiet: bool
    verbose: int

    @property
    def out(self) -> Console: ...

    @property
    def json_mode(self) -> bool: ...

    @property
    def terminal(self) -> bool: ...

    @property
    def width(self) -> int | None: ...

    def line(self, text: str = "", style: str | None = None) -> None: ...

    def note(self, text: str) -> None: ...

    def json(self, data: dict[str, Any]) -> None: ...

    def failures(self, failures: list[Failure]) -> None: ...

    def verdict(self, text: str, *, ok: bool) -> None: ...

    def table(
        self, columns: list[str], rows: Iterable[list[str]], title: str | None = None, state_column: int | None = None
    ) -> None: ...

"""The console: lines, notes, warnings, errors and tables on stdout and stderr, and progress."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any

from patchkit.base.enums import OutputFormat
from patchkit.base.values import Value
from patchkit.cli.ui import run
from patchkit.cli.ui.text import (
    GAP,
    LABEL_WIDTH,
    STATE_STYLES,
    fit_table,
    fitted,
    plain_stdout,
    plain_table,
    rich,
    visible,
    write_plainly,
)

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from patchkit.cli.ui.findings import Failure


def _console(*, stderr: bool) -> Console:
    """Created on first use: a quiet run that prints nothing never imports rich."""

    class _Console(rich().console.Console):  # type: ignore[misc]
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError  # the CLI's to handle, as for every other write (its own exit code)

    stream = sys.stderr if stderr else sys.stdout
    return _Console(
        stderr=stderr, markup=False, highlight=False, soft_wrap=False, width=None if stream.isatty() else 10_000
    )


def _progress_bar(console: Any, more_columns: Callable[[ModuleType], tuple[Any, ...]]) -> Any:
    """A transient rich Progress on `console`: the description, the bar, then `more_columns(rich.progress)`."""
    # lazy: rich's progress bars load only for a bar drawn on a terminal
    from rich import progress

    return progress.Progress(
        progress.TextColumn("{task.description}"),
        progress.BarColumn(),
        *more_columns(progress),
        console=console,
        transient=True,
    )


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_LABEL = r"[a-zA-Z]\S* +(?=\S)"  # "version  0.16.0": the label and its padding


def _hanging(text: str) -> int:
    """Where a wrapped line continues: under the value of a labelled line, else two columns in."""
    label = re.compile(_LABEL).match(text)
    return label.end() if label and label.end() == LABEL_WIDTH else 2


@dataclass(eq=False, repr=False)
class UI(Value):
    """The console of one run: its format, -q and -v."""

    fmt: str = OutputFormat.TEXT
    quiet: bool = False
    verbose: int = 0

    @cached_property
    def out(self) -> Console:
        return _console(stderr=False)

    @cached_property
    def err(self) -> Console:
        return _console(stderr=True)

    @property
    def json_mode(self) -> bool:
        return self.fmt == OutputFormat.JSON

    @cached_property
    def plain(self) -> bool:
        """stdout is a pipe or a file, told without importing rich: plain lines need none of it."""
        return plain_stdout()

    @property
    def terminal(self) -> bool:
        return not self.plain and self.out.is_terminal

    # -- primitives ---------------------------------------------------------------------------
    def line(self, text: str = "", style: str | None = None) -> None:
        if self.quiet or self.json_mode:
            return
        text = visible(text)
        if self.plain:
            write_plainly(lambda stdout: stdout.write(text + "\n"))
        elif not self.terminal:  # forced to a console that is not a terminal: as it is
            self.out.print(text, style=style, soft_wrap=True)
        else:  # wrapped at spaces, a labelled line's continuation under its value
            for part in text.split("\n"):
                for fitted_line in fitted(part, self.out.width, indent=_hanging(part), shorten=True):
                    self.out.print(fitted_line, style=style, soft_wrap=True)

    def result(self, text: str) -> None:
        """The one line a script reads (a built wheel's path): written as it is, also with -q."""
        write_plainly(lambda stdout: stdout.write(text + "\n"))

    def detail(self, text: str) -> None:
        if self.verbose and not self.json_mode:
            self.err.print(visible(text), style="dim")

    def note(self, text: str) -> None:
        """Wrapped as an error is (at spaces, an aside whole, the lines after the first indented)."""
        if self.quiet:
            return
        self._wrapped(f"note: {text}", "cyan")

    def _wrapped(self, said: str, style: str) -> None:
        """`said` on stderr, wrapped at spaces in a terminal, each line after the first indented two
        columns past its own (a path or `command` whole on its line: it is copied from there)."""
        # piped or a journal, no console made yet: one line each, as rich writes it, without rich
        if "err" not in vars(self) and plain_stdout(sys.stderr):
            sys.stderr.write("".join(part + "\n" for part in visible(said).split("\n")))
            sys.stderr.flush()  # said where it happens, before what stdout says next (as rich flushes)
            return
        width = self.err.width if self.err.is_terminal else None
        for part in visible(said).split("\n"):
            for line in fitted(part, width, indent=len(part) - len(part.lstrip()) + 2):
                self.err.print(line, style=style, soft_wrap=True)

    def warn(self, text: str, hint: str | None = None) -> None:
        """Wrapped as a note is, the lines after the first indented; the hint on a line of its own
        (a `command` is copied whole from there)."""
        self._wrapped(f"warning: {text}", "yellow")
        if hint:
            self._wrapped(f"hint: {hint}", "yellow")

    def error(self, message: str, hint: str | None = None) -> None:
        """Wrapped at spaces in a terminal, a path or `command` whole on its line (never folded
        mid-word, never shortened: it is copied from there)."""
        self._wrapped(f"error: {message}", "bold red")
        if hint:
            self._wrapped(f"hint: {hint}", "red")

    def json(self, data: dict[str, Any]) -> None:
        """The run's document: held for the CLI to complete and print (see Run)."""
        run.hold(data)

    def wrote(self, what: str) -> None:
        """What the command has put in place (a wheel): said on stderr if its report cannot be written."""
        run.wrote(what)

    def knows(self, facts: dict[str, Any]) -> None:
        """What the command has found so far (the target, its version...): a run that then fails
        reports it in its JSON document."""
        run.knows(facts)

    def table(
        self, columns: list[str], rows: Iterable[list[str]], title: str | None = None, state_column: int | None = None
    ) -> None:
        """A table: drawn by rich in a terminal, fitted to its width (a name shortened with …,
        text wrapped at spaces, never cut mid-word); piped, aligned plain columns with no padding
        after the last."""
        if self.quiet or self.json_mode:
            return
        cells = [[visible(str(c), field=True) for c in row] for row in rows]
        title = visible(title, field=True) if title else title
        if not self.terminal:
            write_plainly(lambda stdout: stdout.write(plain_table(columns, cells, title)))
            return
        self._fitted_table(columns, cells, title, state_column)

    def _fitted_table(
        self, columns: list[str], cells: list[list[str]], title: str | None, state_column: int | None
    ) -> None:
        """The table in the terminal's width (text.fit_table), the header bold and underlined, a
        state coloured, a row's text that has no room beside it on lines of its own under it; no
        line padded past its last cell."""
        table = fit_table(columns, cells, self.out.width)
        widths = table.widths
        text = rich().text.Text()
        if title:
            text.append(title + "\n", style="italic")
        for number, row in enumerate(table.rows):
            header = number == 0
            for depth in range(max(map(len, row))):
                parts = [lines[depth] if depth < len(lines) else "" for lines in row]
                last = max((i for i, part in enumerate(parts) if part), default=0)
                for i, part in enumerate(parts[: last + 1]):
                    state = STATE_STYLES.get(cells[number - 1][i], "") if i == state_column and not header else ""
                    text.append(part if i == last else part.ljust(widths[i] + GAP), style="bold" if header else state)
                text.append("\n")
            for line in table.below[number]:
                text.append(line + "\n", style="bold" if header else "")
            if header:
                text.append("\u2500" * (sum(widths) + GAP * (len(widths) - 1)) + "\n")
        text.rstrip()
        self.out.print(text, soft_wrap=True)

    def failures(self, failures: list[Failure]) -> None:
        """Each failure: its heading (where: what: message), the source line and caret, what
        follows from it, and its fix. On stderr with -q: a failure is never silent."""
        if self.json_mode or not failures:
            return
        for failure in failures:
            style = "yellow" if failure.warning else "red"
            self._said(fitted(failure.heading(), self.width, indent=2, shorten=True), style=style, stderr=self.quiet)
            for line in failure.excerpt.splitlines():
                self._said([" " * 4 + visible(line, field=True)], stderr=self.quiet)
            for also in failure.also:
                self._said(fitted(f"also: {also}", self.width, first=2, indent=8, shorten=True), stderr=self.quiet)
            if failure.fix:  # one fix for several failures says so
                label = f"fix (all {failure.fixes} above):" if failure.fixes > 1 else "fix:"
                self._said(
                    fitted(f"{label} {failure.fix}", self.width, first=2, indent=7, shorten=True), stderr=self.quiet
                )

    def verdict(self, text: str, *, ok: bool) -> None:
        """The last line: the command's one-line verdict (on stderr with -q when it failed)."""
        if self.json_mode:
            return
        if ok:
            self.line(text, style="green")
        else:
            self._said(fitted(text, self.width, indent=2, shorten=True), style="bold red", stderr=self.quiet)

    @property
    def width(self) -> int | None:
        """The terminal's width to fit lines to; None when piped (lines are never wrapped there)."""
        return self.out.width if self.terminal else None

    def _said(self, lines: list[str], style: str | None = None, *, stderr: bool = False) -> None:
        """Lines already fitted: written as they are (never wrapped again)."""
        if stderr:
            for text in lines:
                self.err.print(visible(text), style=style, soft_wrap=True)
        elif self.quiet or self.json_mode:
            return
        elif self.plain:
            write_plainly(lambda stdout: stdout.write("".join(visible(text) + "\n" for text in lines)))
        else:
            for text in lines:
                self.out.print(visible(text), style=style, soft_wrap=True)

    def diff(self, text: str) -> None:
        if self.terminal:
            # lazy: rich loads only for output drawn on a terminal
            from rich.syntax import Syntax

            self.out.print(Syntax(visible(text), "diff", theme="ansi_dark", background_color="default"))
        else:
            write_plainly(lambda stdout: stdout.write(text))  # in chunks: `| head` ends it with 141

    @property
    def live(self) -> bool:
        """Progress is drawn only for a person: stdout and stderr both a terminal, text output,
        not -q (a pipe, a log file or a JSON reader gets none of it)."""
        return not self.quiet and self.fmt == OutputFormat.TEXT and self.terminal and self.err.is_terminal

    @contextmanager
    def progress(self, total: int, description: str) -> Iterator[Callable[[str], None]]:
        """Yields advance(label): a progress bar on stderr when both streams are a terminal, else a no-op."""
        if not self.live:
            yield lambda label: None
            return
        with _progress_bar(
            self.err, lambda columns: (columns.MofNCompleteColumn(), columns.TimeElapsedColumn())
        ) as bar:
            task = bar.add_task(visible(description, field=True), total=total)
            yield lambda label: bar.update(task, advance=1, description=visible(label, field=True))

    @contextmanager
    def transfer(self, description: str) -> Iterator[Callable[[int, int | None], None] | None]:
        """Yields on_bytes(done, total): a download's progress bar on stderr when progress is
        drawn (`live`), else None (the caller's lines say how far it got)."""
        if not self.live:
            yield None
            return
        with _progress_bar(
            self.err,
            lambda columns: (columns.DownloadColumn(), columns.TransferSpeedColumn(), columns.TimeRemainingColumn()),
        ) as bar:
            task = bar.add_task(visible(description, field=True), total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total or None)

    @contextmanager
    def activity(self, title: str) -> Iterator[Callable[[str], None]]:
        """Yields say(message): a live status line on stderr when progress is drawn (`live`; a
        whole-wheel download shows its percentage there), plain lines with -v otherwise."""
        if not self.live:
            yield self.detail
            return
        with self.err.status(visible(title, field=True)) as status:

            def say(message: str) -> None:
                status.update(visible(message, field=True))
                self.detail(message)

            yield say

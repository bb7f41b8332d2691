"""What `workspace`, `refresh` and `port` report (the commands print them as text or JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.maintainer.states import PatchChange, PortOutcome, SharedState


@dataclass
class PatchOutcome:
    """One patch of a workspace, refresh or port: its state and files."""

    name: str
    state: PatchChange
    files: list[str]


@dataclass
class SharedCheck:
    """A release sharing the series, and whether it still applies."""

    version: str
    state: SharedState
    detail: str = ""


@dataclass
class WorkspaceReport:
    """What `workspace` made: the directory, the commits, the patches."""

    directory: str
    set_name: str
    version: str
    series_dir: str
    files: int
    stock_commit: str
    patched_commit: str
    patches: list[str]
    shared_with: list[str] = field(default_factory=list)


@dataclass
class RefreshReport:
    """What `refresh` wrote back (or would): each patch, the releases sharing it."""

    directory: str
    version: str
    series_dir: str
    dry_run: bool
    patches: list[PatchOutcome]
    shared: list[SharedCheck] = field(default_factory=list)
    registered: str | None = None
    notes: list[str] = field(default_factory=list)
    set_name: str = ""

    @property
    def changed(self) -> bool:
        return any(p.state != PatchChange.UNCHANGED for p in self.patches)


@dataclass
class FileMerge:
    """One file of a port: its patch, and the conflicts of its three-way merge."""

    path: str
    patch: str
    conflicts: int  # 0: clean; -1: the file is missing in the new release
    present: bool = False  # clean, and the new release already has the patch's change


@dataclass
class PortReport:
    """What `port` did: each file's merge, the patches, where they went."""

    from_version: str
    to_version: str
    outcome: PortOutcome
    destination: str | None
    merges: list[FileMerge] = field(default_factory=list)
    patches: list[PatchOutcome] = field(default_factory=list)
    workspace: str | None = None
    registered: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def conflicts(self) -> list[FileMerge]:
        return [m for m in self.merges if m.conflicts]

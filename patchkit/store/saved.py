"""The saved copies, <root>/.patchkit/saved/<time>-<random>/: a user's edits kept aside where a
forced revert (or --guard) overwrites them, and the files a recovery replaces or removes with
nothing to show the interrupted transaction wrote them."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from patchkit.base.errors import BadInput, TargetError, escaped
from patchkit.base.fsutil import NO_SPACE, atomic_write, blocks, inside, no_space_hint, read_file
from patchkit.store.state import meta_dir


def _copies_dir(root: Path) -> Path:
    """A directory of its own per run under saved/, created exclusively (mkdtemp), so no run
    overwrites the copies of another; a symlinked saved/ is refused, never followed."""
    saved = meta_dir(root) / "saved"
    try:
        if not os.path.lexists(saved.parent):  # a tree no apply recorded (`fetch --dest --force`)
            saved.parent.mkdir()
        saved.mkdir(exist_ok=True)
    except OSError as exc:
        raise TargetError(f"cannot create {saved}: {exc.strerror}") from exc
    if saved.is_symlink() or not saved.is_dir() or not inside(root, saved):
        raise BadInput(f"{saved} is a symlink or not a directory; refusing to keep your edits there")
    return Path(tempfile.mkdtemp(prefix=datetime.now().strftime("%Y%m%dT%H%M%S-"), dir=saved))


def keep_copies(
    root: Path, paths: list[str], *, untouched: str = "nothing was reverted", after: tuple[int, int] = (0, 0)
) -> Path:
    """Copies of the files a forced revert (or `fetch --dest --force`) overwrites, under
    .patchkit/saved/<time>-<random>/. `untouched`: what a failure to keep them says of the tree;
    `after`: the bytes and inodes the command needs once they are kept (a full disk's hint says the sum)."""
    try:
        where = _copies_dir(root)
        for path in paths:
            # The contents (a regular file's, never through a symlink swapped in), readable by their
            # owner only: never a mode (a setuid bit) patchkit would then own.
            data = read_file(root / path, follow_symlinks=False)
            if data is None:
                raise BadInput(f"{path} is no longer a regular file; refusing to save it")
            atomic_write(where / path, data, mode=0o600)
    except OSError as exc:  # a full disk: before any tree file changed
        saved = meta_dir(root) / "saved"
        hint = no_space_hint(root, *_needs(root, paths, after)) if exc.errno in NO_SPACE else None
        raise TargetError(
            f"cannot keep copies of your edits in {saved}: {exc.strerror}; {untouched}", hint=hint
        ) from exc
    return where


def _needs(root: Path, paths: list[str], after: tuple[int, int]) -> tuple[int, int]:
    """The copies' bytes (whole blocks) and inodes, with a block and an inode for each directory
    they go in, plus what the command needs `after` them."""
    sizes = []
    for path in paths:
        try:
            sizes.append(os.lstat(root / path).st_size)
        except OSError:  # gone since: no copy to make
            sizes.append(0)
    directories = {Path(path).parent for path in paths} | {Path(".")}
    need = sum(blocks(size) for size in sizes) + blocks(1) * (len(directories) + 1) + after[0]
    return need, len(paths) + len(directories) + 1 + after[1]


def remove_if_empty(root: Path) -> None:
    """saved/ once its copies are deleted (the `rm -r` revert prints): an empty directory only,
    never followed through a symlink (rmdir takes neither a full directory nor a link)."""
    with contextlib.suppress(OSError):
        (meta_dir(root) / "saved").rmdir()


# a file system that takes no hard link (or not across a mount) gets a copy instead
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


@dataclass(eq=False, repr=False)
class Aside:
    """The files one recovery keeps aside before it replaces or removes them, in a directory of
    its own made on first use: by a rename or a hard link (no new space, so a full disk cannot
    stop it), else a copy. A failure is an OSError, raised before the file is touched."""

    root: Path
    where: Path | None = None
    paths: list[str] = field(default_factory=list)

    def keep(self, path: str, *, move: bool) -> None:
        """Keep the file at `path` (a regular file) aside: `move` it there (it is to be removed) or link it."""
        if self.where is None:
            self.where = _copies_dir(self.root)
        source, dest = self.root / path, self.where / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            if move:
                os.rename(source, dest)
            else:
                os.link(source, dest, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            data = read_file(source, follow_symlinks=False)
            if data is None:
                raise
            atomic_write(dest, data, mode=0o600)
            if move:
                source.unlink()
        self.paths.append(path)

    def said(self) -> str:
        """Where the copies are and the command that puts them back (nothing when none was kept)."""
        if self.where is None:
            return ""
        back = shlex.join(["cp", "-a", "--", f"{self.where}/.", f"{self.root}/"])
        every = f"`find {shlex.quote(str(self.where))} -type f` lists every one"
        if len(self.paths) == 1:
            return (
                f"\nnothing showed it wrote {self.paths[0]}, so a copy is kept in {self.where} (`{back}` puts it back)"
            )
        return (
            f"\nnothing showed it wrote these, so a copy is kept in {self.where} (`{back}` puts them "
            f"back):{one_a_line(self.paths, every)}"
        )


SHOWN = 20  # files named one a line, as git names them; past it, how many more and where all are


def one_a_line(paths: list[str], every: str) -> str:
    """`paths` after a colon: one on the same line; several one a line (each indented two columns),
    at most SHOWN of them, then how many more and `every`: where the whole list is (a recovery may
    name a release diff's hundreds of files)."""
    if len(paths) == 1:
        return f" {escaped(paths[0])}"
    listed = "".join(f"\n  {escaped(path)}" for path in paths[:SHOWN])
    rest = len(paths) - SHOWN
    return listed + (f"\n  and {rest} more ({every})" if rest > 0 else "")

"""The caches under $PATCHKIT_CACHE_DIR do not grow for ever: entries unused for 30 days go."""

from __future__ import annotations

import os
import time

from patchkit.base.usercache import UNUSED_DAYS, prune
from patchkit.checks.names import findings_of


def aged(path, days):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


def test_prune_removes_what_was_not_used_and_walks_once_a_day(tmp_path):
    # entries are named by their digest: prune removes nothing else (tests/test_review_fixes.py)
    old = aged(tmp_path / "c" / "ab" / f"{'a0' * 32}.json", UNUSED_DAYS + 1)
    recent = aged(tmp_path / "c" / "ab" / f"{'a1' * 32}.json", 1)
    assert prune(tmp_path / "c") == 1
    assert not old.exists() and recent.exists()
    late = aged(tmp_path / "c" / f"{'a2' * 32}.json", UNUSED_DAYS + 5)
    assert prune(tmp_path / "c") == 0 and late.exists()  # walked less than a day ago
    assert prune(tmp_path / "c", every_hours=0) == 1 and not late.exists()


def test_a_cache_hit_keeps_its_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
    source = {"m.py": b"import os\nx = undefined_name\n"}
    first = findings_of(source)
    [entry] = [p for p in (tmp_path / "pyflakes").rglob("*.json")]
    then = time.time() - (UNUSED_DAYS - 1) * 86400
    os.utime(entry, (then, then))
    import patchkit.checks.names as names

    names._SEEN.clear()  # forget the in-process copy: read the cache
    assert findings_of(source) == first
    assert time.time() - entry.stat().st_mtime < 60

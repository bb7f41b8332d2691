"""`patchkit wheel`, review 8 M1: a sha256 patchkit recorded for a wheel's file name (the wheel cache's
sealed .json, the release cache's sealed release.json) wins over any index and over any other record:
another file under that name is refused, naming both sources and what to do; a record this user's
patchkit did not seal is evidence of nothing."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest
from helpers import assert_clean_failure, pip_env, publish_wheel, record_hash, run_cli, spec_library, write_wheel
from index_server import IndexServer

from patchkit.fetch import cache as release_cache
from patchkit.wheel import stock

MIRROR = "http://mirror.example/simple/"
PLANTED = b"import sys; sys.path.insert(0, '/srv/elsewhere')\n"


@pytest.fixture
def library(tmp_path) -> Path:
    return spec_library(tmp_path)


@pytest.fixture
def index():
    server = IndexServer()
    yield server
    server.stop()


def _with_member(wheel: Path, where: Path, member: str, data: bytes) -> Path:
    """`wheel` under its own name with `member` (vllm/...) replaced, its RECORD truthful."""
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as old:
        contents = {i.filename: old.read(i) for i in old.infolist()}
    contents[member] = data
    record = next(n for n in contents if n.endswith(".dist-info/RECORD"))
    rows = [f"{n},{record_hash(d)},{len(d)}" for n, d in contents.items() if n != record]
    contents[record] = ("\n".join([*rows, f"{record},,"]) + "\n").encode()
    out = where / wheel.name
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for name, content in contents.items():
            new.writestr(name, content)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wheel_cache_record(cache: Path, wheel: Path, index: str) -> Path:
    """The wheel cache holding `wheel` with the sealed .json patchkit writes when it downloads it
    from `index` (the record an old patchkit kept of a mirror's file)."""
    root = cache / "wheels" / "0.16.0"
    root.mkdir(parents=True, exist_ok=True)
    (root / wheel.name).write_bytes(wheel.read_bytes())
    record = {
        "schema": 1,
        "project": "vllm",
        "version": "0.16.0",
        "wheel": wheel.name,
        "url": f"{index}vllm/{wheel.name}",
        "index": index,
        "sha256": _sha256(wheel),
    }
    stock._write_sidecar(root, "0.16.0", wheel.name, record)
    return root / f"{wheel.name}.json"


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join(done.stderr.split())


def test_the_wheel_cache_s_record_of_another_file_does_not_outrank_the_release_cache(tmp_path, library):
    """The review's step 2: the wheel cache recorded a mirror's file under the published name; the
    same bytes were then built, as `wheel FILE`, though the release cache holds another sha256."""
    cache = tmp_path / "cache"
    genuine = write_wheel(tmp_path / "published", published=False)
    publish_wheel(genuine, cache)  # the release cache: pypi.org's sha256 of that name
    other = _with_member(genuine, tmp_path / "mirror", "vllm/__init__.py", PLANTED)
    record = _wheel_cache_record(cache, other, MIRROR)
    env = pip_env(cache)
    for given in (other, genuine):  # two records disagree: neither file is taken on their word
        done = run_cli("wheel", given, "--out", tmp_path / "out", "--patches", library, env=env)
        assert_clean_failure(done, 2)
        said = _said(done)
        assert (
            f"the wheel cache (from {MIRROR})" in said and "the release cache (from https://pypi.org/simple/)" in said
        )
        assert _sha256(genuine)[:16] in said and _sha256(other)[:16] in said, said
        assert str(record) in said, said  # what to remove to forget the mirror's record
        assert not list(tmp_path.glob("out/*.whl"))
    record.unlink()  # the hint followed: the release cache's sha256 decides
    done = run_cli("wheel", other, "--out", tmp_path / "out", "--patches", library, env=env)
    assert_clean_failure(done, 2)
    assert "'vllm/__init__.py' differs" in _said(done), done.stderr
    done = run_cli("wheel", genuine, "--out", tmp_path / "out", "--patches", library, env=env)
    assert done.returncode == 0, done.stderr


def test_an_index_serving_another_file_under_the_release_cache_s_name_is_refused(tmp_path, library, index):
    """The review's step 1: `wheel VERSION` downloaded and built the mirror's file although the
    release cache held pypi.org's sha256 for that very name."""
    cache = tmp_path / "cache"
    genuine = write_wheel(tmp_path / "published", published=False)
    publish_wheel(genuine, cache)
    other = _with_member(genuine, tmp_path / "mirror", "vllm/__init__.py", PLANTED)
    index.publish(other.name, other.read_bytes())
    env = pip_env(cache, index.index())
    done = run_cli("wheel", "0.16.0", "--out", tmp_path / "out", "--patches", library, env=env)
    assert_clean_failure(done, 2)
    said = _said(done)
    assert f"{index.index()} serves {other.name} with sha256 {_sha256(other)[:16]}" in said, said
    assert f"the release cache (from https://pypi.org/simple/) recorded {_sha256(genuine)[:16]}" in said, said
    assert not list(tmp_path.glob("out/*.whl"))
    assert not list((cache / "wheels").rglob("*.whl")) if (cache / "wheels").exists() else True  # nothing kept


def test_offline_the_hint_names_no_cached_wheel_whose_bytes_are_not_the_recorded_ones(tmp_path, library):
    """The review's step 4: with the index down, the hint said the release cache "vouches for" the
    cached file, which was the mirror's; followed, it built."""
    cache = tmp_path / "cache"
    genuine = write_wheel(tmp_path / "published", published=False)
    publish_wheel(genuine, cache)
    other = _with_member(genuine, tmp_path / "mirror", "vllm/__init__.py", PLANTED)
    cached = cache / "wheels" / "0.16.0" / other.name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(other.read_bytes())  # a cache restored from elsewhere: its .json not ours
    (cached.parent / f"{other.name}.json").write_text('{"sha256": "restored"}')
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("wheel", "0.16.0", "--out", "dist", "--patches", library, env=pip_env(cache), cwd=work)
    assert_clean_failure(done, 4)
    assert str(cached) not in _said(done).partition("hint: ")[2], done.stderr
    cached.write_bytes(genuine.read_bytes())  # the release's own bytes: then the hint names it, and it builds
    done = run_cli("wheel", "0.16.0", "--out", "dist", "--patches", library, env=pip_env(cache), cwd=work)
    assert_clean_failure(done, 4)
    hint = _said(done).partition("hint: ")[2]
    assert str(cached) in hint, done.stderr
    command = hint[hint.index("`") + 1 : hint.rindex("`")]
    built = run_cli(*shlex.split(command)[1:], "--patches", library, env=pip_env(cache), cwd=work)
    assert built.returncode == 0, built.stderr
    assert list((work / "dist").glob("vllm-0.16.0+patchkit.demo-*.whl")), built.stderr


def test_a_release_json_patchkit_did_not_seal_is_no_evidence_of_a_published_wheel(tmp_path, library):
    """Whoever can write the cache could plant release.json with any file's sha256 and RECORD: read
    back unsealed, it holds no wheel to anything (and a save does not seal what it read)."""
    cache = tmp_path / "cache"
    planted = write_wheel(tmp_path / "planted", published=False)
    publish_wheel(planted, cache)
    state_file = cache / "releases" / "0.16.0" / "release.json"
    state = json.loads(state_file.read_text())
    state.pop("seal", None)  # as an older patchkit wrote it, or anyone
    state_file.write_text(json.dumps(state))
    done = run_cli("wheel", planted, "--out", tmp_path / "out", "--patches", library, env=pip_env(cache))
    assert_clean_failure(done, 4)
    assert "cannot hold" in _said(done), done.stderr
    assert not list(tmp_path.glob("out/*.whl"))
    loaded = release_cache.load_state(state_file.parent, "0.16.0")
    assert loaded is not None and not release_cache.state_sealed(loaded)
    release_cache.save_state(state_file.parent, loaded)  # as a fetch does after changing the entry
    again = release_cache.load_state(state_file.parent, "0.16.0")
    assert again is not None and not release_cache.state_sealed(again)

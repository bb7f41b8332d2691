"""`patchkit wheel FILE`, review 7 H1: a wheel that claims to be a release (no local label) is held
whole to the published wheel of its name, not to its own RECORD."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import (
    TAGS,
    assert_clean_failure,
    pip_env,
    publish_wheel,
    record_hash,
    run_cli,
    spec_library,
    write_wheel,
)
from index_server import IndexServer

HOSTILE_INIT = b"__path__.insert(0, '/tmp/stockvllm/vllm')\n"
INIT = "vllm/__init__.py"


@pytest.fixture
def library(tmp_path) -> Path:
    return spec_library(tmp_path)


def _rebuilt(
    stock: Path,
    where: Path,
    *,
    change: dict[str, bytes | None] | None = None,
    true_record: bool = True,
    name: str | None = None,
) -> Path:
    """`stock` with members changed (None: left out, a new name: added), its RECORD listing every
    member truthfully (`true_record`), or the stock RECORD kept as it was."""
    change = change or {}
    where.mkdir(parents=True, exist_ok=True)
    out = where / (name or stock.name)
    with zipfile.ZipFile(stock) as old:
        contents = {i.filename: old.read(i) for i in old.infolist()}
    record_name = next(n for n in contents if n.endswith(".dist-info/RECORD"))
    for member, data in change.items():
        if data is None:
            contents.pop(member)
        else:
            contents[member] = data
    if true_record:
        rows = [f"{n},{record_hash(d)},{len(d)}" for n, d in contents.items() if n != record_name]
        contents[record_name] = ("\n".join([*rows, f"{record_name},,"]) + "\n").encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for member, data in contents.items():
            new.writestr(member, data)
    return out


def _built(done, out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("*.whl")) if out.exists() else []


@pytest.mark.parametrize(
    ("change", "true_record", "said"),
    [
        # the review's repro: the stock __init__.py with a line put first, listed truthfully in its own RECORD
        ({INIT: HOSTILE_INIT + b'__version__ = "0.16.0"\n'}, True, "'vllm/__init__.py' differs"),
        # the published RECORD copied over other contents: only the contents tell (every member hashed)
        ({INIT: b'__version__ = "0.16.1"\n'}, False, "'vllm/__init__.py' differs"),
        # a member the published wheel lacks (an extension FileFinder would take), one it has left out
        ({"vllm/models/extra.py": b"import os\n"}, True, "'vllm/models/extra.py' is not in it"),
        ({"vllm/entrypoints/cli.py": None}, True, "'vllm/entrypoints/cli.py' is missing"),
        # the dist-info too: what pip installs as requirements
        (
            {
                "vllm-0.16.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\nRequires-Dist: x\n"
            },
            True,
            "'vllm-0.16.0.dist-info/METADATA' differs",
        ),
        # the WHEEL: Root-Is-Purelib decides where pip installs everything
        (
            {"vllm-0.16.0.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {TAGS}\n".encode()},
            True,
            "'vllm-0.16.0.dist-info/WHEEL' differs",
        ),
    ],
    ids=["hostile-init", "record-copied", "extra", "missing", "metadata", "wheel"],
)
def test_a_stock_named_wheel_unlike_the_published_one_is_refused_naming_the_member(
    tmp_path, library, change, true_record, said
):
    published = write_wheel(tmp_path / "published")  # the release cache holds it (an earlier fetch)
    stock = _rebuilt(published, tmp_path / "in", change=change, true_record=true_record)
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 2)
    message = " ".join(done.stderr.split())
    assert "is not vLLM 0.16.0's published wheel of that name" in message, done.stderr
    assert said in message, done.stderr
    assert f"hint: `patchkit wheel --patches {library} 0.16.0` downloads the release's own wheel" in message, (
        done.stderr
    )
    assert _built(done, out) == []


def test_the_published_wheel_re_zipped_with_the_same_members_builds(tmp_path, library):
    """Every member hashed as published, the file another zip of them (another compression)."""
    published = write_wheel(tmp_path / "published")
    stock = _rebuilt(published, tmp_path / "in", true_record=False)
    assert stock.read_bytes() != published.read_bytes()
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_labelled_build_is_held_to_its_own_record_only(tmp_path, library):
    """0.16.0+site is another build, not the release: it builds as before, and -v says why."""
    own = write_wheel(tmp_path / "own", version="0.16.0+site", published=False)
    done = run_cli("wheel", own, "-v", "--out", tmp_path / "out", "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a build of its own, held to its own RECORD only" in " ".join(done.stderr.split()), done.stderr


@pytest.fixture
def index(tmp_path):
    server = IndexServer()
    yield server
    server.stop()


def _index_env(tmp_path: Path, index: IndexServer) -> dict[str, str]:
    """pip names the fake index only; the cache is empty."""
    return pip_env(tmp_path / "empty-cache", index.index())


def test_without_a_cache_the_index_s_file_of_that_name_is_the_reference(tmp_path, library, index):
    """The index's sha256 of the file name: the very file builds; another is refused by name, its
    published RECORD read from the index by range requests."""
    published = write_wheel(tmp_path / "published", published=False)
    index.publish(published.name, published.read_bytes())
    env = _index_env(tmp_path, index)
    done = run_cli("wheel", published, "--out", tmp_path / "out", "--patches", library, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(rng for _command, _path, rng in index.log), index.log  # the sha256 told: no RECORD read

    hostile = _rebuilt(published, tmp_path / "in", change={INIT: HOSTILE_INIT})
    done = run_cli("wheel", hostile, "--out", tmp_path / "out2", "--patches", library, env=env)
    assert_clean_failure(done, 2)
    message = " ".join(done.stderr.split())
    assert f"published wheel of that name (on {index.index()}): 'vllm/__init__.py' differs" in message, done.stderr
    assert _built(done, tmp_path / "out2") == []


def test_a_file_name_the_index_lacks_is_no_published_wheel(tmp_path, library, index):
    published = write_wheel(tmp_path / "published", published=False)
    index.publish(published.name.replace("x86_64", "aarch64"), published.read_bytes())
    done = run_cli("wheel", published, "--out", tmp_path / "out", "--patches", library, env=_index_env(tmp_path, index))
    assert_clean_failure(done, 4)
    message = " ".join(done.stderr.split())
    assert f"has no file {published.name}: it is not a published wheel of vLLM 0.16.0" in message, done.stderr


def test_with_no_index_patchkit_reads_and_nothing_cached_it_is_refused_with_what_to_do(tmp_path, library):
    """The review's path: pip takes vllm from a file:// mirror only. Nothing to hold the wheel to."""
    stock = write_wheel(tmp_path / "in", published=False)
    env = pip_env(tmp_path / "empty-cache", (tmp_path / "mirror").as_uri() + "/")
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, env=env)
    assert_clean_failure(done, 4)
    message = " ".join(done.stderr.split())
    assert f"cannot hold {stock.name} to vLLM 0.16.0's published wheel" in message, done.stderr
    assert "name an http(s) index in PIP_INDEX_URL" in message and "`patchkit fetch 0.16.0`" in message, done.stderr
    assert _built(done, tmp_path / "out") == []


def test_the_release_cache_of_another_file_name_is_no_reference(tmp_path, library, index):
    """The release cache took the x86_64 wheel: an aarch64 file is held to the index's aarch64 file."""
    cached = write_wheel(tmp_path / "published")
    publish_wheel(cached, tmp_path / "empty-cache")
    other = _rebuilt(cached, tmp_path / "in", name=cached.name.replace("x86_64", "aarch64"))
    index.publish(other.name, other.read_bytes())
    done = run_cli("wheel", other, "--out", tmp_path / "out", "--patches", library, env=_index_env(tmp_path, index))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_version_without_a_series_asks_no_index(tmp_path, library, index):
    """Exit 3 is known from the wheel's version: the published wheel is not looked up for it."""
    stock = write_wheel(tmp_path / "in", version="0.10.2", published=False)
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, env=_index_env(tmp_path, index))
    assert_clean_failure(done, 3)
    assert index.log == []


@pytest.mark.parametrize(
    ("wheel_file", "code"),
    [
        (b"Wheel-Version: 2.0\nRoot-Is-Purelib: false\n", 2),
        (b"Root-Is-Purelib: false\n", 2),  # no Wheel-Version
        (b"Wheel-Version: one\nRoot-Is-Purelib: false\n", 2),
        (None, 2),  # no WHEEL at all
        (b"Wheel-Version: 1.9\nRoot-Is-Purelib: false\n", 0),  # pip installs it, with a warning
        (b"Wheel-Version: 1.0\nWheel-Version: 2.0\nRoot-Is-Purelib: false\n", 0),  # pip reads the first
    ],
    ids=["2.0", "none", "not-a-number", "no-WHEEL", "1.9", "first-of-two"],
)
def test_a_wheel_file_pip_refuses_is_refused(tmp_path, library, wheel_file, code):
    """review 7 L2: a WHEEL with another Wheel-Version built a wheel pip refuses at image build."""
    own = write_wheel(tmp_path / "own", version="0.16.0+site", published=False)
    stock = _rebuilt(own, tmp_path / "in", change={"vllm-0.16.0+site.dist-info/WHEEL": wheel_file})
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_clean_failure(done, code)
    if code:
        assert "pip installs 1.x" in done.stderr or "which pip needs to install it" in done.stderr, done.stderr
        assert _built(done, tmp_path / "out") == []


def _followed(hint_line: str, cwd: Path, env: dict[str, str], only_first: bool = False) -> None:
    """Each backquoted command of a hint (or the first), run by sh as printed, in `cwd`."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    commands = re.findall(r"`([^`]+)`", hint_line)
    for command in commands[:1] if only_first else commands:
        done = subprocess.run(
            ["sh", "-c", command], cwd=cwd, env={**os.environ, **env, "PATH": path}, capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stdout + done.stderr)


def test_the_pip_download_hint_s_glob_takes_no_wheel_of_another_platform(tmp_path, library):
    """review 7 L3: an earlier `--platform` run's wheel in the hint's directory made its glob two files."""
    x86 = write_wheel(tmp_path / "wheels")
    arm = tmp_path / "wheels" / x86.name.replace("x86_64", "aarch64")
    shutil.copy(x86, arm)
    env = {
        "PATCHKIT_CACHE_DIR": str(tmp_path / "cache"),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": str(tmp_path / "wheels"),
        "PIP_NO_INDEX": "1",
    }
    publish_wheel(x86, tmp_path / "cache")  # the release's RECORD, cached by an earlier fetch
    work = tmp_path / "work"
    work.mkdir()
    for platform in (["--platform", "manylinux_2_31_aarch64"], []):
        done = run_cli("wheel", "0.16.0", *platform, "--patches", library, env=env, cwd=work)
        assert_clean_failure(done, 4)
        hint = " ".join(done.stderr.split()).partition("hint: ")[2]
        _followed(hint, work, env, only_first=bool(platform))  # the other platform's wheel: downloaded only
    assert [p.name for p in work.glob("vllm-0.16.0+patchkit.demo-*.whl")] == [
        x86.name.replace("0.16.0", "0.16.0+patchkit.demo")
    ]


def test_offline_the_hint_names_the_cached_wheel_the_release_cache_vouches_for(tmp_path, library):
    """review 6 L11: a cache restored from elsewhere (its .json sealed by another key), no index: the
    pip-download hint failed there too; the cached file builds, held to the release cache."""
    cache = tmp_path / "restored-cache"
    stock = write_wheel(tmp_path / "in", published=False)
    publish_wheel(stock, cache)  # the release cache names that wheel (an earlier fetch)
    cached = cache / "wheels" / "0.16.0" / stock.name
    cached.parent.mkdir(parents=True)
    shutil.copy(stock, cached)
    (cached.parent / f"{stock.name}.json").write_text('{"sha256": "forged elsewhere"}')
    env = pip_env(cache)
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("wheel", "0.16.0", "--out", "dist", "--patches", library, env=env, cwd=work)
    assert_clean_failure(done, 4)
    hint = " ".join(done.stderr.split()).partition("hint: ")[2]
    assert str(cached) in hint and "pip download" not in hint, done.stderr
    _followed(hint, work, env)
    assert [p.name for p in (work / "dist").glob("vllm-0.16.0+patchkit.demo-*.whl")], done.stderr


@pytest.mark.parametrize("platform", ["", " ", "manylinux x86_64"])
def test_a_platform_that_is_no_tag_is_bad_input_not_no_wheel_installable(tmp_path, library, platform):
    """Review 15 L7: `wheel 0.16.0 --platform ''` exited 4 "no vllm 0.16.0 wheel installable on this
    machine", though the default platform has one: the empty value is the user's to fix."""
    env = {"PATCHKIT_CACHE_DIR": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    done = run_cli("wheel", "0.16.0", "--platform", platform, "--patches", library, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--platform {platform!r} is not a platform tag" in done.stderr
    assert not list(tmp_path.glob("*.whl"))

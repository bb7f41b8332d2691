"""patchkit as a user installs it: wheel and sdist built with `python -m build`, each installed into a
fresh venv, every command run from a temporary directory outside the checkout.

Marker `release`: building needs the package index (hatchling) and the commands read a real release.
One build and one venv per kind of install for the whole module (a few minutes in all).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.release

CHECKOUT = Path(__file__).resolve().parent.parent
LIBRARY = CHECKOUT / "patches"
VERSION = "0.16.0"
RELEASED = ("wheel", "sdist")  # pip install <wheel>, pip install <sdist> (a wheel built from the sdist)


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path  # built from the sdist, as `python -m build` does
    tree_wheel: Path  # built straight from the checkout, as `pip install .` does


@dataclass(frozen=True)
class Install:
    venv: Path
    workdir: Path  # a temporary working directory outside the checkout

    def run(
        self, *args: str | Path, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """A command of this venv (bin/ first on PATH), as a user's shell would run it."""
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("PATCHKIT_LIBRARY", "PYTHONPATH", "VIRTUAL_ENV")},
            **(env or {}),
        }
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            [str(a) for a in args], cwd=cwd or self.workdir, env=env, capture_output=True, text=True, check=False
        )
        if check:
            assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def patchkit(self, *args: str | Path, **options) -> subprocess.CompletedProcess:
        return self.run(self.venv / "bin" / "patchkit", *args, **options)


def library_files() -> dict[str, bytes]:
    """Every file of the repository's library (patches/), by its path under patches/."""
    return {
        p.relative_to(LIBRARY).as_posix(): p.read_bytes()
        for p in sorted(LIBRARY.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def build(out: Path, *options: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "build", *options, "--outdir", str(out), str(CHECKOUT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    build(out)
    build(out / "tree", "--wheel")
    (sdist,) = out.glob("vllm_patchkit-*.tar.gz")  # not "patchkit": an unrelated project's name on PyPI
    (wheel,) = out.glob("vllm_patchkit-*.whl")
    (tree_wheel,) = (out / "tree").glob("vllm_patchkit-*.whl")
    return Dist(sdist, wheel, tree_wheel)


@pytest.fixture(scope="module")
def installs(tmp_path_factory, dist):
    """kind -> Install, each venv created on first use and shared by the module's tests."""
    made: dict[str, Install] = {}
    sources = {"wheel": dist.tree_wheel, "sdist": dist.sdist, "editable": None}

    def get(kind: str) -> Install:
        if kind not in made:
            root = tmp_path_factory.mktemp(f"install-{kind}")
            venv, workdir = root / "venv", root / "work"
            workdir.mkdir()
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            install = Install(venv, workdir)
            source = sources[kind]
            what = ["-e", str(CHECKOUT)] if source is None else [str(source)]
            install.run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", *what)
            made[kind] = install
        return made[kind]

    return get


def test_the_wheel_carries_the_library_byte_for_byte(dist):
    expected = library_files()
    assert {
        "eagle3/set.toml",
        "eagle3/contract.toml",
        "eagle3/probe.py",
        "eagle3/0.16.0/series",
        "library.toml",
        "deepseek-tool-calls/behaviour.py",
        "kimi-k2-tool-calls/set.toml",
    } <= set(expected)
    with zipfile.ZipFile(dist.wheel) as wheel:
        packaged = {
            name.removeprefix("patchkit/_library/"): wheel.read(name)
            for name in wheel.namelist()
            if name.startswith("patchkit/_library/")
        }
        names = wheel.namelist()
    assert packaged == expected
    assert [n for n in names if not n.startswith(("patchkit/", "vllm_patchkit-"))] == []  # no tests/, patches/, ...
    assert "patchkit/_docs/README.md" in names and "patchkit/_docs/docs/using.md" in names  # a pip user's docs
    assert "patchkit/cli/main.py" in names and "patchkit/cli/commands/listing.py" in names
    assert "patchkit/py.typed" in names  # PEP 561: type checkers read patchkit's annotations
    workers = {f"patchkit/_target/{p.name}" for p in (CHECKOUT / "patchkit" / "_target").glob("*.py")}
    assert "patchkit/_target/import_probe.py" in workers and workers <= set(names)  # run by path in the target
    with zipfile.ZipFile(dist.tree_wheel) as tree_wheel:
        assert sorted(tree_wheel.namelist()) == sorted(names)


def test_every_file_the_wheels_docs_link_to_is_in_the_wheel(dist):
    """newuser16 6i: README linked to CONTRIBUTING.md and bench/README.md, and named
    examples/Dockerfile, none of which the wheel carried: a pip user's links led nowhere."""
    with zipfile.ZipFile(dist.wheel) as wheel:
        docs = {n.removeprefix("patchkit/_docs/"): n for n in wheel.namelist() if n.startswith("patchkit/_docs/")}
        texts = {name: wheel.read(member).decode() for name, member in docs.items() if name.endswith(".md")}
    assert {"CONTRIBUTING.md", "bench/README.md", "examples/Dockerfile"} <= set(docs), sorted(docs)
    for name, text in texts.items():
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):  # a relative link, its anchor aside
            target = os.path.normpath(os.path.join(os.path.dirname(name), link))
            assert target in docs, (name, link)


def test_each_series_in_the_wheel_matches_its_patches(dist):
    with zipfile.ZipFile(dist.wheel) as wheel:
        members = {n: wheel.read(n) for n in wheel.namelist() if n.startswith("patchkit/_library/")}
    series = [n for n in members if n.endswith("/series")]
    assert len(series) == len([p for p in LIBRARY.rglob("series")])
    checked = 0
    for name in series:
        folder = name.rsplit("/", 1)[0]
        for line in members[name].decode().splitlines():
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            patch, digest = fields[0], fields[1].removeprefix("sha256:")
            assert hashlib.sha256(members[f"{folder}/{patch}"]).hexdigest() == digest, f"{folder}/{patch}"
            checked += 1
    assert checked >= len(series)


def test_the_sdist_keeps_the_repository_layout(dist):
    with tarfile.open(dist.sdist) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        files = {m.name.removeprefix(f"{top}/"): m for m in sdist.getmembers() if m.isfile()}
        library = {
            name.removeprefix("patches/"): sdist.extractfile(member).read()  # type: ignore[union-attr]
            for name, member in files.items()
            if name.startswith("patches/")
        }
    assert library == library_files()
    assert {
        "pyproject.toml",
        "hatch_build.py",
        "README.md",
        "docs/using.md",
        "CONTRIBUTING.md",
        "patchkit/cli/main.py",
    } <= set(files)


@pytest.mark.parametrize("kind", [*RELEASED, "editable"])
def test_the_installed_patchkit_finds_its_library_from_anywhere(installs, kind):
    install = installs(kind)
    where = install.run("python", "-c", "import patchkit; print(patchkit.__file__)").stdout.strip()
    listing = json.loads(install.patchkit("list", "--format", "json").stdout)
    library = Path(listing["library"]["path"])
    assert listing["library"]["source"] == "installed"
    assert [s["name"] for s in listing["sets"]] == ["eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls"]
    states = {p["state"] for s in listing["sets"] for r in s["releases"] for p in r["patches"]}
    assert states == {"ok"}
    if kind == "editable":
        assert Path(where).is_relative_to(CHECKOUT) and library == LIBRARY
    else:
        assert not Path(where).is_relative_to(CHECKOUT), where
        assert library.is_relative_to(install.venv) and library.name == "_library"
    assert "library  " in install.patchkit("list").stdout


@pytest.mark.parametrize("kind", [*RELEASED, "editable"])
def test_help_names_the_docs_an_install_carries(installs, kind):
    """newuser15 9: a pip user had no docs/ (the README's links led nowhere) and --help named none."""
    install = installs(kind)
    lines = install.patchkit("--help").stdout.splitlines()
    (at,) = [i for i, x in enumerate(lines) if x.startswith("Docs")]
    line = lines[at]  # the path on the line, or alone on the next when the line would not fit (words28b)
    readme = Path(
        line.removeprefix("Docs: ").partition(" (")[0] if line.startswith("Docs: ") else lines[at + 1].strip()
    )
    assert readme.is_file() and (readme.parent / "docs" / "using.md").is_file(), line
    assert readme.read_bytes() == (CHECKOUT / "README.md").read_bytes()
    assert readme.is_relative_to(CHECKOUT if kind == "editable" else install.venv), line
    shown = install.run("python", "-m", "pip", "show", "vllm-patchkit").stdout  # the distribution's own name
    assert "Name: vllm-patchkit" in shown and "Version: " in shown


@pytest.mark.parametrize("kind", RELEASED)
def test_the_library_order_holds_in_an_install(installs, tmp_path, kind):
    install = installs(kind)
    other = tmp_path / "other"
    shutil.copytree(LIBRARY, other)
    chosen = install.patchkit("list", "--format", "json", env={"PATCHKIT_LIBRARY": str(other)})
    assert json.loads(chosen.stdout)["library"] == {"path": str(other), "source": "PATCHKIT_LIBRARY"}
    chosen = install.patchkit("list", "--format", "json", "--patches", LIBRARY, env={"PATCHKIT_LIBRARY": str(other)})
    assert json.loads(chosen.stdout)["library"] == {"path": str(LIBRARY), "source": "--patches"}
    missing = install.patchkit("list", env={"PATCHKIT_LIBRARY": str(tmp_path / "none")}, check=False)
    assert missing.returncode == 2 and "PATCHKIT_LIBRARY=" in missing.stderr


@pytest.mark.parametrize("kind", RELEASED)
def test_status_apply_verify_revert_on_a_fetched_release(installs, kind):
    install = installs(kind)
    stock, tree = install.workdir / f"stock-{VERSION}", install.workdir / f"vllm-{VERSION}"
    install.patchkit("fetch", VERSION, "--dest", stock)
    install.patchkit("fetch", VERSION, "--dest", tree)

    status = json.loads(install.patchkit("status", "--target", tree, "--format", "json").stdout)
    assert status["state"] == "not-applied" and {s["vllm_version"] for s in status["sets"]} == {VERSION}
    assert status["library"]["source"] == "installed" and status["library"]["path"].startswith(str(install.venv))
    install.patchkit("apply", "--dry-run", "--target", tree)
    install.patchkit("apply", "--target", tree)
    assert json.loads(install.patchkit("status", "--target", tree, "--format", "json").stdout)["state"] == "applied"
    install.patchkit("verify", "--target", tree)
    install.patchkit("revert", "--target", tree)
    assert install.run("diff", "-r", "--exclude=.patchkit", stock, tree).returncode == 0


@pytest.mark.parametrize("kind", RELEASED)
def test_verify_a_release_writes_junit(installs, kind):
    install = installs(kind)
    done = install.patchkit("verify", "--vllm-version", VERSION, "--format", "junit", "--no-result-cache")
    root = ElementTree.fromstring(done.stdout)
    cases = list(root.iter("testcase"))
    names = ["eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls"]  # a case per set of the library
    assert [case.get("name", "") for case in cases] == [f"{name}: vllm {VERSION}" for name in names]
    assert all("reverted byte-identical" in (case.findtext("system-out") or "") for case in cases)
    assert not list(root.iter("failure")) and not list(root.iter("error"))


def test_python_m_patchkit_in_the_checkout_reads_patches_in_place(installs):
    """`python -m patchkit` with the checkout as working directory runs the checkout's code and library."""
    install = installs("wheel")
    listing = json.loads(install.run("python", "-m", "patchkit", "list", "--format", "json", cwd=CHECKOUT).stdout)
    assert listing["library"] == {"path": str(LIBRARY), "source": "installed"}

"""_target/locate.py's plain lookup: the version and root importlib.metadata would give, found without importing
it (~45 ms of every --python command), and importlib.metadata's own answer wherever the lookup is not plain."""

from __future__ import annotations

import email
import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit._target import locate

LOCATE = Path(locate.__file__)
VERSIONS = Path.home() / ".pyenv" / "versions"
# CPython 3.10-3.13 found here besides this one: the lookup is written for theirs, each is compared
OTHERS = sorted(p for p in VERSIONS.glob("3.1[0-3].*/bin/python") if p.is_file()) if VERSIONS.is_dir() else []
PYTHONS = [Path(sys.executable), *OTHERS]


def dist(site: Path, name: str, metadata: bytes | None = b"Name: vllm\nVersion: 0.16.0\n") -> Path:
    info = site / name
    info.mkdir(parents=True)
    if metadata is not None:
        (info / "METADATA").write_bytes(metadata)
    return info


def layouts(tmp: Path) -> dict[str, tuple[str, list[str], bool]]:
    """name -> (package, sys.path entries, whether the lookup is plain there) on trees written under `tmp`."""
    cases: dict[str, tuple[str, list[str], bool]] = {}

    def case(name: str, package: str = "vllm", plain: bool = True) -> Path:
        site = tmp / name / "site"
        site.mkdir(parents=True)
        cases[name] = (package, [str(tmp / name / "missing"), str(site)], plain)
        return site

    dist(case("plain"), "vllm-0.16.0.dist-info")
    site = case("two-in-one-directory")  # listdir's order decides, for both
    for version in ("0.15.0", "0.16.0", "0.17.0"):
        dist(site, f"vllm-{version}.dist-info", f"Version: {version}\n".encode())
    dist(case("case-and-separators", "My_Pkg"), "my..pkg-1.0.egg-info", b"Metadata-Version: 2.1\nversion:  1.0 \t\n")
    dist(case("not-that-name"), "vllm_extra-1.0.dist-info")
    dist(case("crlf"), "vllm.dist-info", b"Name: vllm\r\nVersion: 0.16.0\r\n\r\nVersion: 9\r\n")
    dist(case("lone-cr"), "vllm.dist-info", b"Name: vllm\rVersion: 0.16.0\r")
    dist(case("first-line-continued"), "vllm.dist-info", b" x\n:empty name\nVersion:0.16.0")
    dist(case("folded", plain=False), "vllm.dist-info", b"Version: 0.16\n .0\n")
    dist(case("from-line", plain=False), "vllm.dist-info", b"From here\nVersion: 0.16.0\n")
    dist(case("no-version", plain=False), "vllm.dist-info", b"Name: vllm\n\nVersion: 1\n")
    dist(case("latin-1", plain=False), "vllm.dist-info", b"Name: vll\xe9\nVersion: 0.16.0\n")
    dist(case("pkg-info", plain=False), "vllm.egg-info", None).joinpath("PKG-INFO").write_text("Version: 1\n")
    case("none")
    site = case("zip", plain=False)
    with zipfile.ZipFile(site / "lib.zip", "w") as z:
        z.writestr("vllm-1.0.dist-info/METADATA", "Version: 1.0\n")
    cases["zip"] = ("vllm", [str(site / "lib.zip")], False)
    site = case("relative", plain=False)
    dist(site, "vllm-1.0.dist-info")
    cases["relative"] = ("vllm", [os.path.relpath(site)], False)
    return cases


# Run by each interpreter: the plain lookup and importlib.metadata's (the path finder's) on each layout.
COMPARE = """
import importlib.metadata as md, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("locate", sys.argv[1])
locate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locate)
out = {}
for name, (package, paths, _) in json.loads(sys.argv[2]).items():
    found = next(iter(md.MetadataPathFinder.find_distributions(md.DistributionFinder.Context(name=package, path=paths))), None)
    try:
        expected = {} if found is None else {"version": found.version, "dist_root": str(found.locate_file(""))}
    except Exception as exc:
        expected = {"raised": type(exc).__name__}
    out[name] = {"plain": locate._plain_lookup(package, paths), "expected": expected}
print(json.dumps(out))
"""


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p.parent.parent.name)
def test_the_plain_lookup_answers_as_importlib_metadata_where_it_answers(python, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = layouts(tmp_path)
    done = subprocess.run(
        [str(python), "-I", "-c", COMPARE, str(LOCATE), json.dumps(cases)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    for name, (_, _, plain) in cases.items():
        answer = answers[name]
        assert answer["plain"] == (answer["expected"] if plain else None), name
    assert answers["two-in-one-directory"]["plain"]["version"] in ("0.15.0", "0.16.0", "0.17.0")
    assert answers["case-and-separators"]["plain"]["version"] == "1.0 \t"
    assert answers["none"]["plain"] == {} and answers["not-that-name"]["plain"] == {}


def run_locate(python: Path, env: dict[str, str], *options: str) -> tuple[dict, str]:
    """locate.py run by `python` as run_worker runs it, with -X importtime: (its answer, its import lines)."""
    answer = Path(env["ANSWER"])
    command = [str(python), "-B", "-X", "importtime", *options, str(LOCATE), str(answer)]
    done = subprocess.run(command, input='{"package": "vllm"}', capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(answer.read_text()), done.stderr


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p.parent.parent.name)
def test_locate_of_a_plain_install_never_imports_importlib_metadata(python, tmp_path):
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    dist(site, "vllm-0.16.0.dist-info")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "ANSWER": str(tmp_path / "answer.json")}
    answer, imports = run_locate(python, env)
    assert (answer["version"], answer["dist_root"]) == ("0.16.0", str(site))
    assert answer["package_dir"] == str(site / "vllm")
    assert "importlib.metadata" not in imports


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p.parent.parent.name)
def test_locate_imports_no_module_for_its_annotations_alone(python, tmp_path):
    """typing (~4.5 ms of each run: every --python command asks it) is no import of locate.py's: its
    annotations are never evaluated. What the interpreter's own start-up imports is not locate's."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    dist(site, "vllm-0.16.0.dist-info")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "ANSWER": str(tmp_path / "answer.json")}
    answer, imports = run_locate(python, env)
    assert answer["version"] == "0.16.0"
    bare = subprocess.run(
        [str(python), "-B", "-X", "importtime", "-c", "pass"], capture_output=True, text=True, env=env, cwd="/"
    )
    start_up = {line.rpartition("|")[2].strip() for line in bare.stderr.splitlines()}
    own = {line.rpartition("|")[2].strip() for line in imports.splitlines()} - start_up
    assert "json" in own and "typing" not in own, sorted(own)


def test_a_finder_that_finds_distributions_is_asked_as_importlib_metadata_asks_it(tmp_path):
    """An editable install's finder, or any on sys.meta_path that declares find_distributions, may name
    another distribution than the directories do: importlib.metadata answers, with that finder's."""
    site = tmp_path / "site"
    dist(site, "vllm-0.16.0.dist-info")
    other = dist(tmp_path / "elsewhere", "vllm-9.9.dist-info", b"Version: 9.9\n")
    (site / "sitecustomize.py").write_text(
        "import importlib.metadata as md, sys\n"
        "class Finder:\n"
        "    def find_spec(self, *args):\n"
        "        return None\n"
        "    def find_distributions(self, context=None):\n"
        f"        return [md.PathDistribution(__import__('pathlib').Path({str(other)!r}))]\n"
        "sys.meta_path.insert(0, Finder())\n"
        "del sys.modules['importlib.metadata']\n"  # not seen imported: the finder alone says the lookup is not plain
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "ANSWER": str(tmp_path / "answer.json")}
    answer, _ = run_locate(Path(sys.executable), env)
    assert (answer["version"], answer["dist_root"]) == ("9.9", str(other.parent))


def test_importlib_metadata_imported_at_start_up_answers(tmp_path):
    """A .pth line or sitecustomize that imported importlib.metadata may have changed it: it answers."""
    site = tmp_path / "site"
    dist(site, "vllm-0.16.0.dist-info")
    (site / "sitecustomize.py").write_text(
        "import importlib.metadata as md\nmd.PathDistribution.version = property(lambda self: 'patched')\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "ANSWER": str(tmp_path / "answer.json")}
    answer, _ = run_locate(Path(sys.executable), env)
    assert answer["version"] == "patched"


texts = st.lists(
    st.sampled_from(["Version", "version", "Name", "From ", "From:", " ", "\t", ":", " x", "1.0", "é", "\n", "\r"]),
    max_size=14,
).map("".join)


@settings(max_examples=examples(400), deadline=None)
@given(texts)
def test_a_plain_version_is_the_one_importlib_metadata_reads(tmp_path_factory, text):
    info = tmp_path_factory.mktemp("site") / "vllm-1.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(text.encode())
    plain = locate._plain_version(str(info))
    if plain is not None:
        assert plain == importlib.metadata.PathDistribution(info).version
        header = email.message_from_string(text.replace("\r\n", "\n").replace("\r", "\n"))
        assert plain == header["Version"]

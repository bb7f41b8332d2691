"""examples/Dockerfile without Docker: its `patchkit wheel` step (against a local index serving a
small stock wheel) and its `pip install --no-deps` step (into a temporary prefix) run as written,
and the tree pip leaves is one patchkit calls applied, verifies, and reverts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import make_venv

from helpers import (  # isort: skip
    MODEL_PY,
    STOCK_FILES,
    make_patch,
    patched_spec,
    run_cli,
    snapshot,
    write_library,
    write_tree,
    write_wheel,
)
from index_server import IndexServer, isolate_cache  # isort: skip

DOCKERFILE = Path(__file__).parent.parent / "examples" / "Dockerfile"
VERSION = "0.14.1"
MODEL_PATCHED = MODEL_PY + "\n    def aux_layers(self):\n        return (1, 3)\n"


def dockerfile_steps() -> tuple[dict[str, str], list[str]]:
    """ARG defaults and RUN commands, in order (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    args, runs = {}, []
    for line in text.splitlines():
        words = line.split(maxsplit=1)
        if words[:1] == ["ARG"] and "=" in words[1]:
            name, _, value = words[1].partition("=")
            args[name] = value
        elif words[:1] == ["RUN"]:
            runs.append(words[1])
    return args, runs


def step(runs: list[str], marker: str) -> str:
    found = [r for r in runs if marker in r]
    assert len(found) == 1, f"examples/Dockerfile has no single RUN step with {marker!r}: {runs}"
    return found[0]


def test_the_dockerfile_pins_what_the_readme_says():
    args, runs = dockerfile_steps()
    assert args == {"VLLM_VERSION": "0.16.0", "PATCHKIT_SET": "", "PATCHKIT": "."}
    assert "--no-deps" in step(runs, "pip install --no-deps")
    assert "--out /wheels" in step(runs, "patchkit wheel")
    assert "COPY --from=patched-wheel /wheels/ /wheels/" in DOCKERFILE.read_text()


@pytest.fixture
def stock_index(tmp_path, monkeypatch):
    """A local index serving vllm==VERSION's stock wheel, and a library whose demo set patches it."""
    tree = write_tree(tmp_path / "stock", VERSION)
    patch = make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec(), "vllm/models/model.py": MODEL_PATCHED})
    library = write_library(tmp_path / "lib", {VERSION: [patch]}, name="demo")
    wheel = write_wheel(tmp_path / "stock-wheel", VERSION)
    server = IndexServer()
    server.publish(wheel.name, wheel.read_bytes())
    isolate_cache(tmp_path, monkeypatch)
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PATCHKIT_LIBRARY": str(library),
        "PATCHKIT_CACHE_DIR": os.environ["PATCHKIT_CACHE_DIR"],
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": server.index(),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    yield env
    server.stop()


def run_step(command: str, env: dict[str, str], args: dict[str, str] | None = None) -> None:
    """`command` as a RUN step runs it: the build's ARGs are its environment, sh expands them."""
    done = subprocess.run(
        ["sh", "-euc", command], env={**os.environ, **env, **(args or {})}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"


def test_the_dockerfile_steps_build_and_install_a_patched_vllm(tmp_path, stock_index):
    args, runs = dockerfile_steps()
    wheels, prefix = tmp_path / "wheels", tmp_path / "prefix"
    values = {**args, "VLLM_VERSION": VERSION, "PATCHKIT_SET": "demo"}

    def as_here(command: str) -> str:
        return command.replace("/wheels", str(wheels))

    run_step(as_here(step(runs, "patchkit wheel")), stock_index, values)
    assert [p.name for p in wheels.iterdir()] == [f"vllm-{VERSION}+patchkit.demo-cp38-abi3-manylinux_2_31_x86_64.whl"]
    install = as_here(step(runs, "pip install --no-deps")).replace("pip install", f"pip install --prefix {prefix}", 1)
    run_step(install, stock_index)
    assert not wheels.exists()  # the step cleans up after itself

    site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))
    assert (site / f"vllm-{VERSION}+patchkit.demo.dist-info" / "patchkit.json").is_file()
    env = {k: v for k, v in stock_index.items() if k != "PATH"}
    status = json.loads(run_cli("status", "--target", site, "--format", "json", env=env).stdout)
    assert status["state"] == "applied" and status["vllm_version"] == f"{VERSION}+patchkit.demo"
    verified = run_cli("verify", "--target", site, "--no-import", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # revert gets the stock files back from the index's wheel; pip's console script is untouched
    reverted = run_cli("revert", "--target", site, env=env)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    stock = {p: d for p, d in STOCK_FILES.items() if p.endswith(".py")}
    assert {p: d for p, d in snapshot(site).items() if p in stock} == stock
    assert (prefix / "bin" / "vllm").is_file()


def test_pip_uninstall_still_removes_a_reverted_install(tmp_path, stock_index):
    """revert leaves the dist-info as pip installed it: pip uninstall removes every file, reverted or not."""
    _args, runs = dockerfile_steps()
    wheels = tmp_path / "wheels"
    build = step(runs, "patchkit wheel").replace("/wheels", str(wheels))
    run_step(build, stock_index, {"VLLM_VERSION": VERSION, "PATCHKIT_SET": "demo"})
    venv = tmp_path / "venv"
    make_venv(venv)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    wheel = next(wheels.iterdir())
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", wheel],
        check=True,
        capture_output=True,
        env={**os.environ, **stock_index},
    )
    env = {k: v for k, v in stock_index.items() if k != "PATH"}
    reverted = run_cli("revert", "--python", python, env=env)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    assert (site / "vllm").is_dir()
    done = subprocess.run([*pip, "uninstall", "-y", "vllm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if "vllm" in p.as_posix())
    assert left == []


def test_the_dockerfile_by_default_builds_a_wheel_status_calls_applied(tmp_path, stock_index):
    """Its defaults build every set of the release, so `status` (which judges every set covering the
    version) says applied on the image, as the file's comment says; one set would leave it FAILED."""
    tree = write_tree(
        tmp_path / "stock-tools", VERSION, {"vllm/entrypoints/cli.py": STOCK_FILES["vllm/entrypoints/cli.py"]}
    )
    patch = make_patch(tmp_path, tree, {"vllm/entrypoints/cli.py": "def main():\n    print('vllm, patched')\n"})
    write_library(Path(stock_index["PATCHKIT_LIBRARY"]), {VERSION: [patch]}, name="tools")
    args, runs = dockerfile_steps()
    wheels, prefix = tmp_path / "wheels", tmp_path / "prefix"
    run_step(
        step(runs, "patchkit wheel").replace("/wheels", str(wheels)), stock_index, {**args, "VLLM_VERSION": VERSION}
    )
    install = step(runs, "pip install --no-deps").replace("/wheels", str(wheels))
    run_step(install.replace("pip install", f"pip install --prefix {prefix}", 1), stock_index)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))
    env = {k: v for k, v in stock_index.items() if k != "PATH"}
    status = run_cli("status", "--target", site, "--format", "json", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["vllm_version"] == f"{VERSION}+patchkit.demo.tools"


def test_the_dockerfile_installs_patchkit_from_a_checkout_or_its_wheel(tmp_path):
    """The PATCHKIT build-arg: `.` installs the checkout COPY put in /src/patchkit, a file name the
    wheel put beside the Dockerfile (a pip or pipx user's build, no clone)."""
    _args, runs = dockerfile_steps()
    command = step(runs, "pip install --no-cache-dir")
    said = {}
    for value in (".", "vllm_patchkit-0.1.0-py3-none-any.whl"):
        echo = command.replace("python3 -m pip install --no-cache-dir", "printf %s", 1)
        said[value] = subprocess.run(
            ["sh", "-euc", echo], env={**os.environ, "PATCHKIT": value}, capture_output=True, text=True, check=True
        ).stdout
    assert said == {
        ".": "/src/patchkit/.",
        "vllm_patchkit-0.1.0-py3-none-any.whl": "/src/patchkit/vllm_patchkit-0.1.0-py3-none-any.whl",
    }

"""The real vLLM 0.16.0 wheel (release tier): `patchkit wheel 0.16.0` downloads it into the shared
cache (once; re-checked on reuse), patches it with eagle3 (each command says `--set eagle3`: the
library holds other sets too), `pip install --no-deps` puts it in a temporary prefix, and there
`status` says applied, `verify` passes, the eagle3 requirements hold on the installed files (judged
as the held-out tests judge them), and `revert` gives the release's files back byte for byte."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from patchkit.distinfo.provenance import read_provenance
from patchkit.fetch import release_tree

from helpers import run_cli  # isort: skip
from eagle3_judges import (  # isort: skip
    DEEPSEEK,
    EAGLE,
    KIMI_CLASS,
    MEDIA_TOKEN,
    SPEC,
    base_names,
    contract,
    drafter_image_token,
    eagle3_accepts,
    expected_requirements,
    find,
)

pytestmark = pytest.mark.release

VERSION = "0.16.0"
LABELLED = f"{VERSION}+patchkit.eagle3"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """site-packages of a prefix the patched 0.16.0 wheel was installed in with pip --no-deps."""
    work = tmp_path_factory.mktemp("real-wheel")
    done = run_cli("wheel", "--set", "eagle3", VERSION, "--out", work / "dist", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    wheel = Path(done.stdout.strip().splitlines()[-1])
    assert wheel.name == f"vllm-{LABELLED}-cp38-abi3-manylinux_2_31_x86_64.whl"
    prefix = work / "prefix"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--prefix", str(prefix), str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900)  # pip checks RECORD's hashes too
    assert done.returncode == 0, done.stdout + done.stderr
    wheel.unlink()  # 500 MB
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def test_status_says_applied_and_verify_passes(installed):
    status = json.loads(run_cli("status", "--set", "eagle3", "--target", installed, "--format", "json").stdout)
    assert status["state"] == "applied" and status["set"] == "eagle3" and status["drifted"] == []
    assert status["vllm_version"] == LABELLED and status["series"] == VERSION
    done = run_cli("verify", "--set", "eagle3", "--target", installed, "--no-import", "--format", "json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    checks = json.loads(done.stdout)["checks"]
    integrity = [c for c in checks if c["check"] == "integrity"]
    assert integrity and all(c["ok"] and "stock hashes from patchkit.json" in c["message"] for c in integrity)


def test_the_eagle3_requirements_hold_on_the_installed_files(installed):
    spec = (installed / SPEC).read_text()
    for model_type in ("deepseek_v3", "kimi_k2", "kimi_k25"):
        assert eagle3_accepts(spec, model_type), model_type
    deepseek = ast.parse((installed / DEEPSEEK).read_text())
    assert "SupportsEagle3" in base_names(find(deepseek, "DeepseekV2ForCausalLM"))
    kimi_config = {"media_placeholder_token_id": MEDIA_TOKEN, "vision_config": SimpleNamespace()}
    assert drafter_image_token((installed / EAGLE).read_text(), KIMI_CLASS, **kimi_config) == MEDIA_TOKEN
    results = contract(installed, VERSION)
    assert len(results) == expected_requirements(VERSION) and all(r.ok for r in results), results


def test_the_label_shows_in_the_metadata_not_in_vllm_version(installed):
    """`vllm --version` prints importlib.metadata.version("vllm"); vllm.__version__ is _version.py's."""
    dist = next(metadata.distributions(path=[str(installed)]))
    assert dist.version == LABELLED
    cli_main = (installed / "vllm/entrypoints/cli/main.py").read_text()
    assert 'version=importlib.metadata.version("vllm")' in cli_main
    assert "__version__ = version = '0.16.0'" in (installed / "vllm/_version.py").read_text()
    provenance = read_provenance(installed / f"vllm-{LABELLED}.dist-info")
    assert provenance.vllm_version == VERSION and provenance.set_name == "eagle3"


def test_the_wheel_installed_over_an_applied_tree_is_reported_and_apply_settles_it(installed, tmp_path):
    """Issue 20 item 2: eagle3 applied to the stock 0.16.0 (guard installed), then the patched wheel's
    dist-info and files laid over it as pip would: the guard refuses the labelled version, so status
    fails naming apply; apply records the set for the installed version and the guard lets it launch."""
    import shutil

    from helpers import load_plugins_like_vllm

    from patchkit.releases.files import files_for, lay_out

    paths = files_for(VERSION)
    site = tmp_path / "site"
    lay_out(release_tree(VERSION, paths), str(site), paths)
    assert run_cli("apply", "--set", "eagle3", "--target", site, "--no-import").returncode == 0
    shutil.rmtree(site / f"vllm-{VERSION}.dist-info")
    shutil.copytree(installed / f"vllm-{LABELLED}.dist-info", site / f"vllm-{LABELLED}.dist-info")
    for path in paths:
        if (site / path).is_file():  # the engine files the kimi set's behaviour test reads exist from 0.25.0 only
            shutil.copyfile(installed / path, site / path)
    refused = load_plugins_like_vllm(site)
    assert refused.returncode != 0 and f"{LABELLED} is installed" in refused.stderr

    done = run_cli("status", "--set", "eagle3", "--target", site, "--format", "json")
    assert (
        done.returncode == 1
        and f"`patchkit apply --target {site} --set eagle3`" in json.loads(done.stdout)["guard"]["fix"]
    ), done.stdout
    assert run_cli("verify", "--set", "eagle3", "--target", site, "--no-import").returncode == 1
    done = run_cli("apply", "--set", "eagle3", "--target", site, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_plugins_like_vllm(site).returncode == 0
    assert run_cli("status", "--set", "eagle3", "--target", site).returncode == 0
    with open(site / SPEC, "a") as fh:
        fh.write("# edited\n")
    assert load_plugins_like_vllm(site).returncode != 0  # still guarded


def test_revert_gives_the_release_files_back(installed):
    # the last test of the module: it leaves the prefix stock
    provenance = read_provenance(installed / f"vllm-{LABELLED}.dist-info")
    done = run_cli("revert", "--set", "eagle3", "--target", installed)
    assert done.returncode == 0, done.stdout + done.stderr
    # each file is what eagle3's series makes of the release's: replaced with no copy kept
    assert "saved under" not in done.stderr and not (installed / ".patchkit" / "saved").exists(), done.stderr
    stock = release_tree(VERSION, sorted(provenance.files))
    for path in provenance.files:
        assert (installed / path).read_bytes() == (stock / path).read_bytes(), path
    status = json.loads(run_cli("status", "--set", "eagle3", "--target", installed, "--format", "json").stdout)
    assert status["state"] == "not-applied" and status["drifted"] == []

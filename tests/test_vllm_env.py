"""vLLM's integer environment flags read as its envs.py reads them, bool(int(value)): a value int() takes
that a "set and not 0" test misreads ("00", "+0", a Unicode zero) decides the launch rules as vLLM does, and
one int() refuses ("true", "yes", "") fails the launch: vLLM raises reading the variable, at start."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import lay_out_release, run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied_finding, serve, write_model

from patchkit.launch import observed
from patchkit.launch.vllm_env import CHECK, ENVS, conversions, json_or_file_refusal, json_str_or_file, refusal
from patchkit.launch.warnings_env import deprecation_findings

EAGLE3 = '{"method":"eagle3","model":"DRAFTER","num_speculative_tokens":3}'
# the entries' shapes as 0.12-0.30 spell them: int() directly, or through maybe_convert_bool
ENVS_READ_BY_INT = (
    "environment_variables = {\n"
    '    "VLLM_MLA_DISABLE": lambda: bool(int(os.getenv("VLLM_MLA_DISABLE", "0"))),\n'
    "    # a comment between two entries\n"
    '    "VLLM_USE_V2_MODEL_RUNNER": lambda: maybe_convert_bool(\n'
    '        os.getenv("VLLM_USE_V2_MODEL_RUNNER", None)\n'
    "    ),\n"
    '    "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),\n'
    "}\n"
)
ENVS_READ_AS_TEXT = ENVS_READ_BY_INT.replace('bool(int(os.getenv("VLLM_MLA_DISABLE", "0")))', 'os.getenv("X") == "1"')


def environment_finding(tmp_path, envs: str | None, *assignments: str) -> dict | None:
    target = write_model(tmp_path / "tgt", {**DEEPSEEK_V3, "kv_lora_rank": 512})
    command = ["env", *assignments, *serve(target, write_model(tmp_path / "dr", DRAFTER))]
    return applied_finding(tmp_path, {ENVS: envs}, command, CHECK)


@pytest.mark.parametrize("value", ["true", "yes", "", "0x1", "1.0", "on"])
@pytest.mark.parametrize("name", ["VLLM_MLA_DISABLE", "VLLM_USE_V2_MODEL_RUNNER"])
def test_a_flag_int_refuses_fails_the_launch(tmp_path, name, value):
    found = environment_finding(tmp_path, ENVS_READ_BY_INT, f"{name}={value}")
    assert found is not None and found["result"] == "fail", found
    assert f"{name}={value!r} is not an integer: vLLM's envs.py reads it with int(), which raises" in found["message"]
    assert found["fix"] == f"give {name}=1 or {name}=0, or unset it"


@pytest.mark.parametrize("value", ["0", "00", "+0", " 1 ", "0_0", "\u0660", "-1"])
def test_a_flag_int_takes_is_no_finding(tmp_path, value):
    assert environment_finding(tmp_path, ENVS_READ_BY_INT, f"VLLM_MLA_DISABLE={value}") is None


@pytest.mark.parametrize("envs", [ENVS_READ_AS_TEXT, None])
def test_a_tree_that_does_not_show_int_reading_it_is_not_judged_by_it(tmp_path, envs):
    assert environment_finding(tmp_path, envs, "VLLM_MLA_DISABLE=true") is None


@pytest.mark.release
@pytest.mark.parametrize(
    ("release", "refused"),
    [
        ("0.11.0", ["VLLM_MLA_DISABLE"]),  # no V2 model runner yet
        ("0.16.0", ["VLLM_MLA_DISABLE", "VLLM_USE_V2_MODEL_RUNNER"]),
        ("0.22.0", ["VLLM_MLA_DISABLE", "VLLM_USE_V2_MODEL_RUNNER"]),  # maybe_convert_bool
        ("0.34.0", ["VLLM_MLA_DISABLE"]),  # the variable is gone
    ],
)
def test_the_real_envs_of_a_release_decide_it(tmp_path, release, refused):
    site = lay_out_release(release, [ENVS], tmp_path / "site")
    target = write_model(tmp_path / "tgt", {**DEEPSEEK_V3, "kv_lora_rank": 512})
    command = ["env", "VLLM_MLA_DISABLE=true", "VLLM_USE_V2_MODEL_RUNNER=yes"]
    command += serve(target, write_model(tmp_path / "dr", DRAFTER))
    done = run_cli_in_process("preflight", "--target", site, "--no-import", "--format", "json", "--", *command)
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == CHECK]
    assert [f["message"].split("=")[0] for f in found] == refused, done.stdout
    assert done.returncode == 1, done.stdout


# every entry of environment_variables is read after the load where envs.py has enable_envs_cache (0.12+)
ENVS_CACHED = (
    "def get_vllm_port():\n"
    '    port = os.getenv("VLLM_PORT", "0")\n'
    "    return int(port)\n"
    "environment_variables: dict = {\n"
    '    "CMAKE_BUILD_TYPE": env_with_choices("CMAKE_BUILD_TYPE", None, ["Debug", "Release", "RelWithDebInfo"]),\n'
    '    "VERBOSE": lambda: bool(int(os.getenv("VERBOSE", "0"))),\n'
    '    "LOCAL_RANK": lambda: int(os.environ.get("LOCAL_RANK", "0")),\n'
    '    "VLLM_PORT": get_vllm_port,\n'
    '    "VLLM_X_MODE": env_with_choices("VLLM_X_MODE", "a", ["a", "b"], case_sensitive=False),\n'
    '    "VLLM_X_LIST": env_list_with_choices("VLLM_X_LIST", [], ["a", "b"]),\n'
    '    "VLLM_X_TEXT": lambda: os.getenv("VLLM_X_TEXT", ""),\n'
    "}\n"
    "def enable_envs_cache():\n"
    "    pass\n"
)


@pytest.mark.parametrize(
    ("assignment", "fix"),
    [
        ("VERBOSE=true", "give VERBOSE=1 or VERBOSE=0, or unset it"),
        ("LOCAL_RANK=", "give LOCAL_RANK an integer, or unset it"),
        ("CMAKE_BUILD_TYPE=release", "give CMAKE_BUILD_TYPE among Debug, Release, RelWithDebInfo, or unset it"),
        ("VLLM_X_MODE=c", "give VLLM_X_MODE among a, b, or unset it"),
        ("VLLM_X_LIST=a,c", "give VLLM_X_LIST comma-separated values among a, b, or unset it"),
        ("VLLM_PORT=tcp://10.0.0.1:8000", "unset VLLM_PORT or give it a port number (Kubernetes sets"),
    ],
)
def test_any_entry_its_conversion_refuses_fails_the_launch(tmp_path, assignment, fix):
    found = environment_finding(tmp_path, ENVS_CACHED, assignment)
    assert found is not None and found["result"] == "fail", found
    assert found["message"].startswith(assignment.split("=")[0] + "=") and "vLLM stops" in found["message"], found
    assert found["fix"].startswith(fix), found


@pytest.mark.parametrize(
    "assignment", ["VERBOSE=00", "LOCAL_RANK= 3 ", "CMAKE_BUILD_TYPE=Release", "VLLM_X_MODE=B", "VLLM_X_LIST=a, b,"]
)
def test_a_value_the_conversion_takes_is_no_finding(tmp_path, assignment):
    assert environment_finding(tmp_path, ENVS_CACHED, "VLLM_X_TEXT=true", assignment) is None


def test_without_enable_envs_cache_only_what_is_read_at_start_is_judged(tmp_path):
    envs = ENVS_CACHED.replace("def enable_envs_cache", "def other")
    assert environment_finding(tmp_path / "a", envs, "VERBOSE=true") is None
    found = environment_finding(tmp_path / "b", envs, "VLLM_PORT=tcp://10.0.0.1:8000")
    assert found is not None and "vLLM stops as it starts" in found["message"], found


def test_patchkits_own_environment_the_launch_inherits_is_judged(tmp_path, monkeypatch):
    monkeypatch.setenv("VERBOSE", "true")
    found = environment_finding(tmp_path / "a", ENVS_CACHED)
    assert found is not None and found["message"].startswith("VERBOSE='true' is not an integer"), found
    assert environment_finding(tmp_path / "b", ENVS_CACHED, "-u", "VERBOSE") is None


@pytest.mark.release
@pytest.mark.parametrize(
    ("release", "refused"),
    [
        ("0.11.0", ["VLLM_PORT"]),  # no enable_envs_cache: only what vLLM reads as it starts
        ("0.16.0", ["CMAKE_BUILD_TYPE", "LOCAL_RANK", "VERBOSE", "VLLM_PORT", "VLLM_USE_DEEP_GEMM"]),
        ("0.34.0", ["CMAKE_BUILD_TYPE", "LOCAL_RANK", "VERBOSE", "VLLM_PORT", "VLLM_USE_DEEP_GEMM"]),
    ],
)
def test_every_entry_of_a_releases_envs_is_judged(tmp_path, release, refused):
    site = lay_out_release(release, [ENVS], tmp_path / "site")
    target = write_model(tmp_path / "tgt", {**DEEPSEEK_V3, "kv_lora_rank": 512})
    command = ["env", "VLLM_USE_DEEP_GEMM=true", "VERBOSE=yes", "CMAKE_BUILD_TYPE=release", "LOCAL_RANK="]
    command += ["VLLM_PORT=tcp://10.0.0.1:8000", *serve(target, write_model(tmp_path / "dr", DRAFTER))]
    done = run_cli_in_process("preflight", "--target", site, "--no-import", "--format", "json", "--", *command)
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == CHECK]
    assert [f["message"].split("=")[0] for f in found] == refused, done.stdout
    assert done.returncode == 1, done.stdout


# 0.22+'s shapes: an entry wrapped in deprecated_env, and a JSON value or the path of a JSON file
ENVS_WRAPPED = (
    "def maybe_convert_json_str_or_file(value):\n"
    "    if value is None:\n"
    "        return None\n"
    "    if os.path.exists(value):\n"
    "        with open(value) as f:\n"
    "            return json.load(f)\n"
    "    return json.loads(value)\n"
    "environment_variables: dict = {\n"
    '    "VLLM_X_BACKEND": deprecated_env(\n'
    '        "VLLM_X_BACKEND", "v0.23", "Use --x.", env_with_choices("VLLM_X_BACKEND", "a", ["a", "b"])\n'
    "    ),\n"
    '    "VLLM_X_FLAG": deprecated_env("VLLM_X_FLAG", "v0.23", "Use --x.", lambda: bool(int(os.getenv("VLLM_X_FLAG", "0")))),\n'
    '    "VLLM_X_QUANT": lambda: maybe_convert_json_str_or_file(os.environ.get("VLLM_X_QUANT", None)),\n'
    "}\n"
    "def enable_envs_cache():\n"
    "    pass\n"
)


@pytest.mark.parametrize(
    ("assignment", "says", "fix"),
    [
        ("VLLM_X_BACKEND=c", "is not among its choices a, b", "give VLLM_X_BACKEND among a, b, or unset it"),
        ("VLLM_X_FLAG=true", "is not an integer", "give VLLM_X_FLAG=1 or VLLM_X_FLAG=0, or unset it"),
        ("VLLM_X_QUANT=notjson", "names no file and is not JSON", "give VLLM_X_QUANT JSON or the path of a JSON file"),
        ("VLLM_X_QUANT=", "names no file and is not JSON", "give VLLM_X_QUANT JSON or the path of a JSON file"),
    ],
)
def test_an_entry_inside_deprecated_env_or_read_as_json_or_a_file_is_judged(tmp_path, assignment, says, fix):
    """review43a S7: 0.22's deprecated_env(NAME, ..., env_with_choices(...)) and
    maybe_convert_json_str_or_file(os.environ.get(...)) entries were not judged (ok where vLLM raises)."""
    found = environment_finding(tmp_path, ENVS_WRAPPED, assignment)
    assert found is not None and found["result"] == "fail", found
    assert says in found["message"] and "right after the model's load" in found["message"], found
    assert found["fix"].startswith(fix), found


@pytest.mark.parametrize("value", ["b", "a"])
def test_a_choice_inside_deprecated_env_it_takes_is_no_finding(tmp_path, value):
    assert environment_finding(tmp_path, ENVS_WRAPPED, f"VLLM_X_BACKEND={value}", "VLLM_X_FLAG=0") is None


def json_file_finding(tmp_path, make) -> dict | None:
    """The finding for VLLM_X_QUANT naming a path `make(path)` lays out (relative: the launch's directory)."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "quant"
    make(path)
    return environment_finding(tmp_path / "run", ENVS_WRAPPED, f"VLLM_X_QUANT={path}")


def test_a_json_file_vllm_reads_is_no_finding_and_a_json_value_neither(tmp_path):
    assert json_file_finding(tmp_path / "a", lambda p: p.write_text('{"bits": 4}')) is None
    assert environment_finding(tmp_path / "b", ENVS_WRAPPED, 'VLLM_X_QUANT={"bits": 4}') is None


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_text("bits: 4"), "holds no JSON"),
        (lambda p: p.write_bytes(b'\xef\xbb\xbf{"bits": 4}'), "holds no utf-8 JSON"),  # vLLM's json.load: a BOM raises
        (lambda p: p.mkdir(), "is a directory"),
        (os.mkfifo, "is no regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "is no regular file"),
    ],
)
def test_a_file_vllm_cannot_read_as_json_fails_and_a_fifo_is_never_opened(tmp_path, make, says):
    found = json_file_finding(tmp_path, make)
    assert found is not None and found["result"] == "fail" and says in found["message"], found


def test_a_json_file_over_the_bound_is_not_read_and_cannot_be_judged(tmp_path):
    found = json_file_finding(tmp_path, lambda p: p.write_text('{"pad": "' + "x" * (1 << 20) + '"}'))
    assert found is not None and found["result"] == "cannot judge" and "over 1 MiB" in found["message"], found


# each value set alone, the getter called: "raises" (ValueError, or OSError opening a file), "takes", or
# "other" (an import or a type error the value does not decide: not compared)
GETTERS = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("envs_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
values, base, out = json.loads(sys.argv[2]), dict(os.environ), {}
for name, getter in module.environment_variables.items():
    out[name] = {}
    for value in values:
        os.environ.clear()
        os.environ.update(base)
        os.environ[name] = value
        try:
            getter()
            out[name][value] = "takes"
        except (ValueError, OSError):
            out[name][value] = "raises"
        except Exception:
            out[name][value] = "other"
print(json.dumps(out))
"""
VALUES = ["1", "0", "true", "yes", "", "abc", "1.5", " 1", "01", "-1", "x,y", "auto", "tcp://1.2.3.4:5", "[1]", "{}"]
VALUES += ["None", "Debug", "release", "good.json", "bad.json", "bom.json", "folder", "1" * 5000]  # past int()'s limit


@pytest.mark.release
@pytest.mark.parametrize("release", [f"0.{minor}.0" for minor in range(12, 35)])
def test_every_entry_of_a_releases_envs_is_refused_exactly_where_its_getter_raises(tmp_path, release):
    """review43a S7's differential: each entry of the release's own envs.py (exec'd alone, no vLLM)
    with each value, patchkit's verdict against the getter's own raise: no mismatch, either way."""
    site = lay_out_release(release, [ENVS], tmp_path / "site")
    here = tmp_path / "cwd"
    (here / "folder").mkdir(parents=True)
    (here / "good.json").write_text('{"bits": 4}')
    (here / "bad.json").write_text("bits: 4")
    (here / "bom.json").write_bytes(b'\xef\xbb\xbf{"bits": 4}')
    argv = [sys.executable, "-B", "-c", GETTERS, str(site / ENVS), json.dumps(VALUES)]
    done = subprocess.run(argv, cwd=here, env={"LANG": "C.UTF-8"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    vllm_says = json.loads(done.stdout)
    envs = (site / ENVS).read_bytes()
    assert b"def enable_envs_cache(" in envs  # every entry is read after the load
    judged = conversions(envs)
    mismatches = []
    for name, verdicts in vllm_says.items():
        for value, said in verdicts.items():
            ours = name in judged and patchkit_refuses(name, value, judged[name], str(here))
            if said != "other" and ours != (said == "raises"):
                mismatches.append((name, value, said))
    assert mismatches == [], mismatches
    assert len(judged) > 100


def patchkit_refuses(name: str, value: str, conversion, cwd: str) -> bool:
    if conversion[0] is json_str_or_file:
        why, judged = json_or_file_refusal(name, value, cwd, "utf-8")
        assert judged, why
        return why is not None
    return refusal(name, value, conversion) is not None


def test_json_nested_past_pythons_limit_is_a_refusal_never_a_crash(tmp_path):
    """review44a T3: json.loads raised RecursionError, which nothing caught (exit 70); vLLM's own reading
    of the value raises the same."""
    deep = "[" * 100_000
    assert "is not JSON" in str(refusal("VLLM_X", deep, (json.loads, None, (), True, False)))
    why, judged = json_or_file_refusal("VLLM_HUMMING_INPUT_QUANT_CONFIG", deep, str(tmp_path), "utf-8")
    assert judged and why is not None and "is not JSON" in why
    (tmp_path / "deep.json").write_text(deep)
    why, judged = json_or_file_refusal("VLLM_HUMMING_INPUT_QUANT_CONFIG", "deep.json", str(tmp_path), "utf-8")
    assert judged and why is not None and "holds no JSON" in why


def test_a_number_past_pythons_digit_limit_is_not_json_as_vllms_json_loads_says(tmp_path):
    """review44a L3: json.loads raises a plain ValueError on a 5000-digit number (Python's int() limit),
    not a JSONDecodeError: it was "names a file that is not read here", cannot judge."""
    why, judged = json_or_file_refusal("VLLM_HUMMING_INPUT_QUANT_CONFIG", "1" * 5000, str(tmp_path), "utf-8")
    assert judged and why is not None and "names no file and is not JSON" in why, why
    found = environment_finding(tmp_path / "e2e", ENVS_WRAPPED, "VLLM_X_QUANT=" + "1" * 5000)
    assert found is not None and found["result"] == "fail" and "is not JSON" in found["message"], found


@pytest.mark.parametrize(
    ("name", "value"),
    [("VLLM_X_QUANT", "1" * 5000), ("VLLM_X_FLAG", "7" * 4999 + "x"), ("VLLM_X_BACKEND", "c" * 5000)],
)
def test_a_long_value_is_quoted_cut_never_whole(tmp_path, name, value):
    """review44a L4: a 5000-character value was quoted whole."""
    found = environment_finding(tmp_path, ENVS_WRAPPED, f"{name}={value}")
    assert found is not None and found["result"] == "fail", found
    assert found["message"].startswith(f"{name}={value[:80]!r}... (5,000 characters) "), found
    assert len(found["message"]) + len(found["fix"]) < 400, found


def test_a_json_file_a_variable_names_is_read_once(tmp_path, monkeypatch):
    path = tmp_path / "quant.json"
    path.write_text('{"bits": 4}')
    counted: list[str] = []
    plain = observed._ASKED["read"]

    def read(asked: str, *rest: object) -> bytes:
        counted.extend([asked] if os.path.realpath(asked) == str(path) else [])
        return plain(asked, *rest)

    monkeypatch.setitem(observed._ASKED, "read", read)
    assert environment_finding(tmp_path / "run", ENVS_WRAPPED, f"VLLM_X_QUANT={path}") is None
    assert len(counted) == 1, counted


LAUNCH_LOCALES = [
    ["LANG=en_US.ISO-8859-1"],  # installed here or not: only the launch's Python knows
    ["LANG=en_US.ISO-8859-1", "PYTHONUTF8=1"],
    ["LC_ALL=C", "PYTHONUTF8=0"],  # UTF-8 mode off under C: ASCII
    ["LC_ALL=C.UTF-8"],
]


@pytest.mark.parametrize("words", LAUNCH_LOCALES)
def test_a_json_file_is_judged_in_the_encoding_the_launchs_own_python_opens_it_in(tmp_path, words):
    """envkeep33's left: the file was decoded in the encoding the locale variables name, where the
    launch's Python (a locale not installed is C to it, UTF-8 mode) may open it in another; patchkit's
    verdict agrees with a real json.load(open(path)) in that Python, on a Latin-1 and a UTF-8 file."""
    target = write_model(tmp_path / "tgt", DEEPSEEK_V3)
    env = {**os.environ, **dict(word.split("=", 1) for word in words)}
    for name, data in (("latin1", '{"a": "\u00e9"}'.encode("latin-1")), ("utf8", '{"a": "\u00e9"}'.encode())):
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        loads = f"import json; json.load(open({str(path)!r}))"
        raises = (
            subprocess.run([sys.executable, "-c", loads], env=env, capture_output=True, check=False).returncode != 0
        )
        launch = ["env", *words, f"VLLM_X_QUANT={path}", sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        found = applied_finding(tmp_path / name, {ENVS: ENVS_WRAPPED}, [*launch, "--model", str(target)], CHECK)
        assert (found is not None and found["result"] == "fail") == raises, (name, found)


# 0.22-0.23's deprecated_env, its warning as they write it
ENVS_DEPRECATED = ENVS_WRAPPED.replace(
    "environment_variables: dict = {\n",
    "def deprecated_env(env_name, removal_version, replacement, getter):\n"
    "    def _read():\n"
    "        if env_name in os.environ:\n"
    "            warnings.warn(\n"
    '                f"{env_name} is deprecated and will be removed in "\n'
    '                f"{removal_version}. {replacement}",\n'
    "                FutureWarning,\n"
    "                stacklevel=2,\n"
    "            )\n"
    "        return getter()\n"
    "    return _read\n"
    "environment_variables: dict = {\n",
)


@pytest.mark.parametrize(
    ("filters", "fails"),
    [
        ("error", True),
        ("error::FutureWarning", True),
        ("e", True),  # a prefix names the action
        ("error:vllm_x_flag is deprecated", True),  # the message's start, any case
        ("error:::vllm.envs", True),
        ("ignore,error", True),  # the last item comes first
        ("error,ignore::FutureWarning", False),
        ("error::DeprecationWarning", False),
        ("error:::vllm", False),  # the module's whole name
        ("error:other message", False),
        ("error,", True),  # no empty item
        ("error, ", False),  # " ": a default filter, first
        ("bogus,error:::vllm.envs:0", True),
    ],
)
def test_a_deprecated_variable_whose_warning_pythonwarnings_makes_an_error_fails(tmp_path, filters, fails):
    """envkeep33's left: deprecated_env warns FutureWarning reading a variable that is set; under
    PYTHONWARNINGS=error it raises, and the launch stops after the model's load, unseen."""
    found = environment_finding(tmp_path, ENVS_DEPRECATED, "VLLM_X_FLAG=1", f"PYTHONWARNINGS={filters}")
    assert (found is not None and found["result"] == "fail") is fails, found
    if fails:
        assert "is deprecated: vLLM's envs.py warns reading it" in found["message"], found
        assert found["fix"].startswith("unset VLLM_X_FLAG, or leave FutureWarning out of"), found
        assert found["fix"].endswith("(vLLM's note on VLLM_X_FLAG: Use --x.)"), found
    assert environment_finding(tmp_path / "unset", ENVS_DEPRECATED, f"PYTHONWARNINGS={filters}") is None


def test_a_line_number_decides_and_a_tree_that_warns_otherwise_cannot_be_judged(tmp_path):
    found = environment_finding(tmp_path / "a", ENVS_DEPRECATED, "VLLM_X_FLAG=1", "PYTHONWARNINGS=error:::vllm.envs:7")
    assert found is not None and found["result"] == "cannot judge" and "a line number" in found["message"], found
    otherwise = ENVS_DEPRECATED.replace("FutureWarning", "DeprecationWarning")
    found = environment_finding(tmp_path / "b", otherwise, "VLLM_X_FLAG=1", "PYTHONWARNINGS=error")
    assert found is not None and found["result"] == "cannot judge", found


WARNS = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("vllm.envs", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = {}
for name in json.loads(sys.argv[2]):
    os.environ[name] = "1"
    try:
        getattr(module, name)
        out[name] = False
    except FutureWarning:
        out[name] = True
    except ValueError:  # the getter's own refusal of "1", after its warning
        out[name] = False
    del os.environ[name]
print(json.dumps(out))
"""
FILTERS = ["error", "error::FutureWarning", "e", "error:::vllm.envs", "error:::vllm", "ignore,error", "error, "]
FILTERS += ["error,ignore::FutureWarning", "error::DeprecationWarning", "error:VLLM_USE_FLASHINFER_MOE_FP8 IS", "a"]


@pytest.mark.release
@pytest.mark.parametrize("release", ["0.22.0", "0.23.0"])
def test_every_deprecated_entry_fails_exactly_where_its_warning_raises(tmp_path, release):
    """The release's own envs.py (exec'd alone as vllm.envs) under each PYTHONWARNINGS: its getter's
    FutureWarning raised against patchkit's verdict, for every deprecated entry."""
    site = lay_out_release(release, [ENVS], tmp_path / "site")
    envs = (site / ENVS).read_bytes()
    names = sorted(set(re.findall(r'deprecated_env\(\s*"(\w+)"', envs.decode())))
    assert len(names) >= 4, names
    for filters in FILTERS:
        argv = [sys.executable, "-c", WARNS, str(site / ENVS), json.dumps(names)]
        env = {"PYTHONWARNINGS": filters, "PATH": os.environ["PATH"]}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        for name, raised in json.loads(done.stdout).items():
            found = deprecation_findings({name: "1", "PYTHONWARNINGS": filters}, list, {ENVS: envs}.get)
            assert bool(found) is raised, (filters, name, found)
            assert all(f.ok is False for f in found), found


# huggingface_hub's constants.py, the shape of its int() conversions at import (0.3x)
HUB_CONSTANTS = (
    "import os\n"
    "def _as_int(value):\n"
    "    if value is None:\n"
    "        return None\n"
    "    return int(value)\n"
    'HF_HUB_ETAG_TIMEOUT: int = _as_int(os.environ.get("HF_HUB_ETAG_TIMEOUT")) or 10\n'
    'HF_HUB_X_RATIO = float(os.getenv("HF_HUB_X_RATIO", "0.5"))\n'
    'HF_HUB_OFFLINE = os.environ.get("HF_HUB_OFFLINE", "0").upper() in ("1", "ON")\n'
    "try:\n"
    '    HF_HUB_GUARDED = int(os.environ.get("HF_HUB_GUARDED"))\n'
    "except Exception:\n"
    "    HF_HUB_GUARDED = 0\n"
)


@pytest.mark.parametrize(
    ("assignment", "fails"),
    [
        ("HF_HUB_ETAG_TIMEOUT=abc", True),
        ("HF_HUB_ETAG_TIMEOUT=", True),  # "": not None, int("") raises
        ("HF_HUB_ETAG_TIMEOUT= 30 ", False),
        ("HF_HUB_X_RATIO=half", True),
        ("HF_HUB_X_RATIO=1e-3", False),
        ("HF_HUB_OFFLINE=maybe", False),  # read as text
        ("HF_HUB_GUARDED=abc", False),  # inside try: not every import raises
    ],
)
def test_a_hub_setting_huggingface_hubs_import_refuses_fails_statically(tmp_path, assignment, fails):
    """envimport33's left: `run` launched with HF_HUB_ETAG_TIMEOUT=abc, which huggingface_hub's import
    int()s (every vLLM command imports it at start); only the import path caught it."""
    target = write_model(tmp_path / "tgt", {**DEEPSEEK_V3, "kv_lora_rank": 512})
    command = ["env", assignment, *serve(target, write_model(tmp_path / "dr", DRAFTER))]
    found = applied_finding(tmp_path, {"huggingface_hub/constants.py": HUB_CONSTANTS}, command, CHECK)
    assert (found is not None and found["result"] == "fail") is fails, found
    if fails:
        name = assignment.split("=")[0]
        assert "huggingface_hub/constants.py reads it with" in found["message"], found
        assert found["fix"].startswith(f"give {name} "), found

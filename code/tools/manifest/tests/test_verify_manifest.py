# SPDX-License-Identifier: Apache-2.0
"""code/tools/manifest/verify_manifest.py: a well-formed tt-dit-server manifest passes, each broken rule is reported by
name with exit 1, and verify lines run against a staged copy of the image's /opt/tt-metal, not this checkout."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.manifest import verify_manifest

CODE = Path(__file__).resolve().parents[3]
TOOL = CODE / "tools" / "manifest" / "verify_manifest.py"
SHA = "869830fc749c35f34771aa5209f923ac57e4564e"


def good_manifest(root: str) -> dict:
    """A manifest that passes every static rule; `root` is where this repository's code/ is."""
    return {
        "schema": "5.1",
        "repo": "example/GR00T-N1.5-3B-p150",
        "name": "gr00t-n1.5-3b-p150",
        "weights": {"repo": "nvidia/GR00T-N1.5-3B", "revision": SHA, "allow_patterns": ["config.json"]},
        "kind": "tt-dit-server",
        "arch": "blackhole",
        "source": {
            "tt_metal": {"repo": "https://github.com/tenstorrent/tt-metal", "ref": "v0.81.1"},
            "code": ["tt_metal/python_env/requirements-dev.txt"],
            "extra_code": [{"root": root, "paths": ["models", "gr00t_p150", "scripts"]}],
            "ubuntu": "22.04",
            "python": "3.12",
        },
        "runtime": {"app": "gr00t_p150.server.app:app", "mesh_shape_env": "TT_MESH_SHAPE",
                    "packages": ["numpy>=1.24.4,<2", "safetensors", "transformers==5.12.1"]},
        "serve": {"port": 20000, "hardware": "p150", "mesh_device": "P150",
                  "env": {"TT_WEIGHTS_REVISION": SHA, "GR00T_VERSION": "n15"}},
        "verify": ["assert 1 == 1"],
        "card": {"description": "GR00T N1.5 on one p150a.", "quickstart": "tt serve example/GR00T-N1.5-3B-p150",
                 "performance": "47 ms per request", "limitations": "GR1 only"},
    }


def write(tmp_path: Path, doc: dict, name: str = "tt-model.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check(path: Path, capsys, *flags: str) -> tuple[int, str]:
    code = verify_manifest.main([str(path), *flags])
    return code, capsys.readouterr().out


@pytest.fixture
def good(tmp_path) -> dict:
    """The good manifest with the code root written relative to the manifest's directory."""
    return good_manifest(os.path.relpath(CODE, tmp_path))


def test_good_manifest_passes_static_and_verify(tmp_path, good, capsys):
    good["verify"] = ["import gr00t_p150.server.app as a; assert a.app", "import models.experimental.gr00t.common"]
    code, out = check(write(tmp_path, good), capsys, "-v")
    assert code == 0, out
    assert "static: 0 error(s), 0 warning(s)" in out and "verify: 2 passed, 0 failed" in out
    assert "card: performance present, limitations present\n" in out


def test_absolute_root_and_any_working_directory_give_the_same_answer(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)
    code, out = check(write(tmp_path, good_manifest(str(CODE))), capsys, "--static-only")
    assert code == 0 and "static: 0 error(s)" in out and "verify: not run (--static-only)" in out, out


def _set(path: str, value):
    """A mutation that sets (or, with value=..., deletes) a dotted key of the manifest."""
    def apply(doc):
        *parents, leaf = path.split(".")
        for key in parents:
            doc = doc[int(key)] if isinstance(doc, list) else doc[key]
        if value is ...:
            del doc[leaf]
        else:
            doc[leaf] = value
    return apply


VIOLATIONS = [
    ("schema_as_float", _set("schema", 5.1), 'schema must be the string "5.1", got float 5.1'),
    ("name_not_a_slug", _set("name", "GR00T N1.5"), "name 'GR00T N1.5' is not a safe slug"),
    ("name_ends_in_dash", _set("name", "gr00t-"), "not be a valid Docker image reference"),
    ("repo_not_namespaced", _set("repo", "gr00t"), "repo must be a namespaced HF id"),
    ("kind_missing", _set("kind", ...), "kind is missing: tt-model then defaults to vllm-plugin"),
    ("arch_unknown", _set("arch", "grayskull"), "arch must be one of blackhole, wormhole_b0"),
    ("revision_not_40_hex", _set("weights.revision", "main"), "weights.revision must be a full 40-hex"),
    ("weights_unpinned", _set("weights", "nvidia/GR00T-N1.5-3B"), "weights is a bare repo id"),
    ("ubuntu_as_float", _set("source.ubuntu", 22.04), "source.ubuntu must be a string, got float 22.04"),
    ("source_key_unknown", _set("source.models", ["x"]), "unknown key 'models' in source"),
    ("extra_code_escapes", _set("source.extra_code.0.paths", ["models", "gr00t_p150", "../code"]),
     "must be relative to their root"),
    ("extra_code_path_missing", _set("source.extra_code.0.paths", ["models", "gr00t_p150", "nothing_here"]),
     "source.extra_code lists 1 path(s) that do not exist"),
    ("local_tt_metal_missing", _set("source.tt_metal", "no-such-tt-metal"), "is not a directory on this machine"),
    ("runtime_extra_key", _set("runtime.port", 20000), "runtime key 'port' is not valid for kind tt-dit-server"),
    ("app_without_attribute", _set("runtime.app", "gr00t_p150.server.app"), 'requires runtime.app as "module.path'),
    ("app_package_not_shipped", _set("source.extra_code.0.paths", ["models", "scripts"]),
     "lives under 'gr00t_p150', which no allowlist entry ships"),
    ("app_module_missing", _set("runtime.app", "gr00t_p150.server.nothing:app"),
     "runtime.app module 'gr00t_p150.server.nothing' is not in the staged tree"),
    ("app_attribute_unbound", _set("runtime.app", "gr00t_p150.server.app:application"),
     "binds no top-level 'application'"),
    ("mesh_shape_env_unset", _set("runtime.mesh_shape_env", ...), "runtime.mesh_shape_env is not set"),
    ("torch_listed", _set("runtime.packages", ["torch==2.11.0"]), "must not list 'torch==2.11.0'"),
    ("numpy_unpinned", _set("runtime.packages", ["numpy>=1.24"]), "admits numpy 2"),
    ("package_not_pep508", _set("runtime.packages", ["numpy<2,,"]), "is not a PEP 508 requirement"),
    ("lock_missing", _set("runtime.lock", "requirements.lock"), "runtime.lock names 'requirements.lock'"),
    ("mesh_device_vs_hardware", _set("serve.mesh_device", "P150x2"),
     "mesh_device 'P150x2' opens a 1x2 mesh (2 chips) but hardware 'p150' implies 1"),
    ("hardware_is_a_mesh_sku", _set("serve.hardware", "QB2"), "'QB2' is a mesh_device SKU, not a board label"),
    ("mesh_device_unknown", _set("serve.mesh_device", "P150a"), "invalid mesh_device 'P150a'"),
    ("hardware_missing", _set("serve.hardware", ...), "serve profile 'default': hardware is required"),
    ("serve_key_unknown", _set("serve.workers", 2), "unknown key 'workers' in serve"),
    ("port_out_of_range", _set("serve.port", 80), "serve.port 80 is outside 1024-65535"),
    ("env_value_not_a_string", _set("serve.env.GR00T_WARMUP_RUNS", 3),
     "serve.env.GR00T_WARMUP_RUNS must be a string, got integer 3 (quote it in YAML)"),
    ("env_sets_hf_model", _set("serve.env.HF_MODEL", "nvidia/GR00T-N1.5-3B"), "serve.env sets HF_MODEL"),
    ("env_sets_mesh_shape", _set("serve.env.TT_MESH_SHAPE", "1x1"), "serve.env sets TT_MESH_SHAPE"),
    ("env_key_not_a_name", _set("serve.env.GR00T-VERSION", "n15"), "serve.env key 'GR00T-VERSION' is not a"),
    ("profiles_without_default", _set("serve_profiles", [{"name": "a"}, {"name": "b"}]),
     "must name a default_profile"),
    ("verify_line_does_not_compile", _set("verify", ["import os; for k in os.environ: pass"]),
     "verify[0] does not compile: invalid syntax"),
    ("verify_not_strings", _set("verify", ["assert 1", 2]), "verify[1] must be a string, got integer 2"),
    ("card_key_unknown", _set("card.usage", "x"), "unknown key 'usage' in card"),
]


@pytest.mark.parametrize("mutate, message", [v[1:] for v in VIOLATIONS], ids=[v[0] for v in VIOLATIONS])
def test_each_static_violation_is_one_clear_error(tmp_path, good, capsys, mutate, message):
    mutate(good)
    code, out = check(write(tmp_path, good), capsys, "--static-only")
    errors = [line for line in out.splitlines() if line.startswith("  error ")]
    assert code == 1, out
    assert len(errors) == 1 and message in errors[0], out


def test_yaml_problems_are_errors(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("repo: a/b\nserve: [\n")
    (tmp_path / "dupes.yaml").write_text("repo: a/b\nrepo: c/d\n")
    code, out = check(tmp_path / "broken.yaml", capsys)
    assert code == 1 and "[rule 1] not valid YAML" in out and "(line 3, column 1)" in out, out
    code, out = check(tmp_path / "dupes.yaml", capsys, "--static-only")
    assert code == 1 and "key 'repo' appears twice (line 2)" in out, out


def test_missing_publish_sections_are_a_warning_not_an_error(tmp_path, good, capsys):
    del good["card"]["performance"], good["card"]["limitations"]
    code, out = check(write(tmp_path, good), capsys, "--static-only")
    assert code == 0 and "warning  [rule 23] card has no performance and no limitations" in out, out
    assert "card: performance missing, limitations missing\n" in out


def test_false_line_fails_and_true_line_passes(tmp_path, good, capsys):
    good["verify"] = ["assert 1 == 2, 'one is not two'", "assert 1 == 1"]
    code, out = check(write(tmp_path, good), capsys)
    assert code == 1, out
    assert "FAIL  verify[0] assert 1 == 2" in out and "AssertionError: one is not two" in out
    assert "PASS  verify[1] assert 1 == 1" in out and "verify: 1 passed, 1 failed" in out


def test_opt_tt_metal_means_the_staged_tree(tmp_path, good, capsys):
    good["verify"] = [
        "from pathlib import Path; assert Path('/opt/tt-metal/gr00t_p150/server/smoke_test.py').is_file()",
        "from pathlib import Path; assert Path('/opt/tt-metal/scripts/bench_http.py').is_file()",
        "from pathlib import Path; assert Path('/opt/tt-metal/models/experimental/gr00t/common').is_dir()",
    ]
    good["source"]["extra_code"][0]["paths"] = ["models", "gr00t_p150"]  # scripts/ not shipped this time
    code, out = check(write(tmp_path, good), capsys)
    assert "PASS  verify[0]" in out and "FAIL  verify[1]" in out and "PASS  verify[2]" in out, out
    assert code == 1 and "verify: 2 passed, 1 failed" in out


def test_app_imports_only_from_the_staged_pythonpath(tmp_path, good, capsys):
    line = ("import os, gr00t_p150.server.app as a; assert a.app; "
            "assert os.path.dirname(os.path.dirname(a.__file__)) == '/opt/tt-metal/gr00t_p150', a.__file__")
    good["verify"] = [line]
    code, out = check(write(tmp_path, good), capsys)
    assert code == 0 and "PASS  verify[0]" in out, out
    # Not shipped, not importable, even though this venv may put the checkout's code/ on sys.path (.pth file).
    good["source"]["extra_code"][0]["paths"] = ["models", "scripts"]
    good["runtime"]["app"] = "scripts.bench_http:main"
    code, out = check(write(tmp_path, good), capsys)
    assert code == 1 and "static: 0 error(s)" in out, out
    assert "FAIL  verify[0]" in out and "ModuleNotFoundError: No module named 'gr00t_p150'" in out


def test_a_root_above_the_venv_keeps_site_packages_but_not_the_checkout(tmp_path, capsys):
    doc = good_manifest(str(CODE.parent))  # the repository root, which may hold .venv
    doc["source"]["extra_code"][0]["paths"] = ["code/scripts"]
    doc["verify"] = ["import yaml, packaging", "import gr00t_p150"]
    code, out = check(write(tmp_path, doc), capsys)
    assert code == 1 and "PASS  verify[0]" in out and "FAIL  verify[1]" in out, out
    assert "ModuleNotFoundError: No module named 'gr00t_p150'" in out


def test_verify_runs_in_the_build_environment(tmp_path, good, capsys, monkeypatch):
    monkeypatch.setenv("GR00T_VERSION", "n15")
    monkeypatch.setenv("TT_METAL_HOME", "/somewhere")
    monkeypatch.setenv("HF_MODEL", "nvidia/GR00T-N1.5-3B")
    home = os.path.expanduser("~")
    good["verify"] = [
        "import os; assert not [k for k in os.environ if k.startswith(('GR00T_', 'TT_')) or k == 'HF_MODEL']",
        "import os; assert os.environ['PYTHONPATH'] == '/opt/tt-metal', os.environ['PYTHONPATH']",
        f"import os; assert os.environ['HOME'] != {home!r} and os.path.isdir(os.environ['HOME'])",
    ]
    code, out = check(write(tmp_path, good), capsys)
    assert code == 0 and "verify: 3 passed, 0 failed" in out, out


def test_files_staging_drops_are_warned_about_and_absent(tmp_path, capsys):
    pkg = tmp_path / "tree" / "pkg"
    (pkg / "logs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text("import os\n\nif True:\n    app = os.environ.get('TT_MESH_SHAPE')\n")
    (pkg / "weights.pt").write_bytes(b"\0")
    (pkg / "logs" / "boot.txt").write_text("x")
    doc = good_manifest("tree")
    doc["source"]["extra_code"][0]["paths"] = ["pkg"]
    doc["runtime"]["app"] = "pkg.app:app"
    doc["verify"] = ["from pathlib import Path; assert not Path('/opt/tt-metal/pkg/weights.pt').exists()",
                     "from pathlib import Path; assert Path('/opt/tt-metal/pkg/app.py').is_file()"]
    code, out = check(write(tmp_path, doc), capsys)
    warning = next(line for line in out.splitlines() if "[rule 14]" in line)
    assert code == 0 and "verify: 2 passed, 0 failed" in out, out
    assert "2 file(s) that tt-model's staging drops silently" in warning
    assert "pkg/weights.pt (*.pt)" in warning and "pkg/logs/boot.txt (logs)" in warning


def test_mesh_shape_env_the_server_never_reads_is_a_warning(tmp_path, good, capsys):
    good["runtime"]["mesh_shape_env"] = "GR00T_MESH"
    code, out = check(write(tmp_path, good), capsys, "--static-only")
    assert code == 0 and "'GR00T_MESH' appears nowhere in the 'gr00t_p150' package" in out, out


def run_tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], check=False, capture_output=True, text=True,
                          timeout=60)


def test_cli_exit_codes_and_one_line_usage_error(tmp_path, good):
    proc = run_tool(tmp_path / "absent.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"verify_manifest: error: manifest not found: {tmp_path / 'absent.yaml'}"
    bad = copy.deepcopy(good)
    bad["schema"] = 5.1
    proc = run_tool(write(tmp_path, good, "good.yaml"), write(tmp_path, bad, "bad.yaml"), "--static-only")
    assert proc.returncode == 1 and proc.stdout.count("static: 0 error(s)") == 1, proc.stdout

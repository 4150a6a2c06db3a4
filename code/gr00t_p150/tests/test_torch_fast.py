# SPDX-License-Identifier: Apache-2.0
"""The torch backend's path and dtype settings: GR00T_TORCH_PATH picks the fast path or the fp32
reference, GR00T_TORCH_DTYPE=auto takes bf16 only on a CPU with native bf16 matrix instructions, bf16 needs the
fast path, a server on the fast path boots through the fidelity gate and answers within 1e-4 of the reference on
the tiny checkpoint, and a bf16 CPU server boots through the gate too, deterministically."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from gr00t_p150.backends.torch_backend import TorchBackend, resolve_torch_dtype, resolve_torch_path
from gr00t_p150.server.app import create_app
from gr00t_p150.server.settings import SettingError, load_config
from models.experimental.gr00t.common.quality import FP32_ACTION_ATOL, max_abs_diff


def test_torch_path_and_dtype_settings_are_read_and_checked():
    c = load_config({"GR00T_VERSION": "n15"})
    assert (c.torch_path, c.torch_dtype) == ("auto", "auto")
    c = load_config({"GR00T_VERSION": "n15", "GR00T_TORCH_PATH": "fast", "GR00T_TORCH_DTYPE": "bfloat16"})
    assert (c.torch_path, c.torch_dtype) == ("fast", "bfloat16")
    with pytest.raises(SettingError, match="GR00T_TORCH_PATH"):
        load_config({"GR00T_VERSION": "n15", "GR00T_TORCH_PATH": "turbo"})
    with pytest.raises(SettingError, match="GR00T_TORCH_DTYPE"):
        load_config({"GR00T_VERSION": "n15", "GR00T_TORCH_DTYPE": "float16"})


@pytest.mark.parametrize(
    "requested, device, dtype, path",
    [("auto", "cpu", "float32", "reference"), ("auto", "cuda", "float32", "fast"), ("auto", "cuda", "bfloat16", "fast"),
     ("fast", "cpu", "float32", "fast"), ("reference", "cuda", "float32", "reference"),
     ("auto", "cpu", "bfloat16", "fast")],
)
def test_auto_is_the_fast_path_on_cuda_or_in_bf16_and_the_golden_on_an_fp32_cpu(requested, device, dtype, path):
    assert resolve_torch_path(requested, device, dtype)[0] == path


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bf16_needs_the_fast_path(device):
    with pytest.raises(RuntimeError, match="fp32 golden"):
        resolve_torch_path("reference", device, "bfloat16")


@pytest.mark.parametrize(
    "requested, device, path, units, dtype, why",
    [("auto", "cpu", "auto", ["AVX512-BF16"], "bfloat16", "native bf16 matrix instructions (AVX512-BF16)"),
     ("auto", "cpu", "fast", ["AMX-BF16", "AVX512-BF16"], "bfloat16", "(AMX-BF16, AVX512-BF16)"),
     ("auto", "cpu", "auto", [], "float32", "no native bf16 matrix instructions"),
     ("auto", "cpu", "reference", ["AVX512-BF16"], "float32", "reference is the fp32 golden"),
     ("auto", "cuda", "auto", [], "float32", "fp32 on CUDA"),
     ("bfloat16", "cpu", "auto", [], "bfloat16", "GR00T_TORCH_DTYPE=bfloat16"),
     ("float32", "cpu", "auto", ["AMX-BF16"], "float32", "GR00T_TORCH_DTYPE=float32")],
    ids=["avx512bf16", "amx", "zen3_like", "reference", "cuda", "explicit_bf16", "explicit_fp32"],
)
def test_auto_dtype_is_bf16_only_on_a_cpu_with_native_bf16_units(requested, device, path, units, dtype, why):
    got, reason = resolve_torch_dtype(requested, device, path, units=units)
    assert got == dtype and why in reason, reason


def test_this_cpu_s_bf16_units_are_what_its_flags_say():
    """torch's cpuinfo (what auto reads) agrees with the kernel's CPU flags."""
    from gr00t_p150.backends.torch_backend import cpu_bf16_units

    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    units = cpu_bf16_units()
    assert ("AVX512-BF16" in units) == ("avx512_bf16" in flags)
    assert ("AMX-BF16" in units) == ("amx_bf16" in flags)


@pytest.mark.parametrize("version", ["n15", "n16", "n17"])
def test_a_bf16_cpu_server_boots_through_the_gate_and_answers_deterministically(server_env, version):
    """Forced bf16 (emulated on a CPU without native bf16: slower, the same numbers), tiny checkpoint."""
    from models.experimental.gr00t.common.quality import BF16_ACTION_PCC_MIN, pcc

    env = {**server_env, "GR00T_VERSION": version, "GR00T_TORCH_DTYPE": "bfloat16"}
    with TestClient(create_app(load_config(env))) as c:
        info = c.get("/info").json()
        demo = c.get("/demo").json()
        first = c.post("/predict", json=demo["request"]).json()
        again = c.post("/predict", json=demo["request"]).json()
    assert info["stage"] == "fast-bf16-cpu" and info["backend"]["dtype_reason"] == "GR00T_TORCH_DTYPE=bfloat16"
    assert info["fidelity"]["passed"] and info["fidelity"]["deterministic"]
    assert again["actions"] == first["actions"]  # bit-identical on one machine
    want = demo["expected"]["actions"]
    scores = {k: pcc(first["actions"][k], want[k]) for k in want}
    assert min(scores.values()) >= BF16_ACTION_PCC_MIN, scores
    assert first["backend"]["dtype"] == "bfloat16"


def test_fast_backend_shares_the_reference_weights_and_matches_it(tiny_checkpoint, gr1_observation):
    fast = TorchBackend(tiny_checkpoint, "n15", "gr1", "cpu", "float32", "test", path="fast")
    assert fast.path == "fast" and not fast.is_reference
    assert fast.reference_policy.model is fast.policy.model  # one copy of the weights
    assert fast.describe()["fast_path"] == {"padded": False, "fused": False, "cuda_graphs": False,
                                            "dtype": "torch.float32"}
    got = fast.predict(gr1_observation, seed=4)
    want = fast.reference_policy.get_action(gr1_observation, seed=4)
    assert max_abs_diff(got.action_pred, want.action_pred) < FP32_ACTION_ATOL
    assert {f"device.dit_step_{i}" for i in range(4)} <= set(got.timing_ms)


def test_a_server_on_the_fast_path_boots_through_the_gate(server_env, monkeypatch):
    env = {**server_env, "GR00T_TORCH_PATH": "fast"}
    monkeypatch.setenv("GR00T_TORCH_PATH", "fast")  # for an engine that does not pass the setting through
    with TestClient(create_app(load_config(env))) as c:
        info = c.get("/info").json()
        request = c.get("/demo").json()["request"]
        response = c.post("/predict", json=request)
        # RTC on the fast path: inpaint runs (frozen steps = the previous chunk's), guided is refused by name
        del request["noise"]
        session = {"session_id": "fast-arm", "control_hz": 30}
        first = c.post("/predict", json={**request, **session, "seq": 0, "seed": 1}).json()
        second = c.post("/predict", json={**request, **session, "seq": 1, "seed": 2,
                                          "rtc": {"variant": "inpaint", "delay": 3}}).json()
        guided = c.post("/predict", json={**request, **session, "seq": 2, "rtc": {"variant": "guided"}})
    assert info["rtc"]["variants"] == ["inpaint"] and "guided" in info["rtc"]["not_here"]
    plan = second["rtc"]
    off, frozen = plan["offset"], plan["frozen"]
    assert frozen == min(3, 16 - off) > 0, plan
    for k, v in first["actions"].items():
        assert second["actions"][k][:frozen] == v[off:off + frozen], k  # N1.5 absolute actions: exact
    assert guided.status_code == 400 and guided.json()["error"]["field"] == "rtc.variant"
    assert info["backend"]["path"] == "fast" and info["backend"]["is_fp32_reference"] is False
    assert info["stage"] == "fast-fp32-cpu"
    f = info["fidelity"]
    assert f["passed"] and f["pcc"] > 0.99999
    assert max(g["max_abs"] for g in f["per_group"].values()) < 1e-3  # physical units, vs the shipped golden
    assert response.status_code == 200


@pytest.fixture
def gr1_observation():
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.layouts import GR1
    from models.experimental.gr00t.common.observation import parse_observation

    return parse_observation(load_demo_request("n15"), GR1)


def test_the_stage_names_what_a_cuda_bf16_server_would_serve():
    from gr00t_p150.backends.torch_backend import TorchBackend

    backend = object.__new__(TorchBackend)  # the naming only: this machine has no CUDA device to load onto
    backend.path, backend.dtype, backend.device = "fast", "bfloat16", "cuda"
    assert backend.stage == "fast-bf16-cuda"

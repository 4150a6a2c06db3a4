# SPDX-License-Identifier: Apache-2.0
"""Math fidelity: the golden model's emulation against a bit-level reference, the per-block fidelity tables, and
the ``vit_fork`` switch (``GR00T_VIT_FORK``) from the environment to the vision towers' compute configs."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.tt.policy import MATH_FIDELITIES, VIT_FORK_FIDELITY, TTPolicy, fidelity_of
from models.experimental.gr00t.tt.tools.golden_ops import fidelity_product, golden_execution

# The products each fidelity adds, as (srcA part, srcB part): srcA = in1 (the weight), srcB = in0 (the activation).
PHASES = {"LoFi": [("hi", "hi")], "HiFi2": [("hi", "hi"), ("lo", "hi")],
          "HiFi3": [("hi", "hi"), ("lo", "hi"), ("hi", "lo")],
          "HiFi4": [("hi", "hi"), ("lo", "hi"), ("hi", "lo"), ("lo", "lo")]}


def _fields(t: torch.Tensor):
    """bf16 values → (sign ±1, unbiased exponent of the 8-bit significand's LSB, 8-bit significand), int64;
    zeros (and the bf16 subnormals a device flushes) get significand 0."""
    bits = t.bfloat16().view(torch.int16).to(torch.int64) & 0xFFFF
    sign = 1 - 2 * (bits >> 15)
    exp = (bits >> 7) & 0xFF
    sig = torch.where(exp > 0, (bits & 0x7F) | 0x80, torch.zeros_like(bits))
    return sign, exp - 127 - 7, sig


def bit_level_matmul(x: torch.Tensor, w: torch.Tensor, fidelity: str) -> torch.Tensor:
    """The reference: every product of in0 ``x`` [M, K] and in1 ``w`` [K, N] formed from integer significands split
    as the 5 × 7-bit multiplier takes them (srcA = w: 5 bits = hidden + 4 MSBs, then 3 LSBs; srcB = x: 7 bits =
    hidden + 6 MSBs, then the last bit), only the fidelity's passes summed, then scaled and summed over K in
    float64 (exact for these magnitudes)."""
    sx, ex, mx = (f[:, :, None] for f in _fields(x))  # [M, K, 1]
    sw, ew, mw = (f[None] for f in _fields(w))  # [1, K, N]
    parts_a = {"hi": (mw >> 3) << 3, "lo": mw & 0x7}  # srcA: significand = hi + lo
    parts_b = {"hi": (mx >> 1) << 1, "lo": mx & 0x1}  # srcB
    prod = sum(parts_a[a] * parts_b[b] for a, b in PHASES[fidelity])  # integer, exact
    value = (sx * sw * prod).double() * torch.pow(2.0, (ex + ew).double())
    return value.sum(dim=1)


def _operands(seed: int, m=8, k=64, n=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16().float()
    w = (torch.randn(k, n, generator=g) * 0.05).bfloat16().float()
    x[0, :3] = 0.0  # zeros take the zero significand
    return x, w


@pytest.mark.parametrize("fidelity", MATH_FIDELITIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fidelity_product_equals_the_bit_level_reference(fidelity, seed):
    x, w = _operands(seed)
    ref = bit_level_matmul(x, w, fidelity)
    got = fidelity_product(x, w, fidelity).double()
    scale = (x.abs() @ w.abs()).double()  # the fp32 accumulation's error bound scales with this
    assert ((got - ref).abs() <= 5e-7 * scale + 1e-30).all(), (fidelity, float(((got - ref).abs() / scale).max()))
    exact = x.double() @ w.double()
    if fidelity == "HiFi4":
        assert torch.allclose(ref, exact, rtol=0, atol=1e-12)
    else:  # each lower fidelity really drops something the tolerance above would notice
        assert ((ref - exact).abs() / scale).max() > 1e-5


def test_swapped_operands_fail_the_reference():
    """The negative control: srcA / srcB the other way round (the activation's 4 MSBs, the weight's 6) is not
    what the reference computes, at every fidelity below HiFi4."""
    x, w = _operands(3)
    for fidelity in ("LoFi", "HiFi2", "HiFi3"):
        ref = bit_level_matmul(x, w, fidelity)
        swapped = fidelity_product(w.T.contiguous(), x.T.contiguous(), fidelity).T.double()
        assert ((swapped - ref).abs() / (x.abs() @ w.abs()).double()).max() > 1e-5, fidelity


def test_the_golden_linear_takes_the_fidelity_from_its_compute_config(mock_device):
    import ttnn

    x, w = _operands(4, m=32, k=64, n=32)
    outs = {}
    for precision in ("device", "device_fidelity", "fp32"):
        with golden_execution(precision) as shim:
            for fid in MATH_FIDELITIES:
                cfg = shim.init_device_compute_kernel_config(None, math_fidelity=getattr(ttnn.MathFidelity, fid),
                                                             fp32_dest_acc_en=True)
                outs[precision, fid] = shim.linear(x[None], shim.from_torch(w), compute_kernel_config=cfg)
    for fid in MATH_FIDELITIES:
        want = fidelity_product(x[None], w, fid).bfloat16().float()
        assert torch.equal(outs["device_fidelity", fid], want), fid
        assert torch.equal(outs["device", fid], outs["device", "HiFi4"])  # "device" multiplies exactly
        assert torch.equal(outs["fp32", fid], outs["fp32", "HiFi4"])
    assert not torch.equal(outs["device_fidelity", "HiFi2"], outs["device_fidelity", "HiFi4"])


def test_fidelity_specs_and_the_vit_fork_switch():
    assert [fidelity_of("HiFi3:0-5,HiFi2", i) for i in (0, 5, 6, 23)] == ["HiFi3", "HiFi3", "HiFi2", "HiFi2"]
    assert fidelity_of("LoFi:3,HiFi4", 3) == "LoFi" and fidelity_of("LoFi:3,HiFi4", 4) == "HiFi4"
    for bad in ("HiFi5", "HiFi3:0-5"):
        with pytest.raises(ConfigError):
            fidelity_of(bad, 7)
    tuned, verbatim = TTPolicy(), TTPolicy(vit_fork=False)
    assert tuned.vit_fork and tuned.to_dict()["vit_fork"] is True
    assert tuned.vision_fidelity() == VIT_FORK_FIDELITY
    assert set(verbatim.vision_fidelity().values()) == {"HiFi4"}
    assert tuned.with_env_overrides({"GR00T_VIT_FORK": "0"}) == verbatim
    assert verbatim.with_env_overrides({"GR00T_VIT_FORK": "1"}) == tuned
    assert verbatim.with_env_overrides({}) == verbatim
    for bad in ("true", "2", ""):
        with pytest.raises(ConfigError, match="GR00T_VIT_FORK"):
            tuned.with_env_overrides({"GR00T_VIT_FORK": bad})
    with pytest.raises(ConfigError, match="GR00T_VIT_FORK"):
        TTPolicy(vit_fork="1")


@pytest.mark.parametrize("vit_fork", [True, False])
def test_vision_blocks_run_at_their_table_fidelity_on_the_mock(mock_device, vit_fork):
    """The Qwen3-VL and SigLIP blocks' matmuls carry their block's fidelity in the compute config the mock
    validates (read back from the graph capture, as the roofline census reads it); everything else stays HiFi4
    (bf16 weights) or HiFi2 (bfloat8_b)."""
    import ttnn

    from models.experimental.gr00t.tt.ttnn_common import DeviceWeights, linear

    w = DeviceWeights(mock_device, {
        "p.weight": ttnn.from_torch(torch.zeros(64, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                    device=mock_device)}, TTPolicy(vit_fork=vit_fork))
    x = ttnn.from_torch(torch.zeros(1, 64, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=mock_device)
    for tower, depth in (("qwen3vl", 24), ("siglip", 27)):
        got = []
        for i in range(depth):
            fid = w.block_fidelity(tower, i)
            with ttnn.manage_config("enable_fast_runtime_mode", False):
                ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
                linear(w, x, "p", bias=False, fidelity=fid)
                graph = ttnn.graph.end_graph_capture()
            from models.experimental.gr00t.tt.tools.census import device_ops

            (op,) = [o for o in device_ops(graph) if o.name.startswith("Matmul")]
            got.append(op.fidelity)
        want = [fidelity_of(VIT_FORK_FIDELITY[tower], i) if vit_fork else "HiFi4" for i in range(depth)]
        assert got == want, (tower, got)
    assert w.compute_config(w["p.weight"]).math_fidelity == ttnn.MathFidelity.HiFi4  # no block: HiFi4


def test_the_server_reads_gr00t_vit_fork():
    """The published N1.7 package's verify line: ``load_config().vit_fork`` under ``GR00T_VIT_FORK=1``; "0" turns
    it off, anything else fails at boot naming the variable; the TT backend hands it to ``TTPolicy``."""
    import inspect

    from gr00t_p150.backends import ttnn_backend
    from gr00t_p150.server.exceptions import SettingError
    from gr00t_p150.server.settings import load_config

    env = {"GR00T_VERSION": "n17"}
    assert load_config(env).vit_fork is True
    assert load_config({**env, "GR00T_VIT_FORK": "1"}).vit_fork is True
    assert load_config({**env, "GR00T_VIT_FORK": "0"}).vit_fork is False
    with pytest.raises(SettingError, match="GR00T_VIT_FORK"):
        load_config({**env, "GR00T_VIT_FORK": "yes"})
    assert "vit_fork=vit_fork" in inspect.getsource(ttnn_backend.TTNNBackend.__init__)

# SPDX-License-Identifier: Apache-2.0
"""Run the TT-NN modules on the host with every ttnn op replaced by ttnn's own golden function.

A mock P150 validates shapes, program configs and memory budgets but computes nothing, and no card is
here to compute. What remains checkable without hardware is the *data flow* of the port: fused and
head-padded weights, head splits, masks, the splice, slicing of the action rows, the Euler update. This
module gives each TT module a stand-in for the ``ttnn`` module in which an op is
``ttnn.get_golden_function(op)`` — the torch semantics Tenstorrent publishes for it — on torch
tensors. Run that way, the port must reproduce the independently tested fp32 reference; a wrong
transpose, head order, mask or slice shows up as a large difference.

Device plumbing (tensor creation, upload, buffers, sync) becomes plain torch. Four precisions:
- ``"fp32"``: everything float32, nothing rounded — the data-flow check (must equal the reference);
- ``"device"``: an *estimate* of the device's numerics. Every tensor created with ``from_torch`` is
  rounded through ttnn's own host conversion to its device dtype (bf16 / bfloat8_b weights, bf16
  activations); every op's output is rounded to its device dtype (bf16, or fp32 for the Euler state).
  Matmuls multiply the rounded operands exactly and accumulate in fp32, as ``fp32_dest_acc_en`` does;
  what this does not model: the reduced multiplier fidelity of HiFi2, the device's own rounding mode
  and its SFPU approximations (exp, tanh, rsqrt). Device-fp32 tensors are carried as float64 so that
  an op's output dtype follows torch's promotion rules.
- ``"device_fidelity"`` (alias ``"device_hifi2"``, its name when only the bfloat8_b matmuls ran below HiFi4):
  ``"device"`` plus the multiplier's math fidelity, exactly, for every ``linear`` / ``matmul`` from the
  ``math_fidelity`` of its ``compute_kernel_config`` (without one: HiFi2 on a bfloat8_b weight, else HiFi4, as
  ``DeviceWeights.compute_config`` picks). See ``fidelity_product`` for the bit split and its sources. Still not
  modelled: SFPU approximations (``math_approx_mode``), SDPA's internal formats and flash blocks (SDPA runs
  HiFi4 here), the packer's rounding.
Nothing here is used on the serving path.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref

import torch

# The TT modules (of ``tt/``) that do ``import ttnn`` at module level; their ``ttnn`` global is swapped.
_TT_PACKAGE = __package__.rpartition(".")[0]
TT_MODULES = ("ttnn_common", "ttnn_siglip", "ttnn_qwen3", "ttnn_eagle", "ttnn_dit", "ttnn_action_head",
              "ttnn_gr00t", "ttnn_gr00t_n15", "ttnn_qwen3vl", "ttnn_gr00t_n17", "ttnn_eagle3",
              "ttnn_gr00t_n16")


class _HostDevice:
    def arch(self):
        return None


HOST_DEVICE = _HostDevice()


def _strip(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in ("memory_config", "compute_kernel_config", "program_config",
                                                          "device", "layout", "dtype")}


class _Namespace(types.SimpleNamespace):
    pass


PRECISIONS = ("fp32", "device", "device_fidelity", "device_hifi2")
FIDELITY_PRECISIONS = ("device_fidelity", "device_hifi2")  # the same model (the second is the older name)
_BFP8: dict[int, weakref.ref] = {}  # host stand-ins of bfloat8_b device tensors (their matmuls run HiFi2)


def _is_bfp8(t) -> bool:
    r = _BFP8.get(id(t))
    return r is not None and r() is t


def truncate_last_bf16_bit(x: torch.Tensor) -> torch.Tensor:
    """float32 carrying bf16 values → the same with the lowest bf16 mantissa bit cleared (towards zero)."""
    return (x.float().contiguous().view(torch.int32) & ~(1 << 16)).view(torch.float32)


def keep_mantissa_msbs(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 → the same with only the ``bits`` most significant explicit mantissa bits kept (towards zero)."""
    return (x.float().contiguous().view(torch.int32) & ~((1 << (23 - bits)) - 1)).view(torch.float32)


SRC_A_MSB_BITS = 4  # srcA (in1, the weight): hidden bit + 4 mantissa MSBs per phase
SRC_B_MSB_BITS = 6  # srcB (in0, the activation): hidden bit + 6 mantissa MSBs per phase


def fidelity_product(x: torch.Tensor, w: torch.Tensor, fidelity: str | None) -> torch.Tensor:
    """``x @ w`` (x = in0, w = in1, bf16 values carried in float32) as a Tensix matmul at ``fidelity`` computes it.

    The FPU multiplier is 5 bit × 7 bit: each pass multiplies 5 bits of the srcA operand (hidden bit + 4 mantissa
    bits) by 7 bits of the srcB operand (hidden bit + 6 mantissa bits); LoFi runs one pass (srcA MSBs × srcB MSBs),
    HiFi2 adds srcA's LSBs × srcB's MSBs, HiFi3 adds srcA's MSBs × srcB's LSBs, HiFi4 adds srcA's LSBs × srcB's LSBs
    (tt-metal ``tech_reports/matrix_engine/matrix_engine.md``, "Math Fidelity"). A matmul unpacks in0 to srcB and in1
    to srcA (tt-metal ``llk_unpack_AB_matmul_api.h``: "In0 -> srcB", "In1 -> srcA"), and tt-metal's own matmul
    tile test masks in0 with 0xFFFE (the last bf16 mantissa bit) for HiFi2 / LoFi (``test_matmul_X_tile.cpp``
    ``set_math_fid_masks``). A bf16 (or bfloat8_b: ≤ 7 significant bits) weight has 7 mantissa bits, so with
    ``w = wM + wL`` (its 4 mantissa MSBs / the other 3) and ``x = xM + xL`` (6 MSBs / the last bit), per product:
    LoFi ``xM·wM``, HiFi2 ``xM·w``, HiFi3 ``xM·w + xL·wM`` (= exact − ``xL·wL``), HiFi4 ``x·w``. The passes'
    partial products accumulate in fp32 (``fp32_dest_acc_en``), as these float32 matmuls do. Checked against a
    bit-level integer reference in ``tests/mock/test_tt_fidelity.py``. float64 carriers (fp32 device tensors,
    whose srcA/srcB split is not modelled) and ``fidelity`` None / HiFi4 multiply exactly."""
    if fidelity in (None, "HiFi4") or x.dtype != torch.float32 or w.dtype != torch.float32:
        return x @ w.to(x.dtype)
    xm = keep_mantissa_msbs(x, SRC_B_MSB_BITS)
    if fidelity == "HiFi2":
        return xm @ w
    wm = keep_mantissa_msbs(w, SRC_A_MSB_BITS)
    if fidelity == "LoFi":
        return xm @ wm
    if fidelity == "HiFi3":
        return xm @ w + (x - xm) @ wm
    raise ValueError(f"math fidelity {fidelity!r}")


def _fidelity_name(config) -> str | None:
    f = getattr(config, "math_fidelity", None)
    return None if f is None else str(f).rpartition(".")[2]


def _round(t):
    """Round an op's output to its device dtype: float32 carries bf16 values, float64 carries fp32 ones."""
    if isinstance(t, (tuple, list)):
        return type(t)(_round(x) for x in t)
    if not isinstance(t, torch.Tensor):
        return t
    if t.dtype == torch.float64:
        return t.float().double()
    if t.dtype == torch.float32:
        return t.bfloat16().float()
    return t


def golden_ttnn(precision: str = "fp32"):
    """A stand-in ``ttnn`` module (see the module docstring)."""
    import ttnn

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {PRECISIONS}")
    device, fidelity_model = precision != "fp32", precision in FIDELITY_PRECISIONS
    from ttnn.operations.activations import get_golden_function_for_activation

    def fidelity_of(b, compute_kernel_config) -> str:
        """The multiplier fidelity of a matmul whose in1 is ``b``: its config's, else ``DeviceWeights``' rule."""
        return _fidelity_name(compute_kernel_config) or ("HiFi2" if _is_bfp8(b) else "HiFi4")

    def product(a, b, compute_kernel_config, transpose_a=False, transpose_b=False):
        if transpose_a:
            a = a.transpose(-1, -2)
        if transpose_b:
            b = b.transpose(-1, -2)
        return fidelity_product(a, b, fidelity_of(b, compute_kernel_config)) if fidelity_model else a @ b.to(a.dtype)

    def golden(op):
        fn = ttnn.get_golden_function(op)
        if not device:
            return lambda *args, **kwargs: fn(*args, **_strip(kwargs))
        return lambda *args, **kwargs: _round(fn(*args, **_strip(kwargs)))

    def sdpa(q, k, v, *, output_concat_heads=False, **kwargs):
        """ttnn's SDPA golden, plus ``output_concat_heads`` as its docstring defines it: the heads side by side,
        [b, 1, s, H·dh] (the golden function itself ignores the flag)."""
        o = golden(ttnn.transformer.scaled_dot_product_attention)(q, k, v, **kwargs)
        if output_concat_heads:
            b, h, s, d = o.shape
            o = o.permute(0, 2, 1, 3).reshape(b, 1, s, h * d)
        return o

    def linear(x, weight, *args, program_config=None, compute_kernel_config=None, **kwargs):
        """ttnn's linear golden (its arithmetic: ``x @ w + bias``, then the activation; here with the matmul at its
        config's math fidelity under ``device_fidelity``); an activation fused into ``program_config``
        (``matmul_configs``) is applied before the one rounding of the output, as the fused program does."""
        if args or set(kwargs) - {"bias", "activation", "memory_config", "dtype"}:
            raise TypeError(f"golden linear: unsupported arguments {args} {sorted(kwargs)}")
        out = product(x, weight, compute_kernel_config)
        if kwargs.get("bias") is not None:
            out = out + kwargs["bias"]
        fused = getattr(program_config, "fused_activation", None) or kwargs.get("activation")
        if fused is not None:
            out = get_golden_function_for_activation(getattr(fused, "op_type", fused))(out)
        while out.dim() > x.dim():
            out = out.squeeze(0)
        return _round(out) if device else out

    def matmul(a, b, transpose_a=False, transpose_b=False, *, compute_kernel_config=None, program_config=None,
               **kwargs):
        """ttnn's matmul golden (``a @ b``; no fused activation in the port: a ``program_config`` only places the
        work, so it is refused when it fuses one), at its config's fidelity."""
        if getattr(program_config, "fused_activation", None) is not None:
            raise TypeError("golden matmul: a program config with a fused activation")
        if set(kwargs) - {"memory_config", "dtype"}:
            raise TypeError(f"golden matmul: unsupported arguments {sorted(kwargs)}")
        out = product(a, b, compute_kernel_config, transpose_a, transpose_b)
        while out.dim() > a.dim():
            out = out.squeeze(0)
        return _round(out) if device else out

    def rotary_embedding_hf(x, cos, sin, **_):
        """HF-style RoPE as ``rotary_embedding_hf``'s docstring defines it (the op has no golden function):
        ``x·cos + rotate_half(x)·sin`` over the stored head width; on the device one kernel, so one rounding."""
        half = x.shape[-1] // 2
        out = x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin
        return _round(out) if device else out

    def as_dtype(t, dtype):
        if dtype in (ttnn.uint32, ttnn.int32):
            return t.to(torch.int64)
        if not device:
            return t.float()
        if dtype == ttnn.float32:
            return t.float().double()
        lay = ttnn.TILE_LAYOUT if dtype == ttnn.bfloat8_b else ttnn.ROW_MAJOR_LAYOUT  # bfloat8_b exists only tiled
        return ttnn.to_torch(ttnn.from_torch(t.float(), dtype=dtype, layout=lay)).float()

    def from_torch(t, dtype=None, layout=None, device=None, **_):
        out = as_dtype(torch.as_tensor(t), dtype or ttnn.bfloat16)
        if dtype == ttnn.bfloat8_b:
            key = id(out)
            _BFP8[key] = weakref.ref(out, lambda _, key=key: _BFP8.pop(key, None))
        return out

    def allocate_tensor_on_device(shape, dtype, layout, device, memory_config=None):
        return as_dtype(torch.zeros(list(shape)), dtype)

    def copy_host_to_device_tensor(host, dev, *_, **__):
        dev.copy_(host)

    shim = _Namespace(
        **{name: getattr(ttnn, name) for name in ("TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "DRAM_MEMORY_CONFIG", "bfloat16",
                                                  "bfloat8_b", "float32", "uint32", "int32", "Shape", "MathFidelity",
                                                  "GeluVariant", "Tensor", "UnaryWithParam", "UnaryOpType")},
        from_torch=from_torch, to_torch=lambda t, **_: t, to_device=lambda t, *a, **k: t,
        allocate_tensor_on_device=allocate_tensor_on_device, copy_host_to_device_tensor=copy_host_to_device_tensor,
        synchronize_device=lambda *a, **k: None,
        init_device_compute_kernel_config=lambda arch, *a, **k: _Namespace(**k),  # its settings, readable
        typecast=lambda x, dtype, **k: as_dtype(x, dtype),
        linear=linear, matmul=matmul,
        **{name: golden(getattr(ttnn, name)) for name in ("layer_norm", "rms_norm", "gelu",
                                                          "permute", "reshape", "add", "mul", "multiply", "silu",
                                                          "relu", "embedding", "slice", "concat", "addcmul", "where",
                                                          "pad")},
        experimental=_Namespace(rotary_embedding_hf=rotary_embedding_hf),
        transformer=_Namespace(scaled_dot_product_attention=sdpa, **{name: golden(getattr(ttnn.transformer, name))
                                                                     for name in ("concatenate_heads",
                                                                                  "split_query_key_value_and_split_heads")}),
    )
    return shim


@contextlib.contextmanager
def golden_execution(precision: str = "fp32"):
    """Inside the block, the TT modules' ``ttnn`` is the golden stand-in."""
    from .. import (ttnn_action_head, ttnn_common, ttnn_dit, ttnn_eagle, ttnn_eagle3, ttnn_gr00t,  # noqa: F401
                    ttnn_gr00t_n15, ttnn_gr00t_n16, ttnn_gr00t_n17, ttnn_qwen3, ttnn_qwen3vl, ttnn_siglip)

    shim = golden_ttnn(precision)
    modules = [sys.modules[f"{_TT_PACKAGE}.{name}"] for name in TT_MODULES]
    saved = [m.ttnn for m in modules]
    for m in modules:
        m.ttnn = shim
    cast, ttnn_gr00t.host_cast = ttnn_gr00t.host_cast, lambda t, dtype: t  # inputs reach the shim in fp32
    try:
        yield shim
    finally:
        for m, original in zip(modules, saved):
            m.ttnn = original
        ttnn_gr00t.host_cast = cast


class GoldenModel:
    """A ``TtGr00tN15`` / ``TtGr00tN17`` built on host weights (converted by the same ``device_tensors`` rules
    and the same dtype policy as the device cache) for golden execution. Call its methods inside ``execution()``."""

    def __init__(self, model, precision: str, weights=None):
        self.model, self.precision, self.weights = model, precision, weights  # weights: its ``DeviceWeights``

    def execution(self):
        return golden_execution(self.precision)

    def __getattr__(self, name):
        return getattr(self.model, name)


def golden_tt_model(checkpoint, config, layout, precision: str = "fp32", policy=None, batch: int = 1) -> GoldenModel:
    from ..policy import TTPolicy
    from ..ttnn_common import DeviceWeights
    from ..ttnn_policy import build_tt_model
    from ..weight_cache import device_tensors_for

    device_tensors = device_tensors_for(layout.version)
    policy = policy or TTPolicy()
    with golden_execution(precision) as shim:
        weights = {name: shim.from_torch(t, dtype=getattr(shim, policy.weight_dtype(name)))
                   for name, t, _ in device_tensors(lambda n: checkpoint.load(n, torch.float32), list(checkpoint.names),
                                                    config, layout)}
        device_weights = DeviceWeights(HOST_DEVICE, weights, policy)
        model = build_tt_model(device_weights, config, layout, batch)
    return GoldenModel(model, precision, device_weights)

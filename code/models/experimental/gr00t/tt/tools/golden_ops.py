# SPDX-License-Identifier: Apache-2.0
"""Run the TT-NN modules on the host with every ttnn op replaced by ttnn's own golden function.

A mock P150 validates shapes, program configs and memory budgets but computes nothing, and no card is
here to compute. What remains checkable without hardware is the *data flow* of the port: fused and
head-padded weights, head splits, masks, the splice, slicing of the action rows, the Euler update. This
module gives each TT module a stand-in for the ``ttnn`` module in which an op is
``ttnn.get_golden_function(op)`` — the torch semantics Tenstorrent publishes for it — on torch
tensors. Run that way, the port must reproduce the independently tested fp32 reference; a wrong
transpose, head order, mask or slice shows up as a large difference.

Device plumbing (tensor creation, upload, buffers, sync) becomes plain torch. Three precisions:
- ``"fp32"``: everything float32, nothing rounded — the data-flow check (must equal the reference);
- ``"device"``: an *estimate* of the device's numerics. Every tensor created with ``from_torch`` is
  rounded through ttnn's own host conversion to its device dtype (bf16 / bfloat8_b weights, bf16
  activations); every op's output is rounded to its device dtype (bf16, or fp32 for the Euler state).
  Matmuls multiply the rounded operands exactly and accumulate in fp32, as ``fp32_dest_acc_en`` does;
  what this does not model: the reduced multiplier fidelity of HiFi2, the device's own rounding mode
  and its SFPU approximations (exp, tanh, rsqrt). Device-fp32 tensors are carried as float64 so that
  an op's output dtype follows torch's promotion rules.
- ``"device_hifi2"``: ``"device"`` plus the one fidelity effect that is exactly modellable (``ttnn_audit.md``
  §1.3): a HiFi2 matmul (every matmul on a bfloat8_b weight) keeps the weight's mantissa but truncates the
  activation to 7 significant bits, i.e. drops the last bf16 mantissa bit towards zero. Modelled by clearing
  that bit of the activation before the matmul. Still not modelled: SFPU approximations
  (``math_approx_mode``), SDPA's internal formats and flash blocks, the packer's rounding.
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
              "ttnn_gr00t", "ttnn_gr00t_n15", "ttnn_qwen3vl", "ttnn_gr00t_n17")


class _HostDevice:
    def arch(self):
        return None


HOST_DEVICE = _HostDevice()


def _strip(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in ("memory_config", "compute_kernel_config", "program_config",
                                                          "device", "layout", "dtype")}


class _Namespace(types.SimpleNamespace):
    pass


PRECISIONS = ("fp32", "device", "device_hifi2")
_BFP8: dict[int, weakref.ref] = {}  # host stand-ins of bfloat8_b device tensors (their matmuls run HiFi2)


def _is_bfp8(t) -> bool:
    r = _BFP8.get(id(t))
    return r is not None and r() is t


def truncate_last_bf16_bit(x: torch.Tensor) -> torch.Tensor:
    """float32 carrying bf16 values → the same with the lowest bf16 mantissa bit cleared (towards zero)."""
    return (x.float().contiguous().view(torch.int32) & ~(1 << 16)).view(torch.float32)


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
    device, hifi2 = precision != "fp32", precision == "device_hifi2"

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

    def linear(x, weight, *args, program_config=None, **kwargs):
        """ttnn's linear golden; an activation fused into ``program_config`` (``matmul_configs``) is applied
        before the one rounding of the output, as the fused program does."""
        if hifi2 and _is_bfp8(weight):
            x = truncate_last_bf16_bit(x)
        fused = getattr(program_config, "fused_activation", None)
        out = ttnn.get_golden_function(ttnn.linear)(x, weight, *args, **_strip(kwargs), activation=fused)
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
        synchronize_device=lambda *a, **k: None, init_device_compute_kernel_config=lambda *a, **k: None,
        typecast=lambda x, dtype, **k: as_dtype(x, dtype),
        linear=linear,
        **{name: golden(getattr(ttnn, name)) for name in ("matmul", "layer_norm", "rms_norm", "gelu",
                                                          "permute", "reshape", "add", "mul", "multiply", "silu",
                                                          "relu", "embedding", "slice", "concat", "addcmul", "where")},
        experimental=_Namespace(rotary_embedding_hf=rotary_embedding_hf),
        transformer=_Namespace(scaled_dot_product_attention=sdpa, **{name: golden(getattr(ttnn.transformer, name))
                                                                     for name in ("concatenate_heads",
                                                                                  "split_query_key_value_and_split_heads")}),
    )
    return shim


@contextlib.contextmanager
def golden_execution(precision: str = "fp32"):
    """Inside the block, the TT modules' ``ttnn`` is the golden stand-in."""
    from .. import (ttnn_action_head, ttnn_common, ttnn_dit, ttnn_eagle, ttnn_gr00t, ttnn_gr00t_n15,  # noqa: F401
                    ttnn_gr00t_n17, ttnn_qwen3, ttnn_qwen3vl, ttnn_siglip)

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

    def __init__(self, model, precision: str):
        self.model, self.precision = model, precision

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
        model = build_tt_model(DeviceWeights(HOST_DEVICE, weights), config, layout, batch)
    return GoldenModel(model, precision)

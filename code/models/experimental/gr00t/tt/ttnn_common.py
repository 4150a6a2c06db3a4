# SPDX-License-Identifier: Apache-2.0
"""What every TT-NN module of the port shares: the device weights, matmul fidelity by weight dtype,
and the few layer shapes (linear, LayerNorm, RMSNorm, attention) written once.

Activations are bf16 [1, S, D] TILE tensors in DRAM; sequences are padded to tile multiples by the
caller and padded keys are masked with an additive mask, so no op ever sees ragged tiles on the
sequence axis. Matmuls accumulate in fp32 (``fp32_dest_acc_en``): HiFi4 against bf16 weights, HiFi2
against bfloat8_b ones (HiFi2 multiplies the weight's mantissa exactly but truncates the activation's last
mantissa bit: ``golden_ops``' ``device_fidelity`` model), except the vision towers' block matmuls, which run at
their block's fidelity (``block_fidelity``; ``policy.VIT_FORK_FIDELITY``, HiFi4 when ``vit_fork`` is off).
LayerNorm and RMSNorm run with ``math_approx_mode`` off (exact rsqrt / reciprocal: their per-row scale errors
would otherwise reach every token; the audit's §1.3), and SDPA's exponential is exact (``exp_approx_mode`` off
in its program config); matmuls keep ttnn's default, which only matters for fused activations, until a card
shows what the exact mode costs there. Every linear and every SDPA runs on an explicit program config of
``matmul_configs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ttnn

from .matmul_configs import BF16_TILE, BFP8_TILE, matmul_config, sdpa_config
from .policy import TTPolicy, fidelity_of

NEG_INF = float("-inf")


class DeviceWeights:
    """name → device tensor, as the version's ``device_tensors`` named them; a missing name is a bug in
    the converter or the module, so it fails with the name."""

    def __init__(self, device, tensors: Mapping[str, ttnn.Tensor], policy: TTPolicy | None = None):
        self.device = device
        self._t = dict(tensors)
        self.used: set[str] = set()
        self.use_policy(policy or TTPolicy())
        arch = device.arch()
        self._cfg = {
            "bf16": ttnn.init_device_compute_kernel_config(arch, math_fidelity=ttnn.MathFidelity.HiFi4,
                                                           fp32_dest_acc_en=True, packer_l1_acc=True),
            "bfp8": ttnn.init_device_compute_kernel_config(arch, math_fidelity=ttnn.MathFidelity.HiFi2,
                                                           fp32_dest_acc_en=True, packer_l1_acc=True),
            "norm": ttnn.init_device_compute_kernel_config(arch, math_fidelity=ttnn.MathFidelity.HiFi4,
                                                           math_approx_mode=False, fp32_dest_acc_en=True,
                                                           packer_l1_acc=True),
        }

    def use_policy(self, policy: TTPolicy) -> None:
        """Take the policy's execution settings (today the vision towers' per-block fidelity); the weights
        themselves were converted by its dtype policy already. Call before the model is built."""
        self.vision_fidelity = policy.vision_fidelity()  # tower → ``fidelity_of`` spec; the estimate edits it

    def fidelity_config(self, fidelity: str):
        """bf16-weight matmul config at ``fidelity`` ("LoFi" … "HiFi4"), fp32 accumulation (built once each)."""
        key = "bf16" if fidelity == "HiFi4" else fidelity
        if key not in self._cfg:
            self._cfg[key] = ttnn.init_device_compute_kernel_config(
                self.device.arch(), math_fidelity=getattr(ttnn.MathFidelity, fidelity), fp32_dest_acc_en=True,
                packer_l1_acc=True)
        return self._cfg[key]

    def block_fidelity(self, tower: str, block: int) -> str:
        """The math fidelity of vision tower ``tower``'s block ``block`` ("siglip" or "qwen3vl")."""
        return fidelity_of(self.vision_fidelity[tower], block)

    def __getitem__(self, name: str) -> ttnn.Tensor:
        try:
            t = self._t[name]
        except KeyError:
            raise KeyError(f"TT weight {name!r} is not in the converted weights") from None
        self.used.add(name)
        return t

    def __contains__(self, name: str) -> bool:
        return name in self._t

    def names(self) -> list[str]:
        return list(self._t)

    def stored_bytes(self) -> int:
        """Device bytes of every weight as stored (tiles padded; bfloat8_b 1088 B a tile), none marked used."""
        from .tools.census import Tensor

        return sum(Tensor(tuple(t.shape), str(t.dtype).split(".")[-1], t.layout == ttnn.TILE_LAYOUT).bytes
                   for t in self._t.values())

    def compute_config(self, weight: ttnn.Tensor, fidelity: str | None = None):
        """HiFi2 for a bfloat8_b weight; for a bf16 one ``fidelity`` (a vision block's) or HiFi4."""
        if weight.dtype == ttnn.bfloat8_b:
            return self._cfg["bfp8"]
        return self.fidelity_config(fidelity) if fidelity else self._cfg["bf16"]

    @property
    def norm_config(self):
        """HiFi4, fp32 accumulation: the small bf16 matmuls (RoPE, placement) and SDPA."""
        return self._cfg["bf16"]

    @property
    def exact_norm_config(self):
        """LayerNorm / RMSNorm: as ``norm_config`` with ``math_approx_mode`` off."""
        return self._cfg["norm"]


def linear(w: DeviceWeights, x: ttnn.Tensor, name: str, *, bias: bool = True,
           activation: str | None = None, fidelity: str | None = None) -> ttnn.Tensor:
    """``act(x @ W + b)`` for the converted ``name.weight`` [in, out] (and ``name.bias`` [1, out]); ``activation``
    "gelu_tanh", "silu" or "relu", fused into the matmul's program: every linear runs on an explicit config of
    ``matmul_configs`` (1-D multicast for short activations, 2-D for long ones). ``fidelity``: a vision block's math
    fidelity for a bf16 weight (``DeviceWeights.compute_config``)."""
    return linear_of(w, x, w[name + ".weight"], w[name + ".bias"] if bias else None, activation, fidelity)


def linear_of(w: DeviceWeights, x: ttnn.Tensor, weight: ttnn.Tensor, bias: ttnn.Tensor | None,
              activation: str | None = None, fidelity: str | None = None) -> ttnn.Tensor:
    """``linear`` over given device tensors (``activation``: "gelu_tanh", "silu" or "relu")."""
    shape = tuple(x.shape)
    batch = math.prod(shape[:-2])  # a batch of B requests: ttnn tiles each one's rows on their own
    rows = math.prod(shape[:-1]) if batch == 1 else batch * math.ceil(shape[-2] / 32) * 32
    config = matmul_config(rows, shape[-1], tuple(weight.shape)[-1], activation,
                           BFP8_TILE if weight.dtype == ttnn.bfloat8_b else BF16_TILE)
    y = ttnn.linear(x, weight, bias=bias, program_config=config, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                    compute_kernel_config=w.compute_config(weight, fidelity))
    return y


def layer_norm(w: DeviceWeights, x: ttnn.Tensor, name: str | None, eps: float) -> ttnn.Tensor:
    """LayerNorm over the last axis; ``name=None`` means no affine parameters (DiT norms)."""
    affine = {} if name is None else {"weight": w[name + ".weight"], "bias": w[name + ".bias"]}
    return ttnn.layer_norm(x, epsilon=eps, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                           compute_kernel_config=w.exact_norm_config, **affine)


def modulated_layer_norm(w: DeviceWeights, x: ttnn.Tensor, scale: ttnn.Tensor, shift: ttnn.Tensor,
                         eps: float) -> ttnn.Tensor:
    """AdaLN ``LN(x)·(1 + s) + b`` as one LayerNorm program whose affine weight / bias are the precomputed
    ``1 + s`` and ``b`` rows [1, D]: the same arithmetic (LayerNorm's affine step is ``·γ + β``), two programs
    fewer and two bf16 roundings fewer than ``layer_norm → mul → add``."""
    return ttnn.layer_norm(x, epsilon=eps, weight=scale, bias=shift, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                           compute_kernel_config=w.exact_norm_config)


def rms_norm(w: DeviceWeights, x: ttnn.Tensor, name: str, eps: float) -> ttnn.Tensor:
    return ttnn.rms_norm(x, weight=w[name + ".weight"], epsilon=eps, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                         compute_kernel_config=w.exact_norm_config)


def gelu_tanh(x: ttnn.Tensor) -> ttnn.Tensor:
    """The tanh-approximated GELU SigLIP and diffusers' FeedForward use."""
    return ttnn.gelu(x, variant=ttnn.GeluVariant.Tanh, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def gelu_exact(x: ttnn.Tensor) -> ttnn.Tensor:
    """The erf GELU (``F.gelu`` default) the Qwen3-VL patch mergers use."""
    return ttnn.gelu(x, variant=ttnn.GeluVariant.Accurate, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def attend(w: DeviceWeights, q: ttnn.Tensor, k: ttnn.Tensor, v: ttnn.Tensor, *, scale: float,
           mask: ttnn.Tensor | None = None, causal: bool = False) -> ttnn.Tensor:
    """SDPA over [B, H, S, hd'] heads → [B, S, H·hd'] (heads concatenated). ``mask`` is additive
    [1 or B, 1, S_q, S_kv] (0 or −inf) and replaces causality; neither means full attention. SDPA writes the heads
    side by side itself (``output_concat_heads``), so no separate concatenate-heads program runs. Flash chunks:
    ``matmul_configs.sdpa_config``."""
    o = ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=causal, attn_mask=mask, scale=scale,
                                                       output_concat_heads=True, memory_config=ttnn.DRAM_MEMORY_CONFIG,
                                                       program_config=sdpa_config(q.shape[-2], k.shape[-2]),
                                                       compute_kernel_config=w.norm_config)
    return ttnn.reshape(o, [o.shape[0], o.shape[2], o.shape[3]])  # [B, 1, S, H·hd'] → [B, S, H·hd'], a view


def fused_self_attention(w: DeviceWeights, x: ttnn.Tensor, p: str, out: str, heads: int, *, scale: float,
                         bias: bool, mask: ttnn.Tensor | None = None, fidelity: str | None = None) -> ttnn.Tensor:
    """Self-attention with the fused, head-padded ``p + "qkv"`` projection and ``p + out`` output. ``scale``: the
    softmax scale, hd^-½ of the checkpoint's head dim, or 1 where the converter folded it into q
    (``weight_layout._attention``); the padded width comes from the weights. ``fidelity``: as ``linear``'s."""
    qkv = linear(w, x, p + "qkv", bias=bias, fidelity=fidelity)
    q, k, v = ttnn.transformer.split_query_key_value_and_split_heads(qkv, num_heads=heads, transpose_key=False,
                                                                     memory_config=ttnn.DRAM_MEMORY_CONFIG)
    o = attend(w, q, k, v, scale=scale, mask=mask)
    return linear(w, o, p + out, bias=bias, fidelity=fidelity)

# SPDX-License-Identifier: Apache-2.0
"""What the TT-NN networks of every version share (twin of ``reference/torch_gr00t.py``): the four stages
that become Metal traces (vision → llm → adapter → denoise), over persistent input buffers.

Every request input lives in a device buffer allocated once (``inputs``); each stage reads buffers and
the previous stage's output and leaves its own output on ``self.outputs``. A trace captured over a stage
therefore replays against the same addresses: writing new inputs and replaying the four traces is a whole
request. ``ttnn_gr00t_n15.py`` / ``_n16.py`` / ``_n17.py`` add the backbone stages and ``host_inputs``, which builds
the host tensors for those buffers and refuses any input off the static shapes before anything is written.

The two adapter/denoise stages are the same for every version: ``condition`` (vlln + VL self-attention)
under the prompt's key mask (``vl_key_mask``; N1.6 has no VL self-attention and no such mask), the cross-attention
K/V of every cross block, the state token, then four Euler steps; only the cross-attention masks differ (one for
N1.5, text-only and image-only for N1.6 and N1.7).
"""

from __future__ import annotations

import torch
import ttnn

from ..common.errors import InputError
from .ttnn_action_head import TtActionHead
from .runner import STAGES
from .ttnn_common import NEG_INF, DeviceWeights

__all__ = ["PAD_TOKEN_ID", "STAGES", "TtGr00tModel", "block_diagonal", "cross_buffer", "head_buffers", "padded_ids",
           "prompt_buffers", "rtc_buffers", "tt_layout"]
PAD_TOKEN_ID = 151643  # <|endoftext|>: what the padded prompt rows embed (causal attention never reads them)


def tt_layout(name: str):
    return ttnn.TILE_LAYOUT if name == "tile" else ttnn.ROW_MAJOR_LAYOUT


def padded_ids(input_ids: torch.Tensor, seq_len: int) -> torch.Tensor:
    """[1, S] → [1, seq_len] int32, the tail filled with ``PAD_TOKEN_ID``."""
    ids = torch.full((1, seq_len), PAD_TOKEN_ID, dtype=torch.int32)
    ids[0, : input_ids.shape[-1]] = input_ids[0].to(torch.int32)
    return ids


def prompt_buffers(s) -> dict[str, tuple[list[int], str, str]]:
    """The prompt's buffers of either version's static shapes ``s``: padded ids and the VL key mask, one row per
    request of the batch."""
    return {"input_ids": ([s.batch, s.seq_len], "uint32", "row_major"),
            "vl_mask": ([s.batch, 1, s.seq_len, s.seq_len], "bfloat16", "tile")}


def cross_buffer(s) -> tuple[list[int], str, str]:
    """A DiT cross-attention key mask: the batch's requests packed block-diagonally (``ttnn_dit.packed``),
    [1, 1, B·T_pad, B·S_pad]."""
    return [1, 1, s.batch * s.dit_tokens, s.batch * s.seq_len], "bfloat16", "tile"


def block_diagonal(masks: list[torch.Tensor]) -> torch.Tensor:
    """Per-request additive masks [1, 1, T, S] → one packed [1, 1, B·T, B·S]: each request's own block, −inf
    between requests (a query never sees another request's keys)."""
    t, s = masks[0].shape[-2:]
    out = torch.full((1, 1, len(masks) * t, len(masks) * s), NEG_INF)
    for b, m in enumerate(masks):
        out[..., b * t:(b + 1) * t, b * s:(b + 1) * s] = m
    return out


def head_buffers(s) -> dict[str, tuple[list[int], str, str]]:
    """The action head's buffers: the encoded state, the float32 initial noise zero-padded to the DiT's rows
    (``TtActionHead.rows_in``), and real-time chunking's inpainting inputs (``rtc_buffers``)."""
    rows = [s.batch, s.dit_tokens, s.action_dim]
    return {"state": ([s.batch, 1, s.state_dim], "bfloat16", "tile"), "noise": (rows, "float32", "tile"),
            **{name: (rows, "float32", "tile") for name in rtc_buffers(s.euler_steps)}}


def rtc_buffers(steps: int) -> tuple[str, ...]:
    """RTC inpainting's denoise inputs (``TtActionHead.rtc_rows``): the frozen-row mask, where the straight path
    from the noise to the frozen target stands before Euler steps 1..N−1, and the target itself (after the last
    step). Written for every request: all zeros when the request has no RTC prefix, so the same trace serves both."""
    return ("rtc_mask", *(f"rtc_point_{i}" for i in range(1, steps)), "rtc_target")


def host_cast(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """float32 → bfloat16 in torch before ``from_torch``: the same bits as ttnn's own float32 conversion
    (round to nearest even; a mock test compares every rounding case), about 4× faster on the
    N1.7 patch rows (1792 × 1536). The golden execution swaps it for the identity (it computes in fp32)."""
    return t.to(torch.bfloat16) if dtype == "bfloat16" and t.dtype == torch.float32 else t


class TtGr00tModel:
    """Persistent inputs, the adapter and denoise stages, and the freeze that protects captured traces.
    ``shapes.buffers()`` names the inputs: name → (shape, ttnn dtype name, "tile" | "row_major");
    ``STAGE_INPUTS`` says which stage reads which input (the two-queue runner orders uploads by it, and a
    mock test checks it against what every stage really reads)."""

    STAGE_INPUTS: dict[str, tuple[str, ...]]

    def __init__(self, weights: DeviceWeights, config, shapes):
        # the version's own inputs, plus the RTC inputs every version's denoise reads (as many as Euler steps)
        own = type(self).STAGE_INPUTS
        self.STAGE_INPUTS = {**own, "denoise": (*own["denoise"], *rtc_buffers(shapes.euler_steps))}
        declared = sorted(n for names in self.STAGE_INPUTS.values() for n in names)
        if declared != sorted(shapes.buffers()) or list(self.STAGE_INPUTS) != list(STAGES):
            raise ValueError(f"STAGE_INPUTS {self.STAGE_INPUTS} must name every input buffer once, stage by stage")
        self.w, self.config, self.shapes, self.device = weights, config, shapes, weights.device
        self.head = TtActionHead(weights, config.action_head, shapes.batch)
        self.inputs = {name: ttnn.allocate_tensor_on_device(ttnn.Shape(shape), getattr(ttnn, dtype), tt_layout(lay),
                                                             self.device, ttnn.DRAM_MEMORY_CONFIG)
                       for name, (shape, dtype, lay) in shapes.buffers().items()}
        self.outputs: dict[str, object] = {}
        # Once traces are captured, their replays write into the stage outputs above; an untraced stage call
        # would replace (and free) those tensors under the traces, so it is refused from then on.
        self.frozen = False

    # ---- host side ---------------------------------------------------------------------------------
    def to_host_tensors(self, host: dict[str, torch.Tensor]) -> dict[str, ttnn.Tensor]:
        """torch tensors → ttnn host tensors of every buffer, each checked against its static shape."""
        out = {}
        for name, (shape, dtype, lay) in self.shapes.buffers().items():
            t = host[name]
            if list(t.shape) != shape:
                raise InputError(name, f"expected shape {shape}, got {list(t.shape)}")
            out[name] = ttnn.from_torch(host_cast(t, dtype), dtype=getattr(ttnn, dtype), layout=tt_layout(lay))
        return out

    def prompt_length(self, input_ids: torch.Tensor) -> int:
        """Real rows of a [1, S] prompt; ``InputError`` when it does not fit the static length."""
        n_real = int(input_ids.shape[-1])
        if input_ids.ndim != 2 or input_ids.shape[0] != 1 or n_real > self.shapes.seq_len:
            raise InputError("instruction",
                             f"prompt of {n_real} tokens does not fit the captured length {self.shapes.seq_len}")
        return n_real

    def prompt_and_head(self, input_ids: torch.Tensor, n_real: int, state: torch.Tensor, noise: torch.Tensor,
                        inpaint=None) -> dict[str, torch.Tensor]:
        """The host tensors of ``prompt_buffers`` and ``head_buffers``, state and noise checked first; ``inpaint``
        (``common/rtc.InpaintPrefix``, or None) fills the RTC buffers."""
        s = self.shapes
        if tuple(state.shape) != (1, 1, s.state_dim):
            raise InputError("state", f"encoded state must be [1, 1, {s.state_dim}], got {tuple(state.shape)}")
        if tuple(noise.shape) != (1, s.horizon, s.action_dim):
            raise InputError("noise", f"must be [1, {s.horizon}, {s.action_dim}], got {tuple(noise.shape)}")
        vl_mask = torch.zeros(1, 1, s.seq_len, s.seq_len)
        vl_mask[..., n_real:] = NEG_INF  # padded prompt rows are never keys
        return {"input_ids": padded_ids(input_ids, s.seq_len), "vl_mask": vl_mask, "state": state.float(),
                "noise": self.head.rows_in(noise.float()), **self.head.rtc_rows(noise.float(), inpaint)}

    PACKED_INPUTS: tuple[str, ...] = ()  # the cross masks, packed block-diagonally across the batch (``cross_buffer``)

    def host_tensors_for(self, inputs) -> dict[str, torch.Tensor]:
        """One request's torch host tensors ([1, …]; cross masks [1, 1, T, S]) from a ``PreparedInputs`` (the
        version's ``host_tensors``), checked against the static geometry."""
        raise NotImplementedError

    def host_inputs_for(self, inputs) -> dict[str, ttnn.Tensor]:
        """The input buffers' host tensors for one request's ``PreparedInputs``, or a list of ``n`` of them (any prompt
        lengths; the TT backend's micro-batches), 1 ≤ n ≤ the model's batch: row b of every buffer is request b; a
        batch short of the bucket repeats its last request (those rows are computed and dropped)."""
        rows = list(inputs) if isinstance(inputs, list) else [inputs]
        if len(rows) > self.shapes.batch:
            raise ValueError(f"{len(rows)} requests for a model built for batches of {self.shapes.batch}")
        rows += [rows[-1]] * (self.shapes.batch - len(rows))
        return self.combine([self.host_tensors_for(r) for r in rows])

    def host_inputs(self, *args, **kwargs) -> dict[str, ttnn.Tensor]:
        """The version's ``host_tensors(*args)`` (one request) in every row of the batch, as the input buffers'
        host tensors (warm-up, the stage sheet's request, tests)."""
        return self.combine([self.host_tensors(*args, **kwargs)] * self.shapes.batch)

    def combine(self, hosts: list[dict[str, torch.Tensor]]) -> dict[str, ttnn.Tensor]:
        """One torch host dict per batch row → the input buffers' host tensors: rows stacked, the cross masks
        packed block-diagonally (``PACKED_INPUTS``)."""
        return self.to_host_tensors({
            name: block_diagonal([h[name] for h in hosts]) if name in self.PACKED_INPUTS
            else torch.cat([h[name] for h in hosts]) for name in hosts[0]})

    @staticmethod
    def rtc_of(inputs):
        """A ``PreparedInputs``' inpainting prefix; the guided variant needs autograd, which no trace has."""
        if inputs.guide is not None:
            raise ValueError("the TT-NN port runs RTC's inpaint variant only (guided needs the reference's autograd)")
        return inputs.inpaint

    def write_inputs(self, host: dict[str, ttnn.Tensor], cq_id: int = 0) -> None:
        for name, tensor in host.items():
            ttnn.copy_host_to_device_tensor(tensor, self.inputs[name], cq_id=cq_id)

    # ---- stages ------------------------------------------------------------------------------------
    def _check_unfrozen(self) -> None:
        if self.frozen:
            raise RuntimeError("this model has captured traces: run it through its traced TTRunner only")

    def cross_mask(self):
        """What ``TtActionHead.sample`` takes as the cross-attention mask (a buffer, or a dict of buffers)."""
        raise NotImplementedError

    def vl_key_mask(self):
        """The VL self-attention's key mask (the ``vl_mask`` buffer); N1.6, which has none, answers None."""
        return self.inputs["vl_mask"]

    def adapter(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        vl = self.head.condition(self.outputs["backbone_features"], self.vl_key_mask())
        self.outputs["vl_embs"] = vl
        self.outputs["cross_kv"] = self.head.dit.cross_kv(vl)
        self.outputs["state_features"] = self.head.state_features(self.inputs["state"])
        self.outputs["tokens_base"] = self.head.tokens_base(self.outputs["state_features"])

    def denoise(self, taps: dict | None = None) -> None:
        self._check_unfrozen()
        velocities = [] if taps is not None else None
        o = self.outputs
        rtc = [self.inputs[name] for name in rtc_buffers(self.shapes.euler_steps)]
        o["euler_state"] = self.head.sample(self.inputs["noise"], o["tokens_base"], o["cross_kv"], self.cross_mask(),
                                            velocities, rtc)
        if taps is not None:
            taps.update({f"velocity_{i}": v for i, v in enumerate(velocities)})
            taps["action_pred"] = self.head.actions(o["euler_state"])

    def forward(self, taps: dict | None = None) -> ttnn.Tensor:
        """The untraced model over the current input buffers → the padded Euler state [1, T_pad, D] (the chunk is its
        first H rows: ``read_actions``); ``taps`` collects stage outputs, ``action_pred`` cut to [1, H, D]."""
        for stage in STAGES:
            getattr(self, stage)(taps)
        if taps is not None:
            taps.update({k: v for k, v in self.outputs.items() if k != "cross_kv"})
        return self.outputs["euler_state"]

    def read_actions(self) -> torch.Tensor:
        """float32 normalised action chunks [B, H, D], one per batch row (blocks until the device is done)."""
        return ttnn.to_torch(self.outputs["euler_state"])[:, : self.shapes.horizon].float()

# SPDX-License-Identifier: Apache-2.0
"""Flow-matching action head on TT-NN (twin of ``reference/torch_action_head.py``), for N1.5 (32 future
tokens, 16 × 32 actions) and N1.7 (no future tokens, 40 × 132 actions, the AlternateVLDiT).

Per request: ``condition`` (vlln + VL self-attention over the padded VL tokens), the cross-attention
K/V of every cross block, and the state token — then ``sample``: 4 Euler steps of encoder → DiT →
decoder. The Euler state stays float32 on the device (noise in, normalised actions out); matmuls see
it as bf16. Only the served embodiment's rows of the category-specific layers are on the device.
"""

from __future__ import annotations

import math

import torch
import ttnn

from ..common.configs import ActionHeadConfig
from ..common.errors import ConfigError
from ..common.flow_matching import step_size, timestep_buckets
from ..common.embeddings import action_sinusoid
from .ttnn_common import NEG_INF, DeviceWeights, layer_norm, linear_of
from .ttnn_dit import TtDiT, TtSelfAttentionTransformer
from .weight_layout import HEAD, tile_up


def category_linear(w: DeviceWeights, x: ttnn.Tensor, name: str, activation: str | None = None,
                    weight: ttnn.Tensor | None = None, bias: ttnn.Tensor | None = None) -> ttnn.Tensor:
    """The served embodiment's ``act(x @ W[id] + b[id])`` (W stored [in, out], one row kept; ``weight`` / ``bias``
    replace the stored ones). Short activations fuse ``activation`` into the matmul (``matmul_configs``)."""
    return linear_of(w, x, w[name + ".W"] if weight is None else weight, w[name + ".b"] if bias is None else bias,
                     activation)


def category_mlp(w: DeviceWeights, x: ttnn.Tensor, name: str, weight: ttnn.Tensor | None = None,
                 bias: ttnn.Tensor | None = None) -> ttnn.Tensor:
    """layer2(relu(layer1(x))); ``weight`` / ``bias`` replace layer2's stored ones."""
    return category_linear(w, category_linear(w, x, name + ".layer1", "relu"), name + ".layer2", None, weight, bias)


class TtActionHead:
    def __init__(self, w: DeviceWeights, c: ActionHeadConfig, batch: int = 1):
        """``batch``: the requests one call runs (a micro-batching bucket); every per-request tensor is [batch, …]."""
        self.w, self.c, self.batch = w, c, batch
        self.dit = TtDiT(w, c.dit)
        self.adapter = TtSelfAttentionTransformer(w, c.vl_self_attention)
        self.tokens = 1 + c.num_target_vision_tokens + c.action_horizon  # state + future + actions = 49
        self.tokens_padded = tile_up(self.tokens)  # 64
        dev, d = w.device, c.input_embedding_dim

        def put(t: torch.Tensor, dtype=ttnn.bfloat16) -> ttnn.Tensor:
            return ttnn.from_torch(t, dtype=dtype, layout=ttnn.TILE_LAYOUT, device=dev)

        self.dt = step_size(c.num_inference_timesteps)
        # The Euler step x + dt·v as one mixed-dtype add: dt is folded into the decoder's last layer at load, which
        # then writes dt·v (exact: dt is a power of two for the 4 steps every GR00T config uses; refused otherwise).
        if math.frexp(self.dt)[0] != 0.5:
            raise ConfigError(f"num_inference_timesteps = {c.num_inference_timesteps} gives dt = {self.dt}, not a "
                              "power of two: the TT port folds dt into the action decoder, exact only then; "
                              "use 1, 2, 4, 8 or 16 steps on the ttnn backend")
        dec = HEAD + "action_decoder.layer2."
        self.decoder_dt = (ttnn.multiply(w[dec + "W"], self.dt), ttnn.multiply(w[dec + "b"], self.dt))
        self.steps = []
        for bucket in timestep_buckets(c.num_inference_timesteps, c.num_timestep_buckets):
            tau = action_sinusoid(torch.full((batch, self.tokens_padded), bucket), d)  # [B, T_pad, w], per bucket
            self.steps.append((self.dit.modulation(bucket), put(tau)))
        # Tile-aligned token order (attention is order-free here: the DiT has no positions of its own and every
        # mask is per key): rows 0..H-1 the actions, row H the state, zeros, N1.5's future tokens at the last
        # ``num_target_vision_tokens`` rows. The Euler state keeps all T_pad rows, so no step concatenates or
        # slices; ``rows_in`` pads the noise on the host and ``actions`` / the host read take rows 0..H-1.
        h, t_pad, f = c.action_horizon, self.tokens_padded, c.num_target_vision_tokens
        if h + 1 > t_pad - f:
            raise ConfigError(f"{h} actions, the state and {f} future tokens do not fit {t_pad} rows")
        positions = ttnn.reshape(w[HEAD + "position_embedding.weight"], [1, h, d])
        future = [ttnn.reshape(w[HEAD + "future_tokens.weight"], [1, f, d])] if f else []  # N1.7 has none
        # positions and future tokens (once, at load); the state row is added per request
        self.constant_rows = ttnn.concat([positions, put(torch.zeros(1, t_pad - h - f, d)), *future], dim=1)
        onehot = torch.zeros(1, t_pad, d)
        onehot[0, h] = 1.0
        self.state_row = put(onehot)
        self.action_rows = put((torch.arange(t_pad) < h).float().reshape(1, t_pad, 1).expand(1, t_pad, d).contiguous())
        mask = torch.zeros(1, 1, t_pad, t_pad)
        mask[..., h + 1:t_pad - f] = NEG_INF  # padding rows are never keys
        self.self_mask = put(mask)

    # ---- per request -----------------------------------------------------------------------------
    def condition(self, features: ttnn.Tensor, key_mask: ttnn.Tensor) -> ttnn.Tensor:
        """Backbone features [B, S_pad, 2048] → vl_embs [B, S_pad, 2048]."""
        return self.adapter(layer_norm(self.w, features, HEAD + "vlln", self.c.vlln_eps), key_mask)

    def state_features(self, state: ttnn.Tensor) -> ttnn.Tensor:
        """Encoded state [B, 1, 64] → the state token [B, 1, 1536]."""
        return category_mlp(self.w, state, HEAD + "state_encoder")

    def tokens_base(self, state_features: ttnn.Tensor) -> ttnn.Tensor:
        """The DiT rows that do not change within a request [B, T_pad, w]: positions on the action rows (the
        actions are added per step), the state token on row H, N1.5's future tokens, zeros."""
        return ttnn.addcmul(self.constant_rows, self.state_row, state_features)

    def rows_in(self, noise: torch.Tensor) -> torch.Tensor:
        """Host noise [B, H, D] → the padded Euler state [B, T_pad, D] (zero rows past H)."""
        out = torch.zeros(noise.shape[0], self.tokens_padded, noise.shape[-1], dtype=noise.dtype)
        out[:, : noise.shape[1]] = noise
        return out

    def rtc_rows(self, noise: torch.Tensor, inpaint=None) -> dict[str, torch.Tensor]:
        """Real-time chunking's inpainting inputs of one request on the host, each padded like ``rows_in``:
        ``rtc_mask`` (1 on the frozen rows, over every dim), ``rtc_point_i`` (i = 1..N−1) where the straight path
        from ``noise`` [B, H, D] to the target stands before step i, ``(1 − τ)·noise + τ·target`` with τ = i/N in
        float32 exactly as the reference sampler computes it, and ``rtc_target``. No prefix: all zeros (the mask
        selects nothing). Before step 0 the path point is the noise itself, which the state already is."""
        n, rows = len(self.steps), [torch.zeros_like(noise)] * (len(self.steps) + 1)
        if inpaint is not None:
            target, mask = inpaint.target.float(), inpaint.mask.float()
            if tuple(target.shape) != tuple(noise.shape) or tuple(mask.shape) != tuple(noise.shape[:2]):
                raise ValueError(f"RTC target {tuple(target.shape)} / mask {tuple(mask.shape)} do not match the "
                                 f"chunk {tuple(noise.shape)}")
            rows = [mask.unsqueeze(-1).expand_as(noise), *((1 - i / n) * noise + (i / n) * target
                                                          for i in range(1, n)), target]
        names = ("rtc_mask", *(f"rtc_point_{i}" for i in range(1, n)), "rtc_target")
        return {name: self.rows_in(t.contiguous()) for name, t in zip(names, rows)}

    def actions(self, x: ttnn.Tensor) -> ttnn.Tensor:
        """Padded rows [B, T_pad, D] → the action rows [B, H, D] (taps and tests; the host read slices itself)."""
        return ttnn.slice(x, [0, 0, 0], [x.shape[0], self.c.action_horizon, x.shape[-1]])

    # ---- Euler loop ------------------------------------------------------------------------------
    def velocity(self, x: ttnn.Tensor, step: int, base: ttnn.Tensor, kv: list,
                 cross_mask: ttnn.Tensor | dict[str, ttnn.Tensor]) -> ttnn.Tensor:
        """Noisy actions [B, T_pad, D] (bf16, rows past H ignored) → the Euler increment dt·velocity [B, T_pad, D]
        (bf16; rows past H are garbage, never read). ``base``: ``tokens_base``. ``cross_mask``: as ``TtDiT`` takes it
        (one mask, or N1.7's text / image pair)."""
        w = self.w
        mod, tau = self.steps[step]
        p = HEAD + "action_encoder."
        a = category_linear(w, x, p + "W1")
        a = category_linear(w, category_linear(w, ttnn.concat([a, tau], dim=-1), p + "W2", "silu"), p + "W3")
        tokens = ttnn.addcmul(base, a, self.action_rows)  # the action rows of a over the base, tile-aligned
        out = self.dit(tokens, mod, kv, cross_mask, self.self_mask)
        return category_mlp(w, out, HEAD + "action_decoder", *self.decoder_dt)

    def sample(self, noise: ttnn.Tensor, base: ttnn.Tensor, kv: list,
               cross_mask: ttnn.Tensor | dict[str, ttnn.Tensor], velocities: list | None = None,
               rtc: list[ttnn.Tensor] | None = None) -> ttnn.Tensor:
        """float32 padded noise [B, T_pad, D] (``rows_in``) → float32 normalised actions on rows 0..H-1 of
        [B, T_pad, D]. ``velocities`` (taps only) collects each step's velocity [B, H, D].

        ``rtc``: the device buffers of ``rtc_rows`` in order (mask, path points 1..N−1, target). Real-time
        chunking's inpainting as the reference sampler runs it: before step i ≥ 1 the frozen rows of the state
        become the path point, after the last step the target; a select (``where``), exact for a 0/1 mask, and a
        no-op where the mask is zero (a request without RTC)."""
        if rtc is not None and len(rtc) != len(self.steps) + 1:
            raise ValueError(f"{len(rtc)} RTC buffers for {len(self.steps)} Euler steps")
        x = noise
        for i in range(len(self.steps)):
            if rtc is not None and i > 0:
                x = ttnn.where(rtc[0], rtc[i], x)
            step = self.velocity(ttnn.typecast(x, ttnn.bfloat16), i, base, kv, cross_mask)
            if velocities is not None:  # taps only: the velocity itself (exact, dt is a power of two)
                velocities.append(self.actions(ttnn.multiply(step, 1.0 / self.dt)))
            x = ttnn.add(x, step, dtype=ttnn.float32)  # float32 state + bf16 increment, in float32
        if rtc is not None:
            x = ttnn.where(rtc[0], rtc[-1], x)
        return x

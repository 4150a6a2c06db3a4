# SPDX-License-Identifier: Apache-2.0
"""The fast path's device side: mixed bf16 / fp32 weights and per-stage CUDA graphs.

bf16: the backbone, ``vlln``, the VL self-attention and the DiT blocks (the GEMMs). fp32: the
timestep embedding, AdaLN / output modulation tables (built from the fp32 weights before the cast),
``proj_out_2``, the state / action encoders and the action decoder, and the Euler state.

Graphs: one ``torch.cuda.CUDAGraph`` per stage (vision, llm, adapter, dit_step_i) over the fast
policy's static buffers, captured on the first request of a shape and replayed after; each stage is
timed with CUDA events between replays (no host sync inside a request until its end).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def bf16_modules(model: nn.Module) -> list[nn.Module]:
    """The parts that run in bf16 (both versions name them the same way)."""
    head = model.action_head
    return [model.backbone, head.vlln, head.vl_self_attention, head.model.transformer_blocks]


def mixed_precision_dtypes(dtype: torch.dtype) -> Callable[[nn.Module], dict[str, torch.dtype]]:
    """For ``Gr00tModel.from_checkpoint(dtypes_of=…)``: the keys of ``bf16_modules`` loaded in ``dtype`` straight from
    the checkpoint, so the mixed-precision model is never held in fp32 (peak host memory about half of it). The DiT
    blocks' AdaLN linears stay fp32 until ``StepTables.build`` has read them; ``to_mixed_precision`` then casts them
    (and any non-persistent buffer) as before, so the result equals a fp32 load cast afterwards, bit for bit."""

    def dtypes_of(model: nn.Module) -> dict[str, torch.dtype]:
        names, dit_blocks = {id(m): n for n, m in model.named_modules()}, model.action_head.model.transformer_blocks
        keys = {}
        for part in bf16_modules(model):
            prefix = names[id(part)] + "."
            keys.update({prefix + k: dtype for k, v in part.state_dict().items()
                         if v.is_floating_point() and not (part is dit_blocks and ".norm1.linear." in k)})
        return keys

    return dtypes_of


def to_mixed_precision(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Cast the GEMM-heavy parts to ``dtype`` and move everything to ``device``, module by module
    (each fp32 host tensor is released as soon as its copy exists)."""
    for part in bf16_modules(model):
        part.to(device=device, dtype=dtype)
    return model.to(device)


class StageGraphs:
    """One CUDA graph per stage; ``stages`` are closures over static buffers that read their inputs
    from, and assign their outputs to, those buffers. Warm-up runs on a side stream (cuBLAS/cuDNN
    workspaces, allocator), then each stage is captured into a shared memory pool and replayed in
    capture order, as that pool requires."""

    def __init__(self, stages: list[tuple[str, Callable[[], None]]], device: torch.device, warmup: int = 2):
        self.names = [name for name, _ in stages]
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                for _, fn in stages:
                    fn()
        torch.cuda.current_stream(device).wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        self.graphs = []
        for _, fn in stages:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                fn()
            self.graphs.append(g)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(stages) + 1)]

    def replay(self) -> dict[str, float]:
        """Run every stage; device milliseconds per stage."""
        ev = self.events
        ev[0].record()
        for g, done in zip(self.graphs, ev[1:]):
            g.replay()
            done.record()
        ev[-1].synchronize()
        return {name: ev[i].elapsed_time(ev[i + 1]) for i, name in enumerate(self.names)}

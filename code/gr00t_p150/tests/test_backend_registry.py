# SPDX-License-Identifier: Apache-2.0
"""The backend registry: one door (``open_backend``) over a table of builders with one signature, ``auto``
resolved with its reason, an unknown name answered with the registered ones, and what it opens satisfies the
``Backend`` protocol."""

from __future__ import annotations

import pytest

from gr00t_p150.backends.base import Backend
from gr00t_p150.backends.registry import BUILDERS, BackendError, BackendSettings, choose, open_backend


def test_an_unknown_backend_lists_the_registered_ones(tmp_path):
    settings = BackendSettings(checkpoint=tmp_path, version="n15", layout="gr1", reason="", log=print)
    with pytest.raises(BackendError, match=r"unknown backend 'tpu': registered backends are \['torch', 'ttnn'\]"):
        open_backend("tpu", settings)
    with pytest.raises(BackendError, match=r"GR00T_BACKEND='tpu': expected auto or one of \['torch', 'ttnn'\]"):
        choose("tpu", version="n15")
    assert sorted(BUILDERS) == ["torch", "ttnn"]


def test_auto_says_why_it_chose_what_it_chose():
    from models.experimental.gr00t.tt.runner import device_present

    if device_present():
        pytest.skip("a Tenstorrent device is present: auto picks ttnn here")
    assert choose("auto", version="n15") == ("torch", "auto: no Tenstorrent device; ")
    assert choose("torch", version="n17") == ("torch", "")
    assert choose("ttnn", version="n15", mock=True) == ("ttnn", "ttnn (GR00T_TT_MOCK=1 (test mode))")
    with pytest.raises(BackendError, match="GR00T_TT_MOCK=1 is the TT-NN test mode"):
        choose("auto", version="n15", mock=True)


def test_the_torch_builder_opens_a_backend_of_the_protocol(tiny_checkpoint):
    logged = []
    settings = BackendSettings(checkpoint=tiny_checkpoint, version="n15", layout="gr1", reason="test; ",
                               log=logged.append, torch_device="cpu", torch_dtype="float32", torch_path="reference")
    backend = open_backend("torch", settings)
    assert isinstance(backend, Backend)
    assert backend.selection == "test; torch on cpu (GR00T_TORCH_DEVICE=cpu)"
    assert backend.stage == "reference-fp32-cpu" and backend.is_reference
    assert logged == ["Opening device: torch cpu, float32 (GR00T_TORCH_DTYPE=float32)"]
    with pytest.raises(BackendError, match="loading .* failed: GR00T_TORCH_PATH=reference is the fp32 golden"):
        open_backend("torch", BackendSettings(checkpoint=tiny_checkpoint, version="n15", layout="gr1", reason="",
                                              log=logged.append, torch_device="cpu", torch_dtype="bfloat16",
                                              torch_path="reference"))

# SPDX-License-Identifier: Apache-2.0
"""Synthetic checkpoints have the real snapshot's format, and strict loading names what is wrong."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from models.experimental.gr00t.common.checkpoint import INDEX_FILE, LazyCheckpoint
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.errors import CheckpointError
from models.experimental.gr00t.common.synthetic import random_tensor, synthetic_info, write_checkpoint
from models.experimental.gr00t.common.weights import OPTIONAL_UNUSED_KEYS, n15_inventory
from models.experimental.gr00t.reference.torch_gr00t_n15 import Gr00tN15
from safetensors import safe_open
from safetensors.torch import save_file


def test_tiny_checkpoint_has_the_snapshot_layout(tiny_checkpoint):
    files = sorted(p.relative_to(tiny_checkpoint).as_posix() for p in tiny_checkpoint.rglob("*") if p.is_file())
    shards = [f for f in files if f.startswith("model-")]
    assert len(shards) >= 2 and all(f.endswith(f"-of-{len(shards):05d}.safetensors") for f in shards)
    assert {"config.json", INDEX_FILE, "experiment_cfg/metadata.json", "SYNTHETIC.json"} <= set(files)
    index = json.loads((tiny_checkpoint / INDEX_FILE).read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    inventory = n15_inventory(Gr00tN15Config.tiny())
    assert index["metadata"]["total_size"] == sum(s.nbytes for s in inventory)
    meta = json.loads((tiny_checkpoint / "experiment_cfg/metadata.json").read_text())["gr1"]
    assert meta["modalities"]["video"]["ego_view"]["resolution"] == [256, 256]
    assert all(len(meta["statistics"]["action"][k]["min"]) == d for k, d in (("left_arm", 7), ("right_hand", 6)))
    assert synthetic_info(tiny_checkpoint)["synthetic"] is True


def test_loader_reads_names_shapes_and_stored_dtypes(tiny_checkpoint):
    ckpt = LazyCheckpoint(tiny_checkpoint)
    inventory = n15_inventory(Gr00tN15Config.tiny())
    assert sorted(ckpt.names) == sorted(s.name for s in inventory)
    for spec in inventory:
        info = ckpt.info(spec.name)
        assert (info.shape, info.dtype) == (spec.shape, spec.dtype)
    assert ckpt.info("backbone.eagle_model.mlp1.0.weight").dtype == torch.bfloat16
    assert ckpt.info("action_head.model.proj_out_2.weight").dtype == torch.float32
    t = ckpt.load("action_head.future_tokens.weight")
    assert torch.equal(t, random_tensor(next(s for s in inventory if s.name == "action_head.future_tokens.weight"), 0))


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tiny_checkpoint):
    again = write_checkpoint(tmp_path / "again", scale="tiny", seed=0, log=lambda _: None)
    other = write_checkpoint(tmp_path / "other", scale="tiny", seed=1, log=lambda _: None)
    for shard in sorted(tiny_checkpoint.glob("model-*.safetensors")):
        assert (again / shard.name).read_bytes() == shard.read_bytes()
    name = "backbone.eagle_model.language_model.model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(LazyCheckpoint(tiny_checkpoint).load(name), LazyCheckpoint(other).load(name))


def test_tensor_values_do_not_depend_on_sharding(tmp_path, tiny_checkpoint):
    one = write_checkpoint(tmp_path / "one", scale="tiny", seed=0, max_shard_bytes=10**9, log=lambda _: None)
    assert len(list(one.glob("model-*.safetensors"))) == 1
    a, b = LazyCheckpoint(one), LazyCheckpoint(tiny_checkpoint)
    for name in a.names:
        assert torch.equal(a.load(name), b.load(name)), name


def test_reference_model_loads_strictly(tiny_checkpoint):
    model = Gr00tN15.from_checkpoint(LazyCheckpoint(tiny_checkpoint), Gr00tN15Config.tiny())
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    assert set(model.state_dict()) == set(LazyCheckpoint(tiny_checkpoint).names)


def _rewrite_shard(directory, edit):
    """Apply ``edit(dict_of_tensors)`` to the shard holding mlp1 and rewrite index + shard."""
    index_path = directory / INDEX_FILE
    index = json.loads(index_path.read_text())
    shard = index["weight_map"]["backbone.eagle_model.mlp1.0.weight"]
    with safe_open(str(directory / shard), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    edit(tensors)
    save_file(tensors, str(directory / shard), metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | {k: shard for k in tensors}
    index_path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.pop("backbone.eagle_model.mlp1.0.bias"), "missing key.*mlp1.0.bias"),
        (lambda t: t.update({"backbone.eagle_model.mlp1.0.weight": torch.zeros(3, 3)}),
         r"shape mismatch.*mlp1.0.weight.*\[3, 3\]"),
        (lambda t: t.update({"backbone.eagle_model.extra.weight": torch.zeros(1)}), "unexpected key.*extra.weight"),
    ],
    ids=["missing", "wrong_shape", "unexpected"],
)
def test_strict_loading_names_the_bad_key(tmp_path, tiny_checkpoint, edit, message):
    broken = shutil.copytree(tiny_checkpoint, tmp_path / "broken")
    _rewrite_shard(broken, edit)
    with pytest.raises(CheckpointError, match=message):
        Gr00tN15.from_checkpoint(LazyCheckpoint(broken), Gr00tN15Config.tiny())


def test_a_saved_tied_lm_head_is_tolerated(tmp_path, tiny_checkpoint):
    with_head = shutil.copytree(tiny_checkpoint, tmp_path / "with_head")
    _rewrite_shard(with_head,
                   lambda t: t.update({OPTIONAL_UNUSED_KEYS[0]: torch.zeros(151680, 64, dtype=torch.bfloat16)}))
    Gr00tN15.from_checkpoint(LazyCheckpoint(with_head), Gr00tN15Config.tiny())


def test_missing_shard_and_bad_directory_are_clear(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="not found"):
        LazyCheckpoint(tmp_path / "nope")
    broken = shutil.copytree(tiny_checkpoint, tmp_path / "broken")
    next(broken.glob("model-00001-*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="model-00001.*missing"):
        LazyCheckpoint(broken)


def test_cast_loading_reads_the_same_values_in_any_chunk_size(tmp_path):
    """Tensors that need a cast are read through a bounded staging buffer, not the shard's mapping."""
    from models.experimental.gr00t.common.checkpoint import _read_cast

    tensors = {"a": torch.randn(37, 5).to(torch.bfloat16), "b": torch.randn(3).to(torch.float16),
               "c": torch.randn(4, 4), "d": torch.arange(6, dtype=torch.int64)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ckpt = LazyCheckpoint(tmp_path)
    got = ckpt.load_many(list(tensors), dtype=torch.float32)
    for name, t in tensors.items():
        assert got[name].dtype == torch.float32 and torch.equal(got[name], t.float()), name
    with (tmp_path / "model.safetensors").open("rb") as raw:
        for chunk in (2, 6, 64, 1 << 20):  # tiny chunks cross element and row boundaries
            staging = torch.empty(chunk, dtype=torch.uint8)
            assert torch.equal(_read_cast(raw, ckpt.info("a"), torch.float32, staging), tensors["a"].float())


def test_a_truncated_tensor_is_named_when_cast_loading(tmp_path):
    save_file({"w": torch.randn(64, 64).to(torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    path = tmp_path / "model.safetensors"
    ckpt = LazyCheckpoint(tmp_path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="'w' is truncated"):
        ckpt.load_many(["w"], dtype=torch.float32)

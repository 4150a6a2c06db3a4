# SPDX-License-Identifier: Apache-2.0
"""Every GR00T version this project serves, as one row of data each.

Import-light on purpose (no torch, no ttnn, nothing of the port): the server reads its settings from
here before anything heavy is loaded. Classes are named by dotted path and imported only when asked for
(``load``). Adding a version is one ``VersionSpec`` row plus its ``*_nXX.py`` files (README, "Adding a
version").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import ConfigError

PORT = "models.experimental.gr00t"


@dataclass(frozen=True)
class ContractText:
    """The per-version prose of /info's contract (what a client needs to know beyond the shapes)."""

    image_chain: str
    state_units: str
    action_units: str
    instruction_counted: str


@dataclass(frozen=True)
class DemoScene:
    """The version's shipped demo request (``demo/make_demo.py`` writes it to ``demo/<version>/``; the loader is
    ``common/demo.py``): a made-up scene, not NVIDIA data."""

    instruction: str  # the published demo instruction
    state: str  # dotted path of the made-up robot state {group: values}, as the request sends it
    frames: str  # dotted path of (layout) -> {camera: [(file stem, PIL image), ...]}, oldest frame first
    noise_shape: tuple[int, int]  # the explicit initial noise [action_horizon, action_dim]


@dataclass(frozen=True)
class VersionSpec:
    name: str  # "n15": the GR00T_VERSION value
    hf_repo: str  # the published weights, pinned at ``revision``
    revision: str
    model_type: str  # config.json "model_type" of the checkpoint
    layout: str  # the embodiment layout served (common/layouts.py)
    embodiment: str
    model_name: str  # the served package's name, as the published manifests report it
    allow_patterns: tuple[str, ...]  # files the server needs from a snapshot (the manifests' allow_patterns)
    contract: ContractText
    config_cls: str  # dotted paths, imported on demand
    policy_cls: str  # the fp32 reference policy
    fast_cls: str  # the torch fast path
    inventory: str  # the checkpoint's tensor inventory: config -> [TensorSpec]
    synthetic_sidecars: str  # the synthetic writer's files beside config.json: seed -> {name: JSON}
    tokenizer_env: str  # variable naming a local tokenizer directory
    eagle_tokens: bool  # the tokenizer adds NVIDIA's Eagle image tokens (N1.5) beyond Qwen3's
    ttnn: bool  # whether the TT-NN port serves this version
    tt_policy_cls: str  # the TT-NN policy (``tt/ttnn_policy_nXX.py`` over ``tt/ttnn_policy.py``)
    tt_num_cqs: int  # default GR00T_NUM_CQS, as the published package runs it (N1.5: 1, N1.7: 2)
    tt_model_builder: str  # (device weights, config, layout) -> the TT model for the layout's static geometry
    tt_device_tensors: str  # the weight layout: (load, names, config, layout) -> (name, tensor, tt layout) rows
    tt_blank_inputs: str  # (model, config, layout, instruction) -> host inputs of a zero request (the stage sheet)
    demo: DemoScene


SPECS: dict[str, VersionSpec] = {
    "n15": VersionSpec(
        name="n15",
        hf_repo="nvidia/GR00T-N1.5-3B",
        revision="869830fc749c35f34771aa5209f923ac57e4564e",
        model_type="gr00t_n1_5",
        layout="gr1",
        embodiment="gr1",
        model_name="GR00T-N1.5-3B-p150",
        allow_patterns=("model-*.safetensors", "model.safetensors.index.json", "config.json",
                        "experiment_cfg/metadata.json", "LICENSE"),
        contract=ContractText(
            image_chain="0.95 centre crop -> antialiased bilinear 224x224 -> uint8 truncation -> (u8-127.5)/127.5",
            state_units="raw joint values (radians)",
            action_units="physical (un-normalised) joint targets, radians",
            instruction_counted="counted as rendered into the prompt (NVIDIA's ['...'] form adds 2 tokens)",
        ),
        config_cls=f"{PORT}.common.configs_n15:Gr00tN15Config",
        policy_cls=f"{PORT}.reference.torch_policy_n15:ReferencePolicy",
        fast_cls=f"{PORT}.torch_fast.fast_policy_n15:FastPolicyN15",
        inventory=f"{PORT}.common.weights:n15_inventory",
        synthetic_sidecars=f"{PORT}.common.synthetic:n15_sidecars",
        tokenizer_env="GR00T_TOKENIZER_DIR_N15",
        eagle_tokens=True,
        ttnn=True,
        tt_policy_cls=f"{PORT}.tt.ttnn_policy_n15:TTGr00tPolicy",
        tt_num_cqs=1,
        tt_model_builder=f"{PORT}.tt.ttnn_policy_n15:build_model",
        tt_device_tensors=f"{PORT}.tt.weight_layout_n15:device_tensors",
        tt_blank_inputs=f"{PORT}.tt.ttnn_policy_n15:blank_host_inputs",
        demo=DemoScene(
            instruction="pick the pear from the counter and place it in the plate",
            state=f"{PORT}.demo.scenes:GR1_STATE",
            frames=f"{PORT}.demo.scenes:gr1_frames",
            noise_shape=(16, 32),
        ),
    ),
    "n17": VersionSpec(
        name="n17",
        hf_repo="nvidia/GR00T-N1.7-3B",
        revision="2fc962b973bccdd5d8ce4f67cc63b264d6886495",
        model_type="Gr00tN1d7",
        layout="droid",
        embodiment="oxe_droid_relative_eef_relative_joint",
        model_name="GR00T-N1.7-3B-p150",
        allow_patterns=("model-*.safetensors", "model.safetensors.index.json", "config.json", "processor_config.json",
                        "statistics.json", "embodiment_id.json", "LICENSE"),
        contract=ContractText(
            image_chain="shortest edge 256 (INTER_AREA) -> 0.95 centre crop -> shortest edge 256 -> Qwen smart resize "
                        "to multiples of 32 (bicubic, uint8) -> (u8-127.5)/127.5 -> 16x16x2 patches; frames ordered "
                        "t-15 (all cameras), t",
            state_units="raw values: eef_9d = xyz (m) + first two rows of the rotation matrix, gripper, joints (rad)",
            action_units="absolute targets: eef_9d composed onto the request's pose, joints added to the request's, "
                         "gripper absolute",
            instruction_counted="counted after normalisation (lower-case, punctuation removed)",
        ),
        config_cls=f"{PORT}.common.configs_n17:Gr00tN17Config",
        policy_cls=f"{PORT}.reference.torch_policy_n17:ReferencePolicyN17",
        fast_cls=f"{PORT}.torch_fast.fast_policy_n17:FastPolicyN17",
        inventory=f"{PORT}.common.weights:n17_inventory",
        synthetic_sidecars=f"{PORT}.common.synthetic:n17_sidecars",
        tokenizer_env="GR00T_TOKENIZER_DIR_N17",
        eagle_tokens=False,
        ttnn=True,
        tt_policy_cls=f"{PORT}.tt.ttnn_policy_n17:TTGr00tPolicyN17",
        tt_num_cqs=2,
        tt_model_builder=f"{PORT}.tt.ttnn_policy_n17:build_model",
        tt_device_tensors=f"{PORT}.tt.weight_layout_n17:device_tensors",
        tt_blank_inputs=f"{PORT}.tt.ttnn_policy_n17:blank_host_inputs",
        demo=DemoScene(
            instruction="Put the blue block in the green bowl",
            state=f"{PORT}.demo.scenes:DROID_STATE",
            frames=f"{PORT}.demo.scenes:droid_frames",
            noise_shape=(40, 132),
        ),
    ),
}
VERSIONS = tuple(SPECS)


def get_spec(version: str) -> VersionSpec:
    try:
        return SPECS[version]
    except KeyError:
        raise ConfigError(f"unknown GR00T version {version!r}: known versions are {list(SPECS)}") from None


def spec_for_model_type(model_type: str | None, where: object = "checkpoint") -> VersionSpec:
    """The version whose checkpoints carry this config.json ``model_type``."""
    for spec in SPECS.values():
        if spec.model_type == model_type:
            return spec
    known = sorted(s.model_type for s in SPECS.values())
    raise ConfigError(f"{where}: model_type {model_type!r} is not a supported GR00T version ({known})")


def load(dotted: str):
    """The object named ``package.module:attribute``."""
    module, _, attribute = dotted.partition(":")
    return getattr(importlib.import_module(module), attribute)

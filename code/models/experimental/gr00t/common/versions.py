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
class Served:
    """One embodiment a version serves: the ``GR00T_EMBODIMENT`` tag, its layout (``common/layouts.py``) and its demo
    scene (shipped in ``demo/<demo_dir>/``)."""

    embodiment: str
    layout: str
    demo: DemoScene


@dataclass(frozen=True)
class VersionSpec:
    name: str  # "n15": the GR00T_VERSION value
    hf_repo: str  # the published weights, pinned at ``revision``
    revision: str
    model_type: str  # config.json "model_type" of the checkpoint
    served: tuple[Served, ...]  # the embodiments GR00T_EMBODIMENT may pick; the first is the default
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
    # The TT-NN port of the version, or ``ttnn_refusal``: why GR00T_BACKEND=ttnn refuses it (no tt_* row then).
    ttnn_refusal: str | None = None
    tt_policy_cls: str | None = None  # the TT-NN policy (``tt/ttnn_policy_nXX.py`` over ``tt/ttnn_policy.py``)
    tt_num_cqs: int = 1  # default GR00T_NUM_CQS, as the published package runs it (N1.5: 1, N1.6: 1, N1.7: 2)
    tt_max_batch: int = 4  # the largest micro-batching bucket its TT model builds (1: one request per call)
    tt_model_builder: str | None = None  # (device weights, config, layout) -> the TT model for the layout's geometry
    tt_device_tensors: str | None = None  # the weight layout: (load, names, config, layout) -> (name, tensor, layout)
    tt_blank_inputs: str | None = None  # (model, config, layout, instruction) -> host inputs of a zero request

    def __post_init__(self):
        tt = (self.tt_policy_cls, self.tt_model_builder, self.tt_device_tensors, self.tt_blank_inputs)
        if not (all(tt) if self.ttnn_refusal is None else not any(tt)) or not self.served:
            raise ValueError(f"version {self.name}: a TT-NN row needs every tt_* path and no ttnn_refusal "
                             "(or a ttnn_refusal and none), and at least one served embodiment")

    @property
    def ttnn(self) -> bool:
        """Whether the TT-NN port serves this version."""
        return self.ttnn_refusal is None

    @property
    def layout(self) -> str:
        """The default embodiment's layout."""
        return self.served[0].layout

    @property
    def embodiment(self) -> str:
        return self.served[0].embodiment

    @property
    def demo(self) -> DemoScene:
        return self.served[0].demo

    @property
    def layouts(self) -> tuple[str, ...]:
        return tuple(s.layout for s in self.served)

    def serving(self, embodiment: str) -> Served:
        """The served row of ``embodiment`` (a ``GR00T_EMBODIMENT`` value)."""
        for s in self.served:
            if s.embodiment == embodiment:
                return s
        raise ConfigError(f"GR00T_EMBODIMENT={embodiment!r}: version {self.name} serves "
                          f"{[s.embodiment for s in self.served]}")

    def demo_dir(self, layout: str | None = None) -> str:
        """The folder under ``demo/`` of ``layout``'s demo (the version's name for its default layout)."""
        layout = layout or self.layout
        if layout not in self.layouts:
            raise ConfigError(f"version {self.name} serves no layout {layout!r} (serves {list(self.layouts)})")
        return self.name if layout == self.layout else f"{self.name}_{layout}"


SPECS: dict[str, VersionSpec] = {
    "n15": VersionSpec(
        name="n15",
        hf_repo="nvidia/GR00T-N1.5-3B",
        revision="869830fc749c35f34771aa5209f923ac57e4564e",
        model_type="gr00t_n1_5",
        served=(Served("gr1", "gr1", DemoScene(
            instruction="pick the pear from the counter and place it in the plate",
            state=f"{PORT}.demo.scenes:GR1_STATE", frames=f"{PORT}.demo.scenes:gr1_frames", noise_shape=(16, 32))),),
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
        tt_policy_cls=f"{PORT}.tt.ttnn_policy_n15:TTGr00tPolicy",
        tt_num_cqs=1,
        tt_model_builder=f"{PORT}.tt.ttnn_policy_n15:build_model",
        tt_device_tensors=f"{PORT}.tt.weight_layout_n15:device_tensors",
        tt_blank_inputs=f"{PORT}.tt.ttnn_policy_n15:blank_host_inputs",
    ),
    "n16": VersionSpec(
        name="n16",
        hf_repo="nvidia/GR00T-N1.6-3B",
        revision="d0814e7ecb19202e7c8468b46098b0b7ef3a6d61",
        model_type="Gr00tN1d6",
        # GR1 (the base checkpoint's zero-shot tag) first; G1 and bridge are fine-tune layouts (their checkpoints carry
        # their own statistics and modality configs). The noise always covers the 50 × 128 envelope.
        served=(
            Served("gr1", "gr1_n16", DemoScene(
                instruction="pick the pear from the counter and place it in the plate",
                state=f"{PORT}.demo.scenes:GR1_N16_STATE", frames=f"{PORT}.demo.scenes:gr1_frames",
                noise_shape=(50, 128))),
            Served("unitree_g1", "unitree_g1", DemoScene(
                instruction="pick up the apple and place it on the plate",
                state=f"{PORT}.demo.scenes:G1_STATE", frames=f"{PORT}.demo.scenes:g1_frames", noise_shape=(50, 128))),
            Served("oxe_widowx", "oxe_widowx", DemoScene(
                instruction="put the spoon on the towel",
                state=f"{PORT}.demo.scenes:WIDOWX_STATE", frames=f"{PORT}.demo.scenes:widowx_frames",
                noise_shape=(50, 128))),
        ),
        model_name="GR00T-N1.6-3B-p150",
        allow_patterns=("model-*.safetensors", "model.safetensors.index.json", "config.json", "processor_config.json",
                        "statistics.json", "embodiment_id.json", "LICENSE"),
        contract=ContractText(
            image_chain="shortest edge 256 (INTER_AREA) -> 0.95 centre crop -> shortest edge 256 -> Eagle smart "
                        "resize to multiples of 28 (PIL bicubic, uint8) -> (u8-127.5)/127.5 -> 14x14 patches, each "
                        "image on its own; one frame per camera, in the modality config's camera order",
            state_units="raw values per key (radians for joints); sin/cos or min/max as processor_config.json says",
            action_units="absolute targets: relative keys added to the request's state, absolute keys as decoded",
            instruction_counted="counted after normalisation (lower-case, punctuation removed) when the processor "
                                "config formalises language",
        ),
        config_cls=f"{PORT}.common.configs_n16:Gr00tN16Config",
        policy_cls=f"{PORT}.reference.torch_policy_n16:ReferencePolicyN16",
        fast_cls=f"{PORT}.torch_fast.fast_policy_n16:FastPolicyN16",
        inventory=f"{PORT}.common.weights:n16_inventory",
        synthetic_sidecars=f"{PORT}.common.synthetic:n16_sidecars",
        tokenizer_env="GR00T_TOKENIZER_DIR_N16",
        eagle_tokens=True,
        # One queue: no published N1.6 package to follow, and N1.6's request writes (patches, prompt, placement and
        # masks) are small next to its compute, so the two-queue overlap buys little; GR00T_NUM_CQS=2 still works.
        tt_policy_cls=f"{PORT}.tt.ttnn_policy_n16:TTGr00tPolicyN16",
        tt_num_cqs=1,
        tt_max_batch=1,  # ``TtGr00tN16`` runs one request per call so far: GR00T_MAX_BATCH > 1 runs one at a time
        tt_model_builder=f"{PORT}.tt.ttnn_policy_n16:build_model",
        tt_device_tensors=f"{PORT}.tt.weight_layout_n16:device_tensors",
        tt_blank_inputs=f"{PORT}.tt.ttnn_policy_n16:blank_host_inputs",
    ),
    "n17": VersionSpec(
        name="n17",
        hf_repo="nvidia/GR00T-N1.7-3B",
        revision="2fc962b973bccdd5d8ce4f67cc63b264d6886495",
        model_type="Gr00tN1d7",
        served=(Served("oxe_droid_relative_eef_relative_joint", "droid", DemoScene(
            instruction="Put the blue block in the green bowl",
            state=f"{PORT}.demo.scenes:DROID_STATE", frames=f"{PORT}.demo.scenes:droid_frames",
            noise_shape=(40, 132))),),
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
        tt_policy_cls=f"{PORT}.tt.ttnn_policy_n17:TTGr00tPolicyN17",
        tt_num_cqs=2,
        tt_model_builder=f"{PORT}.tt.ttnn_policy_n17:build_model",
        tt_device_tensors=f"{PORT}.tt.weight_layout_n17:device_tensors",
        tt_blank_inputs=f"{PORT}.tt.ttnn_policy_n17:blank_host_inputs",
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

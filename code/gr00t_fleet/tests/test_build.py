# SPDX-License-Identifier: Apache-2.0
"""The application ``serve run`` / ``serve deploy`` build, without a cluster: what each accelerator asks Ray for,
autoscaling from min/max, the replica's admission limit under Ray's, bad settings refused before any replica
starts; a Tenstorrent replica hands Ray's chip assignment to tt-metal."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.fleet

ENV = {"GR00T_VERSION": "n15", "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_MAX_QUEUE": "5"}


def policy_of(app):
    ingress = app._bound_deployment
    assert ingress.name == "FleetIngress"
    return ingress.init_args[0]._bound_deployment


@pytest.mark.parametrize("accelerator, wanted", [("cpu", {}), ("gpu", {"num_gpus": 1}),
                                                  ("tt", {"resources": {"TTNPU": 1}})])
def test_each_replica_asks_for_one_accelerator(accelerator, wanted):
    from gr00t_fleet.app import build

    policy = policy_of(build({"replicas": 2, "accelerator": accelerator, "env": ENV}))
    options = policy.ray_actor_options
    assert {k: options[k] for k in wanted} == wanted
    assert ("num_gpus" in options) == (accelerator == "gpu") and ("resources" in options) == (accelerator == "tt")
    assert options["runtime_env"]["env_vars"]["GR00T_VERSION"] == "n15"
    config = policy._deployment_config
    assert config.num_replicas == 2 and config.autoscaling_config is None
    assert config.max_ongoing_requests == 5 + 4  # above GR00T_MAX_QUEUE: the replica's own 429 answers first
    assert config.request_router_config.request_router_class == "gr00t_fleet.router:SessionAffinityRouter"


def test_min_and_max_replicas_turn_on_autoscaling_on_requests_in_flight():
    from gr00t_fleet.app import build

    scaling = policy_of(build({"replicas": 1, "min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 3,
                               "env": ENV}))._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.initial_replicas, scaling.max_replicas) == (1, 1, 3)
    assert scaling.target_ongoing_requests == 3


def test_bad_arguments_and_settings_fail_before_any_replica():
    from pydantic import ValidationError

    from gr00t_fleet.app import build
    from gr00t_p150.server.exceptions import SettingError

    with pytest.raises(ValidationError, match="min_replicas"):
        build({"replicas": 1, "min_replicas": 2, "max_replicas": 3, "env": ENV})
    with pytest.raises(ValidationError):
        build({"replicas": 2, "accelerator": "tpu", "env": ENV})
    with pytest.raises(SettingError, match="GR00T_MAX_QUEUE"):
        build({"env": {**ENV, "GR00T_MAX_QUEUE": "lots"}})
    with pytest.raises(SettingError, match="GR00T_ZMQ_PORT: the fleet serves the HTTP contract"):
        build({"env": {**ENV, "GR00T_ZMQ_PORT": "5555"}})


def test_the_config_file_builds():
    import yaml

    from gr00t_fleet.app import build

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "fleet.yaml").read_text())
    app = spec["applications"][0]
    assert app["import_path"] == "gr00t_fleet.app:build"
    assert policy_of(build(app["args"]))._deployment_config.num_replicas == app["args"]["replicas"]


def test_a_tenstorrent_replica_hands_its_chip_to_tt_metal():
    from gr00t_fleet.replica import accelerator_env

    assert accelerator_env({"TT_VISIBLE_DEVICES": "3"}) == {"TT_METAL_VISIBLE_DEVICES": "3"}
    assert accelerator_env({"TT_VISIBLE_DEVICES": "3", "TT_METAL_VISIBLE_DEVICES": "1"}) == {}  # set by hand: kept
    assert accelerator_env({}) == {}

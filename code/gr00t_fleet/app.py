# SPDX-License-Identifier: Apache-2.0
"""The fleet as a Ray Serve application: ``FleetIngress`` (the HTTP contract, ``ingress.py``) in front of the
``PolicyReplica`` deployment (the single server, one per accelerator, ``replica.py``), routed by
``router.SessionAffinityRouter``.

    serve run gr00t_fleet.app:build replicas=2 accelerator=cpu      # arguments as key=value
    serve run code/gr00t_fleet/fleet.yaml                           # or a Serve config file (serve deploy too)

The replicas read the single server's ``GR00T_*`` settings: those of the environment that builds the application,
overridden by the ``env`` argument; they reach every replica through Ray's ``runtime_env``. They are checked here,
so a bad setting stops the deployment with the single server's one-line error before any replica starts.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


# By import path, not the class: Ray then imports the module in each process, so the router shares that module's
# state (the replicas set aside, the live replica list the ingress reads); a pickled class would carry a copy.
ROUTER = "gr00t_fleet.router:SessionAffinityRouter"


class FleetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(2, ge=1, le=1024, description="replicas at start (fixed unless max_replicas > min)")
    min_replicas: int | None = Field(None, ge=0, le=1024, description="autoscaling floor (default: replicas)")
    max_replicas: int | None = Field(None, ge=1, le=1024, description="autoscaling ceiling (default: replicas)")
    target_ongoing_requests: float = Field(2.0, gt=0, description="autoscaling: requests in flight (queued or "
                                                                  "running) per replica to aim for")
    accelerator: Literal["cpu", "gpu", "tt"] = Field("cpu", description="what one replica owns: cpu (num_cpus), "
                                                     "gpu (num_gpus=1), tt (one TTNPU: a Tenstorrent chip)")
    cpus_per_replica: float = Field(1.0, ge=0, description="Ray CPUs reserved per replica (its torch threads)")
    env: dict[str, str] = Field(default_factory=dict, description="GR00T_* settings of every replica")
    max_queued_requests: int = Field(16, ge=1, description="per ingress replica: requests waiting for a policy "
                                                          "replica before 429")
    ingress_replicas: int = Field(1, ge=1, le=64)
    health_check_period_s: float = Field(2.0, gt=0)
    health_check_timeout_s: float = Field(30.0, gt=0)
    drills: bool = Field(False, description="allow failover drills (PolicyReplica.drill); for tests and demos")

    @model_validator(mode="after")
    def _scaling(self):
        lo = self.replicas if self.min_replicas is None else self.min_replicas
        hi = self.replicas if self.max_replicas is None else self.max_replicas
        if not lo <= self.replicas <= hi:
            raise ValueError(f"need min_replicas ({lo}) <= replicas ({self.replicas}) <= max_replicas ({hi})")
        return self

    def replica_env(self, environ=os.environ) -> dict[str, str]:
        return {**{k: v for k, v in environ.items() if k.startswith("GR00T_")}, **self.env}


def build(args: dict):
    """The application ``serve run`` / ``serve deploy`` load (``args``: ``FleetArgs`` fields)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from gr00t_p150.server.exceptions import SettingError
    from gr00t_p150.server.settings import load_config

    from .ingress import FleetIngress, api
    from .replica import PolicyReplica

    a = args if isinstance(args, FleetArgs) else FleetArgs.model_validate(args)
    env = a.replica_env()
    config = load_config(env)  # the single server's checks: raises SettingError with one line
    wire = [k for k in ("GR00T_ZMQ_PORT", "GR00T_OPENPI_PORT") if env.get(k)]
    if wire:  # every replica would bind the same port on a node; the fleet's door is the ingress's HTTP
        raise SettingError(f"{', '.join(wire)}: the fleet serves the HTTP contract through its ingress; the ZMQ and "
                           "openpi protocols are the single server's (unset them for the fleet)")
    actor: dict = {"num_cpus": a.cpus_per_replica, "runtime_env": {"env_vars": env}}
    if a.accelerator == "gpu":
        actor["num_gpus"] = 1
    elif a.accelerator == "tt":
        actor["resources"] = {"TTNPU": 1}
    lo = a.replicas if a.min_replicas is None else a.min_replicas
    hi = a.replicas if a.max_replicas is None else a.max_replicas
    scaling = ({"autoscaling_config": {"min_replicas": lo, "max_replicas": hi, "initial_replicas": a.replicas,
                                       "target_ongoing_requests": a.target_ongoing_requests}}
               if hi > lo else {"num_replicas": a.replicas})
    policy = serve.deployment(
        PolicyReplica, name="PolicyReplica", ray_actor_options=actor,
        max_ongoing_requests=config.max_queue + 4,  # above GR00T_MAX_QUEUE: the replica's own 429 answers first
        max_queued_requests=a.max_queued_requests,
        health_check_period_s=a.health_check_period_s, health_check_timeout_s=a.health_check_timeout_s,
        graceful_shutdown_timeout_s=config.drain_timeout_s, graceful_shutdown_wait_loop_s=0.5,
        request_router_config=RequestRouterConfig(request_router_class=ROUTER), **scaling)
    ingress = serve.deployment(serve.ingress(api)(FleetIngress), name="FleetIngress",
                               num_replicas=a.ingress_replicas, ray_actor_options={"num_cpus": 0},
                               max_ongoing_requests=1000)
    return ingress.bind(policy.bind(a.drills), max_body_bytes=config.max_body_bytes,
                        forward_timeout_s=max(60.0, config.request_timeout_ms / 1e3 + 60.0 if config.request_timeout_ms
                                              else 600.0))

# SPDX-License-Identifier: Apache-2.0
"""The ASGI entry point the package manifests name: ``gr00t_p150.server.app:app``.

Importing this module loads no weights, opens no device and imports neither ttnn nor the port: the
configuration is read and the model loaded, warmed up and checked by the fidelity gate inside the
lifespan (``web/factory.py``), so "Application startup complete" means ready to serve.
"""

from __future__ import annotations

from .web.factory import create_app
from .settings import load_config, parse_mesh_shape

__all__ = ["app", "create_app", "load_config", "parse_mesh_shape"]

app = create_app()

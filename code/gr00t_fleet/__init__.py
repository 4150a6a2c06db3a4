# SPDX-License-Identifier: Apache-2.0
"""The GR00T policy server as a fleet on Ray Serve (FLEET.md). Optional: needs the fleet extra (.venv-fleet); the
single server (gr00t_p150) never imports this package or Ray."""

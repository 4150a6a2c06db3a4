# SPDX-License-Identifier: Apache-2.0
"""The parts of ``check/stress_server.py``, the fuzz and stress campaign against a GR00T policy server process:
``hostile`` (the requests), ``client`` (HTTP), ``judge`` (the checks on every answer), ``process`` (the server
process and its RSS), ``phases`` (campaign, amplification, stalls), ``drain`` (SIGTERM) and ``report``."""

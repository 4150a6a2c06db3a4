# SPDX-License-Identifier: Apache-2.0
"""HTTP layer: settings, schemas, engine (the one device owner), errors, app."""

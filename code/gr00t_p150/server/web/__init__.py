# SPDX-License-Identifier: Apache-2.0
"""The HTTP layer: app factory and lifespan, routes, schemas, guards, the h11 head-deadline protocol and the
error responses."""

# SPDX-License-Identifier: Apache-2.0
from models.experimental.gr00t.tests.device_fixtures import p150, tt_cache_root  # noqa: F401

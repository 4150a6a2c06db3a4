# SPDX-License-Identifier: Apache-2.0
from models.experimental.gr00t.tests.device_fixtures import (device_checkpoint, device_checkpoint_n17,  # noqa: F401
                                                              p150, tt_cache_root)

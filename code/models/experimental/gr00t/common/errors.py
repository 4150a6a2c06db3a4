# SPDX-License-Identifier: Apache-2.0
"""Error types shared by the reference, the CLIs and the server.

Each carries a one-line, user-facing message: CLIs print it as is, the server maps ``InputError`` to
HTTP 400 with the offending ``field`` and ``rule``.
"""


class Gr00tError(Exception):
    """Base class: anything the user can fix (bad file, bad input, bad setting)."""


class ConfigError(Gr00tError):
    """A config.json / metadata.json / setting that cannot be used."""


class CheckpointError(Gr00tError):
    """A checkpoint directory whose files or tensors do not match the expected format."""


class InputError(Gr00tError):
    """A malformed observation: names the field and the rule it breaks."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule

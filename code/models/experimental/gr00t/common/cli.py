# SPDX-License-Identifier: Apache-2.0
"""Shared entry-point wrapper for the command-line tools: one clear line on stderr, never a traceback
wall, for anything the user can fix."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import Gr00tError


def run_cli(main: Callable[[], int | None], prog: str) -> None:
    try:
        code = main()
    except Gr00tError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"{prog}: error: {exc.strerror}: {exc.filename}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)


def read_json(path: str | Path, what: str):
    path = Path(path)
    if not path.is_file():
        raise Gr00tError(f"{what} file not found: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Gr00tError(f"{what} file {path} is not valid JSON ({exc})") from None

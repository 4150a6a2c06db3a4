# SPDX-License-Identifier: Apache-2.0
"""Where the weights come from (``GR00T_WEIGHTS``) and what they are, for provenance and caching (their
fingerprint is the port's, ``common/checkpoint.py``).

- ``hub``: the pinned revision from the Hugging Face cache (``local_files_only`` first, then a download);
- a local snapshot directory;
- ``synthetic:tiny`` / ``synthetic:full``: generated once, deterministically (seed 0), into the cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .exceptions import WeightsError
from .settings import ServerConfig

SYNTHETIC_SEED = 0


@dataclass(frozen=True)
class WeightsInfo:
    path: Path
    source: str  # "hub", "local" or "synthetic:<scale>"
    repo: str | None
    revision: str | None
    synthetic: dict | None  # the checkpoint's SYNTHETIC.json marker, None for real weights
    fingerprint: str  # identifies the exact weights (cache key of the fidelity golden)

    def to_dict(self) -> dict:
        return {"source": self.source, "path": str(self.path), "repo": self.repo, "revision": self.revision,
                "synthetic": self.synthetic is not None, "synthetic_info": self.synthetic,
                "fingerprint": self.fingerprint}


def resolve_weights(config: ServerConfig, log: Callable[[str], None]) -> WeightsInfo:
    from models.experimental.gr00t.common.checkpoint import fingerprint

    if config.weights.startswith("synthetic:"):
        return _synthetic(config, config.weights.split(":", 1)[1], log)
    if config.weights == "hub":
        path = _from_hub(config, log)
        return WeightsInfo(path, "hub", config.weights_repo, config.weights_revision, None, fingerprint(path))
    path = Path(config.weights)
    from models.experimental.gr00t.common.synthetic import synthetic_info

    return WeightsInfo(path, "local", None, None, synthetic_info(path), fingerprint(path))


def _synthetic(config: ServerConfig, scale: str, log: Callable[[str], None]) -> WeightsInfo:
    from models.experimental.gr00t.common.checkpoint import fingerprint
    from models.experimental.gr00t.common.synthetic import synthetic_info, write_checkpoint

    path = config.cache_dir / "synthetic" / f"{config.version}-{scale}-seed{SYNTHETIC_SEED}"
    if synthetic_info(path) is None:
        log(f"Generating synthetic {scale} weights (random, seed {SYNTHETIC_SEED}) into {path}")
        partial = path.with_name(path.name + f".partial-{os.getpid()}")
        write_checkpoint(partial, scale=scale, seed=SYNTHETIC_SEED, version=config.version, log=log)
        try:
            partial.rename(path)
        except OSError:  # another process finished first: use its copy
            import shutil

            shutil.rmtree(partial, ignore_errors=True)
    return WeightsInfo(path, f"synthetic:{scale}", None, None, synthetic_info(path),
                       fingerprint(path, content=scale == "tiny"))


def _from_hub(config: ServerConfig, log: Callable[[str], None]) -> Path:
    from huggingface_hub import snapshot_download
    from models.experimental.gr00t.common.versions import SPECS

    kwargs = {"repo_id": config.weights_repo, "revision": config.weights_revision,
              "allow_patterns": list(SPECS[config.version].allow_patterns)}
    try:
        return Path(snapshot_download(**kwargs, local_files_only=True))
    except Exception:  # not cached (huggingface_hub raises several types here)
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise WeightsError(_hint(config, "are not in the Hugging Face cache and HF_HUB_OFFLINE is set"))
    log(f"Downloading weights for model: {config.weights_repo}@{config.weights_revision}")
    try:
        return Path(snapshot_download(**kwargs))
    except Exception as exc:
        raise WeightsError(_hint(config, f"could not be downloaded ({type(exc).__name__})")) from None


def _hint(config: ServerConfig, what: str) -> str:
    return (f"weights {config.weights_repo}@{config.weights_revision[:12]} {what}: download them where the hub is "
            f"reachable (code/scripts/download_weights.sh, then copy the HF cache), or set GR00T_WEIGHTS to a local "
            f"snapshot directory, or GR00T_WEIGHTS=synthetic:tiny for a test run with random weights")


def read_golden(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WeightsError(f"fidelity golden {path} is unreadable ({exc})") from None

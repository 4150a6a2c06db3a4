# SPDX-License-Identifier: Apache-2.0
"""The document rules of a tt-model container manifest (schema "5.1", kind tt-dit-server): tt-model's own tables
and the checks that need only the parsed YAML. Rule numbers are those of the schema-5.1 checklist (23 rules;
tt-model-manager's src/tt_kernel/container_manifest.py, launchers.py, build.py and manifest.py are the ground
truth); verify_manifest.py adds the rules that look at files and runs the verify lines.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

SCHEMA = "5.1"
KIND = "tt-dit-server"

TOP_KEYS = {"schema", "repo", "name", "weights", "auxiliary_weights", "kind", "arch", "source", "image", "runtime",
            "serve", "serve_profiles", "default_profile", "card", "verify"}
TOP_REQUIRED = ("repo", "name", "weights", "arch", "source")
WEIGHTS_KEYS = {"repo", "revision", "allow_patterns", "ignore_patterns"}
SOURCE_KEYS = {"tt_metal", "code", "extra_code", "ubuntu", "python"}
SOURCE_REQUIRED = ("tt_metal", "code", "ubuntu", "python")
GIT_KEYS = {"repo", "ref", "sha"}
IMAGE_KEYS = {"registry", "repository"}
RUNTIME_KEYS = {"app", "packages", "lock", "mesh_shape_env"}
SERVE_KEYS = {"hardware", "mesh_device", "port", "env", "args", "max_model_len", "max_num_seqs", "block_size",
              "server_timeout", "capabilities", "additional_config"}
SERVE_IGNORED = ("max_model_len", "max_num_seqs", "block_size", "server_timeout", "capabilities", "additional_config")
PROFILE_KEYS = SERVE_KEYS | {"name", "description"}
# What this project's cards use; tt-model's container_manifest.py accepts only description and quickstart.
CARD_KEYS = {"description", "quickstart", "performance", "limitations", "licensing"}
ARCHES = ("blackhole", "wormhole_b0")
UBUNTU_TAGS = ("22.04", "24.04")

# tt-model's tables (container_manifest.py): mesh presets as (rows, cols) and chips per board.
MESH_DEVICE_PRESETS = {"N150": (1, 1), "P100": (1, 1), "P150": (1, 1), "P150x2": (1, 2), "N300": (1, 2),
                       "P300": (1, 2), "N150x4": (1, 4), "P150x4": (1, 4), "T3K": (1, 8), "P150x8": (1, 8),
                       "P300x2": (1, 4), "QB2": (2, 2), "TG": (4, 8), "BH-Galaxy": (4, 8)}
BOARD_CHIPS = {"p100": 1, "p150": 1, "n150": 1, "e150": 1, "p300": 2, "n300": 2}

SLUG_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HEX40_RE = re.compile(r"[0-9a-f]{40}")
PYTHON_RE = re.compile(r"3\.\d+")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
APP_RE = re.compile(r"[\w.]+:[A-Za-z_]\w*")
HARDWARE_RE = re.compile(r"(?P<base>[a-z]\d+[a-z]?)(?:x(?P<mult>\d+))?")

# Staging drops these names silently at every level (tt-model's build.py CODE_IGNORE).
CODE_IGNORE = ("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", ".venv", "venv", "logs", "*.log",
               "*.safetensors", "*.pt", "*.pth", "*.ckpt", "*.bin", "*.refpt")
# The ones a server might actually need at runtime: reported (rule 14) when an allowlisted tree holds them.
DROPPED_WORTH_REPORTING = ("*.pt", "*.pth", "*.bin", "*.safetensors", "*.ckpt", "*.refpt", "*.log", "logs")
# Variables tt-model sets itself at `docker run` (container.py, launchers.py); serve.env must not override them.
TT_MODEL_OWNED_ENV = ("HF_MODEL", "MESH_DEVICE", "HF_HOME", "HF_HUB_CACHE", "TT_METAL_CACHE", "TT_DIT_CACHE_DIR",
                      "TT_CACHE_PATH", "HF_TOKEN")
DEFAULT_MESH_SHAPE_ENV = "FLUX2_MESH_SHAPE"
# tt-model pins torch itself and builds ttnn editable from source.tt_metal (launchers.py; schema 5.1 has no wheel).
FORBIDDEN_PACKAGES = {"torch": "tt-model adds torch==<tt-metal's pin>+cpu itself, and its verify asserts that pin",
                      "ttnn": "ttnn is built from source.tt_metal and installed editable; a wheel would fight it",
                      "tt-metal": "tt-metal is built from source.tt_metal", "tt-metalium": "tt-metal is built from "
                      "source.tt_metal"}


def kind_of(value) -> str:
    for t, name in ((bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"), (list, "list"),
                    (dict, "mapping")):
        if isinstance(value, t):
            return name
    return "null" if value is None else type(value).__name__


def shown(value) -> str:
    text = repr(value)
    return f"{kind_of(value)} {text[:60] + '...' if len(text) > 63 else text}"


def quote_hint(value) -> str:
    return " (quote it in YAML)" if isinstance(value, (int, float, bool)) or value is None else ""


def drop_reason(name: str, patterns=CODE_IGNORE) -> str | None:
    return next((p for p in patterns if fnmatch.fnmatchcase(name, p)), None)


def bad_relative(path: str) -> bool:
    return path.startswith("/") or ".." in Path(path).parts


def load_yaml(text: str):
    """yaml.safe_load, plus the duplicated keys it would silently collapse (last one wins)."""
    import yaml

    class Loader(yaml.SafeLoader):
        duplicates: list

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                try:
                    key = self.construct_object(key_node, deep=True)
                    if key in seen:
                        self.duplicates.append((key, key_node.start_mark.line + 1))
                    seen.add(key)
                except TypeError:
                    pass  # unhashable key: the base class reports it
            return super().construct_mapping(node, deep)

    loader = Loader(text)
    loader.duplicates = []
    try:
        return loader.get_single_data(), loader.duplicates
    finally:
        loader.dispose()


def module_binds(tree: ast.Module, name: str) -> bool:
    """Whether the module binds `name` at top level (also inside if/try/with blocks), as uvicorn's getattr needs."""
    def targets(t):
        if isinstance(t, ast.Name):
            yield t.id
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                yield from targets(e)
        elif isinstance(t, ast.Starred):
            yield from targets(t.value)

    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in (name, "__getattr__"):
                return True
            continue
        if isinstance(node, ast.Assign) and any(name in targets(t) for t in node.targets):
            return True
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and getattr(node, "value", None) is not None \
                and name in targets(node.target):
            return True
        if isinstance(node, ast.Import) and any((a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" or (a.asname or a.name) == name
                                                    for a in node.names):
            return True
        stack.extend(c for c in ast.iter_child_nodes(node)
                     if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case)))
    return False


def merge(base: dict, over: dict) -> dict:
    """tt-model's profile merge: dicts recurse, scalars override, an empty or null value does not blank the base."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif value is not None and value != [] and value != {}:
            out[key] = value
    return out


class DocumentChecks:
    """Findings about one manifest document; every message names its key path and its checklist rule."""

    def __init__(self):
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.doc: dict = {}
        self.card_sections: dict[str, bool] | None = None  # performance / limitations present, once checked

    def error(self, rule, msg: str) -> None:
        self.errors.append(f"[rule {rule}] {msg}")

    def warn(self, rule, msg: str) -> None:
        self.warnings.append(f"[rule {rule}] {msg}")

    def keys(self, mapping: dict, allowed: set, where: str, rule) -> None:
        for key in mapping:
            if key not in allowed:
                self.error(rule, f"unknown key {key!r} in {where} (allowed: {', '.join(sorted(allowed))})")

    def mapping(self, value, where: str, rule) -> dict | None:
        if isinstance(value, dict):
            return value
        self.error(rule, f"{where} must be a mapping, got {shown(value)}")
        return None

    def string(self, value, where: str, rule) -> str | None:
        if isinstance(value, str):
            return value
        self.error(rule, f"{where} must be a string, got {shown(value)}{quote_hint(value)}")
        return None

    def str_list(self, value, where: str, rule, nonempty=False) -> list[str] | None:
        if not isinstance(value, list):
            self.error(rule, f"{where} must be a list of strings, got {shown(value)}")
            return None
        if bad := [(i, v) for i, v in enumerate(value) if not isinstance(v, str)]:
            self.error(rule, f"{where}[{bad[0][0]}] must be a string, got {shown(bad[0][1])}{quote_hint(bad[0][1])}")
            return None
        if nonempty and not value:
            self.error(rule, f"{where} must list at least one entry")
            return None
        return value

    def check_identity(self, doc: dict) -> None:
        if "schema" in doc:
            if not isinstance(doc["schema"], str):
                self.error(3, f'schema must be the string "{SCHEMA}", got {shown(doc["schema"])}'
                              f' (quote it in YAML: schema: "{SCHEMA}")')
            elif doc["schema"] != SCHEMA:
                self.error(3, f"unsupported manifest schema {doc['schema']!r}; expected {SCHEMA!r}")
        if "repo" in doc and (repo := self.string(doc["repo"], "repo", 4)) is not None:
            if "/" not in repo:
                self.error(4, f"repo must be a namespaced HF id (org/name), got {repo!r}")
            elif not REPO_RE.fullmatch(repo):
                self.error(4, f"repo {repo!r} is not a Hub id: expected exactly one '/' between org and name, "
                              "letters, digits, '.', '_', '-' only")
        if "name" in doc and (name := self.string(doc["name"], "name", 5)) is not None:
            if not SLUG_RE.fullmatch(name):
                self.error(5, f"name {name!r} is not a safe slug: lowercase letters, digits and '.', '_', '-', "
                              "starting alphanumeric (it becomes a cache path and a container name)")
            elif name[-1] in "._-" or ".." in name:
                self.error(5, f"name {name!r} ends in '{name[-1]}' or contains '..': "
                              "tt-model/<name> would not be a valid Docker image reference")
        if "kind" not in doc:
            self.error(6, f"kind is missing: tt-model then defaults to vllm-plugin; write kind: {KIND}")
        elif doc["kind"] != KIND:
            self.error(6, f"kind must be {KIND!r} for this package, got {shown(doc['kind'])}")
        if "arch" in doc and doc["arch"] not in ARCHES:
            self.error(6, f"arch must be one of {', '.join(ARCHES)}, got {shown(doc['arch'])}")

    def check_weights_ref(self, value, where: str, main: bool) -> str | None:
        if isinstance(value, str):
            if main:
                self.error(8, f"{where} is a bare repo id: pin it as {{repo: {value}, revision: <40-hex sha>}}, "
                              "or serve downloads whatever the default branch holds that day")
            else:
                self.warn(8, f"{where} {value!r} has no pinned revision")
            repo = value
        elif (spec := self.mapping(value, where, 7)) is not None:
            self.keys(spec, WEIGHTS_KEYS, where, 7)
            repo = self.string(spec["repo"], f"{where}.repo", 7) if "repo" in spec else None
            if "repo" not in spec:
                self.error(7, f"{where}.repo is required")
            revision = spec.get("revision")
            if revision is None:
                (self.error if main else self.warn)(8, f"{where}.revision is not set: pin the 40-hex commit sha")
            elif not isinstance(revision, str) or not HEX40_RE.fullmatch(revision):
                self.error(8, f"{where}.revision must be a full 40-hex lowercase commit sha (a branch or tag floats), "
                              f"got {shown(revision)}")
            for key in ("allow_patterns", "ignore_patterns"):
                if spec.get(key) is not None:
                    self.str_list(spec[key], f"{where}.{key}", 9)
        else:
            return None
        if repo is not None and "/" not in repo:
            self.error(7, f"{where} must be a namespaced HF id (org/name), got {repo!r}")
        return repo

    def check_weights(self, doc: dict) -> None:
        repos = []
        if "weights" in doc:
            repos.append(self.check_weights_ref(doc["weights"], "weights", main=True))
        aux = doc.get("auxiliary_weights", [])
        if not isinstance(aux, list):
            self.error(7, f"auxiliary_weights must be a list, got {shown(aux)}")
            aux = []
        repos += [self.check_weights_ref(a, f"auxiliary_weights[{i}]", main=False) for i, a in enumerate(aux)]
        repos = [r for r in repos if r]
        if dupes := sorted({r for r in repos if repos.count(r) > 1}):
            self.error(7, f"duplicate weight repositories across weights/auxiliary_weights: {dupes}")

    def check_git(self, value: dict, where: str, rule) -> None:
        self.keys(value, GIT_KEYS, where, rule)
        for key in ("repo", "ref"):
            if key not in value:
                self.error(rule, f"{where}.{key} is required in the git form {{repo, ref}}")
            else:
                self.string(value[key], f"{where}.{key}", rule)

    def check_packages(self, packages) -> None:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        if (packages := self.str_list(packages, "runtime.packages", 18)) is None:
            return
        names = []
        for spec in packages:
            try:
                req = Requirement(spec)
            except InvalidRequirement as exc:
                self.error(18, f"runtime.packages entry {spec!r} is not a PEP 508 requirement: {exc}")
                continue
            name = canonicalize_name(req.name)
            names.append(name)
            if name in FORBIDDEN_PACKAGES:
                self.error(18, f"runtime.packages must not list {spec!r}: {FORBIDDEN_PACKAGES[name]}")
            if name == "numpy" and (not req.specifier or any(req.specifier.contains(v, prereleases=True)
                                                             for v in ("2.0.0", "2.1.3", "2.4.0", "3.0.0"))):
                self.error(18, f"runtime.packages {spec!r} admits numpy 2: ttnn needs numpy<2")
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            self.warn(18, f"runtime.packages lists {', '.join(dupes)} more than once")

    def check_serve_block(self, block: dict, where: str, allowed: set, owned: set) -> None:
        self.keys(block, allowed, where, 20)
        for key in ("hardware", "mesh_device"):
            if block.get(key) is not None:
                self.string(block[key], f"{where}.{key}", 20)
        if block.get("port") is not None:
            port = block["port"]
            if not isinstance(port, int) or isinstance(port, bool):
                self.error(21, f"{where}.port must be an integer, got {shown(port)}")
            elif not 1024 <= port <= 65535:
                self.error(21, f"{where}.port {port} is outside 1024-65535")
        if block.get("env") is not None and (env := self.mapping(block["env"], f"{where}.env", 21)) is not None:
            for key, value in env.items():
                if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
                    self.error(21, f"{where}.env key {key!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
                    continue
                if not isinstance(value, str):
                    self.error(3, f"{where}.env.{key} must be a string, got {shown(value)}{quote_hint(value)}")
                if key in owned:
                    self.error(21, f"{where}.env sets {key}, which tt-model sets itself at docker run: remove it")
        if block.get("args") is not None:
            args = block["args"]
            if not isinstance(args, list) or not all(
                    isinstance(a, str) or (isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) for x in a))
                    for a in args):
                self.error(20, f"{where}.args must be a list of strings or [flag, value] pairs, got {shown(args)}")
        for key in ("max_model_len", "max_num_seqs", "block_size"):
            if block.get(key) is not None and (not isinstance(block[key], int) or isinstance(block[key], bool)):
                self.error(20, f"{where}.{key} must be an integer, got {shown(block[key])}")
        if block.get("capabilities") is not None and (cap := self.mapping(block["capabilities"],
                                                                         f"{where}.capabilities", 20)) is not None:
            self.keys(cap, {"tool_parser", "reasoning_parser"}, f"{where}.capabilities", 20)
        if block.get("additional_config") is not None:
            self.mapping(block["additional_config"], f"{where}.additional_config", 20)
        if ignored := [k for k in SERVE_IGNORED if block.get(k) is not None]:
            self.notes.append(f"{where}: {', '.join(ignored)} are ignored by kind {KIND}")

    def check_serve(self, doc: dict) -> None:
        runtime = doc.get("runtime") if isinstance(doc.get("runtime"), dict) else {}
        mesh_var = runtime.get("mesh_shape_env")
        owned = set(TT_MODEL_OWNED_ENV) | {mesh_var if isinstance(mesh_var, str) else DEFAULT_MESH_SHAPE_ENV}
        serve = doc.get("serve", {})
        if serve is None or (serve := self.mapping(serve, "serve", 20)) is None:
            serve = {}
        self.check_serve_block(serve, "serve", SERVE_KEYS, owned)
        profiles = doc.get("serve_profiles", [])
        if not isinstance(profiles, list):
            self.error(22, f"serve_profiles must be a list, got {shown(profiles)}")
            profiles = []
        declared = []
        for i, p in enumerate(profiles):
            if (p := self.mapping(p, f"serve_profiles[{i}]", 22)) is None:
                continue
            if not isinstance(p.get("name"), str):
                self.error(22, f"serve_profiles[{i}].name is required and must be a string")
                continue
            self.check_serve_block(p, f"serve profile {p['name']!r}", PROFILE_KEYS, owned)
            declared.append(p)
        names = [p["name"] for p in declared] or ["default"]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            self.error(22, f"duplicate serve profile names: {dupes}")
        default = doc.get("default_profile")
        if default is not None and not isinstance(default, str):
            self.error(22, f"default_profile must be a string, got {shown(default)}")
        elif len(names) > 1 and not default:
            self.error(22, "a manifest with multiple serve profiles must name a default_profile; profiles: "
                           + ", ".join(names))
        elif default and default not in names:
            self.error(22, f"default_profile {default!r} names no profile; available: {', '.join(names)}")
        for profile in declared or [{"name": "default"}]:
            merged = merge(serve, {k: v for k, v in profile.items() if k not in ("name", "description")})
            self.check_mesh(merged, f"serve profile {profile['name']!r}")

    def check_mesh(self, merged: dict, where: str) -> None:
        hardware, mesh = merged.get("hardware"), merged.get("mesh_device")
        for key, value in (("hardware", hardware), ("mesh_device", mesh)):
            if value is None:
                self.error(20, f"{where}: {key} is required (set it on the profile or under serve:)")
        if not isinstance(hardware, str) or not isinstance(mesh, str):
            return
        shape = None
        try:
            parsed = ast.literal_eval(mesh)
            if isinstance(parsed, (tuple, list)) and len(parsed) == 2 and all(isinstance(x, int) for x in parsed):
                shape = tuple(parsed)
        except (ValueError, SyntaxError):
            pass
        shape = shape or MESH_DEVICE_PRESETS.get(mesh)
        if shape is None:
            self.error(20, f"{where}: invalid mesh_device {mesh!r}; expected one of "
                           f"{', '.join(MESH_DEVICE_PRESETS)} or a literal \"(rows, cols)\"")
        m = HARDWARE_RE.fullmatch(hardware.strip().lower())
        per_board = m and (BOARD_CHIPS.get(m["base"]) or BOARD_CHIPS.get(re.sub(r"[a-z]$", "", m["base"])))
        chips = per_board * int(m["mult"] or 1) if per_board else None
        if not chips:
            hint = f" {hardware!r} is a mesh_device SKU, not a board label." if hardware in MESH_DEVICE_PRESETS else ""
            self.error(20, f"{where}: hardware {hardware!r} is not a recognised board label.{hint} Expected "
                           f"<board>[xN] with board one of {', '.join(sorted(BOARD_CHIPS))}")
        elif shape is not None and shape[0] * shape[1] != chips:
            self.error(20, f"{where}: mesh_device {mesh!r} opens a {shape[0]}x{shape[1]} mesh "
                           f"({shape[0] * shape[1]} chips) but hardware {hardware!r} implies {chips}")

    def check_card_and_verify(self, doc: dict) -> None:
        verify = doc.get("verify", [])
        if (lines := self.str_list(verify, "verify", 23)) is not None:
            for i, line in enumerate(lines):
                try:
                    compile(line, "<verify>", "exec")
                except SyntaxError as exc:
                    self.error(23, f"verify[{i}] does not compile: {exc.msg} (line {exc.lineno}, column "
                                   f"{exc.offset}): {line[:80]!r}")
        if "card" not in doc or (card := self.mapping(doc["card"], "card", 23)) is None:
            card = {}
        self.keys(card, CARD_KEYS, "card", 23)
        for key, value in card.items():
            if key in CARD_KEYS:
                self.string(value, f"card.{key}", 23)
        self.card_sections = {k: bool(str(card.get(k) or "").strip()) for k in ("performance", "limitations")}
        if missing := [k for k, present in self.card_sections.items() if not present]:
            self.warn(23, f"card has no {' and no '.join(missing)}: tt-model publish and push --publish want both")

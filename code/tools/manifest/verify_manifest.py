#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check a tt-model container manifest (schema "5.1", kind tt-dit-server) without Docker or tt-model, then run its
`verify:` lines against a local copy of the image's code layout.

    verify_manifest.py MANIFEST [MANIFEST ...] [--static-only] [-v]
    python -m tools.manifest.verify_manifest MANIFEST ...   (either way code/ must be on sys.path: the venv's .pth)

Static checks: the Docker-free rules of the schema-5.1 checklist (23 rules, numbers printed with each finding):
'T' rules are what Tenstorrent's tt-model-manager enforces (src/tt_kernel/container_manifest.py, launchers.py,
build.py, manifest.py), 'P' rules are stricter than tt-model itself. Then each verify entry runs as
`<this python> -c '<entry>'` in a fresh process, with the image's layout reproduced: every allowlisted path is
copied (through tt-model's ignore list) to a temporary <staging>/<path>, PYTHONPATH=<staging> alone, HOME a temp
dir, no GR00T_*/TT_* variables, and every literal /opt/tt-metal in the entry replaced by <staging>. The
allowlisted roots themselves are taken off the child's sys.path (a venv .pth file may put this checkout there), so
a module the manifest does not ship fails here as it would in the image.

Deviation from tt-model: relative local paths (source.tt_metal, extra_code roots) are resolved against the
MANIFEST'S DIRECTORY, not the current directory, so the result does not depend on where this runs. tt-model
resolves them against its CWD; run `tt-model package` from the manifest's directory and the two agree.

Exit status: 0 clean (warnings allowed), 1 a static error or a failing verify line, 2 unusable arguments.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.manifest.manifest_rules import (
    APP_RE,
    CODE_IGNORE,
    DEFAULT_MESH_SHAPE_ENV,
    DROPPED_WORTH_REPORTING,
    ENV_KEY_RE,
    IMAGE_KEYS,
    KIND,
    PYTHON_RE,
    RUNTIME_KEYS,
    SOURCE_KEYS,
    SOURCE_REQUIRED,
    TOP_KEYS,
    TOP_REQUIRED,
    TT_MODEL_OWNED_ENV,
    UBUNTU_TAGS,
    DocumentChecks,
    bad_relative,
    drop_reason,
    kind_of,
    load_yaml,
    module_binds,
    shown,
)

PROG = "verify_manifest"
IMAGE_ROOT = "/opt/tt-metal"  # where the image copies the staged code/ tree (Dockerfile: COPY code/ /opt/tt-metal/)
VERIFY_TIMEOUT_S = 300


class ToolError(Exception):
    """Unusable arguments: one line on stderr, exit 2."""


def failure_line(stderr: str, returncode: int) -> str:
    """The exception line of a traceback (the first line after the indented frames), else stderr's first line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if "Traceback (most recent call last):" in lines:
        tail = lines[lines.index("Traceback (most recent call last):") + 1:]
        rest = [i for i, line in enumerate(tail) if not line.startswith(" ")]
        if rest:
            return tail[rest[0]]
    return lines[0] if lines else f"exit status {returncode}, nothing on stderr"


class Manifest(DocumentChecks):
    """One manifest file: the document rules, the rules that look at its trees, and its verify run."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.base = path.resolve().parent
        # (label, root or None when not on disk, relative path), in tt-model's staging order: code, then extra_code.
        self.entries: list[tuple[str, Path | None, str]] = []

    def local(self, text: str) -> Path:
        p = Path(text).expanduser()
        return p if p.is_absolute() else self.base / p

    def check(self) -> None:
        try:
            doc, duplicates = load_yaml(self.path.read_text())
        except Exception as exc:  # yaml.YAMLError, UnicodeDecodeError: both "not YAML"
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            self.error(1, f"not valid YAML: {getattr(exc, 'problem', None) or ' '.join(str(exc).split())}{where}")
            return
        for key, line in duplicates:
            self.error(1, f"key {key!r} appears twice (line {line}); YAML keeps only the last one")
        if not isinstance(doc, dict):
            self.error(1, f"the file does not hold a YAML mapping (got {kind_of(doc)})")
            return
        self.doc = doc
        self.keys(doc, TOP_KEYS, "the top level", 2)
        for key in TOP_REQUIRED:
            if key not in doc:
                self.error(2, f"required key {key!r} is missing")
        self.check_identity(doc)
        self.check_weights(doc)
        if "source" in doc and (source := self.mapping(doc["source"], "source", 10)) is not None:
            self.check_source(source)
        if "image" in doc and (image := self.mapping(doc["image"], "image", 2)) is not None:
            self.keys(image, IMAGE_KEYS, "image", 2)
            for key in IMAGE_KEYS & set(image):
                self.string(image[key], f"image.{key}", 2)
        self.check_runtime(doc)
        self.check_serve(doc)
        self.check_card_and_verify(doc)

    def check_source(self, source: dict) -> None:
        self.keys(source, SOURCE_KEYS, "source", 10)
        for key in SOURCE_REQUIRED:
            if key not in source:
                self.error(10, f"source.{key} is required")
        if "ubuntu" in source and (ubuntu := self.string(source["ubuntu"], "source.ubuntu", 3)) is not None \
                and ubuntu not in UBUNTU_TAGS:
            self.error(10, f"source.ubuntu {ubuntu!r} is not a published tt-metalium dev image tag "
                           f"({', '.join(UBUNTU_TAGS)})")
        if "python" in source and (python := self.string(source["python"], "source.python", 3)) is not None \
                and not PYTHON_RE.fullmatch(python):
            self.error(10, f"source.python must look like '3.12', got {python!r}")

        tree = self.check_tt_metal(source["tt_metal"]) if "tt_metal" in source else None
        if "code" in source and (code := self.str_list(source["code"], "source.code", 12, nonempty=True)):
            self.add_entries(code, tree, "source.code", "source.code", "the tt-metal tree", 12)
        extra = source.get("extra_code", [])
        if not isinstance(extra, list):
            self.error(13, f"source.extra_code must be a list of {{root, paths}}, got {shown(extra)}")
            extra = []
        for i, item in enumerate(extra):
            self.check_extra_code(item, f"source.extra_code[{i}]")
        self.check_dropped_and_overlaps()

    def check_tt_metal(self, value) -> Path | None:
        if isinstance(value, dict):
            self.check_git(value, "source.tt_metal", 11)
            self.notes.append("source.tt_metal is a git reference: source.code is neither checked nor staged")
            return None
        if (text := self.string(value, "source.tt_metal", 11)) is None:
            return None
        tree = self.local(text)
        if not tree.is_dir():
            where = "" if Path(text).expanduser().is_absolute() else f" ({tree}: relative to the manifest)"
            self.error(11, f"source.tt_metal {text!r} is not a directory on this machine{where}")
            return None
        if not (tree / "tt_metal").is_dir():
            self.error(11, f"source.tt_metal {tree} does not look like a tt-metal checkout (no tt_metal/)")
        elif not (tree / "tt_metal/third_party/umd/CMakeLists.txt").is_file():
            self.error(11, f"source.tt_metal {tree} has uninitialised git submodules "
                           "(no tt_metal/third_party/umd/CMakeLists.txt)")
        try:
            proc = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], check=False,
                                  capture_output=True, text=True, timeout=120)
            if proc.returncode == 0 and proc.stdout.strip():
                self.warn(11, f"source.tt_metal {tree} is dirty ({len(proc.stdout.splitlines())} changed or "
                              "untracked paths): the card will say so")
        except (OSError, subprocess.TimeoutExpired):
            self.notes.append(f"could not run git status in {tree}")
        return tree

    def check_extra_code(self, item, where: str) -> None:
        if (item := self.mapping(item, where, 13)) is None:
            return
        self.keys(item, {"root", "paths"}, where, 13)
        if "root" not in item or "paths" not in item:
            self.error(13, f"{where} needs both root and paths")
            return
        root = None
        if isinstance(item["root"], dict):
            self.check_git(item["root"], f"{where}.root", 13)
            self.notes.append(f"{where}.root is a git reference: its paths are neither checked nor staged")
        elif (text := self.string(item["root"], f"{where}.root", 13)) is not None:
            root = self.local(text)
            if not root.is_dir():
                self.error(13, f"{where}.root {text!r} is not a directory ({root}; relative roots are resolved "
                               "against the manifest's directory)")
                root = None
        if (paths := self.str_list(item["paths"], f"{where}.paths", 13, nonempty=True)) is not None:
            self.add_entries(paths, root, f"{where}.paths", "source.extra_code", "their root", 13)

    def add_entries(self, rels: list[str], base: Path | None, where: str, field: str, relative_to: str,
                    rule: int) -> None:
        """Record ``where``'s paths (relative to ``base``) for staging; name the absolute or escaping ones and,
        when ``base`` is known, the missing ones."""
        missing = []
        for i, rel in enumerate(rels):
            if bad_relative(rel):
                self.error(rule, f"{field} paths must be relative to {relative_to}: {rel!r}")
                continue
            self.entries.append((f"{where}[{i}]", base, rel))
            if base is not None and not (base / rel).exists():
                missing.append(rel)
        if missing:
            self.error(rule, f"{field} lists {len(missing)} path(s) that do not exist under {base}: "
                             + ", ".join(sorted(missing)))

    def staged_files(self, root: Path, rel: str):
        """(relative path, dropped pattern or None) for every file staging would see under root/rel."""
        src = root / rel
        if src.is_file():
            yield rel, drop_reason(src.name, DROPPED_WORTH_REPORTING)
            return
        for dirpath, dirnames, filenames in os.walk(src):
            here = Path(dirpath).relative_to(root)
            for d in list(dirnames):
                if drop_reason(d) and not drop_reason(d, DROPPED_WORTH_REPORTING):
                    dirnames.remove(d)  # caches and venvs: dropped, and nothing a server needs
                elif drop_reason(d, DROPPED_WORTH_REPORTING):
                    dirnames.remove(d)
                    for sub, _, files in os.walk(Path(dirpath) / d):
                        yield from ((str(Path(sub, f).relative_to(root)), drop_reason(d)) for f in files)
            for f in filenames:
                if drop_reason(f) and not drop_reason(f, DROPPED_WORTH_REPORTING):
                    continue
                yield str(here / f), drop_reason(f, DROPPED_WORTH_REPORTING)

    def check_dropped_and_overlaps(self) -> None:
        owner: dict[str, str] = {}
        overlaps: list[str] = []
        for label, root, rel in self.entries:
            if root is None or not (root / rel).exists():
                continue
            dropped = []
            for path, pattern in self.staged_files(root, rel):
                if pattern:
                    dropped.append(f"{path} ({pattern})")
                elif path in owner and owner[path] != label:
                    overlaps.append(f"{path} ({owner[path]} and {label})")
                else:
                    owner[path] = label
            if dropped:
                self.warn(14, f"{label} {rel!r}: {len(dropped)} file(s) that tt-model's staging drops silently, so "
                              f"they will not be in the image: {', '.join(dropped[:5])}"
                              + (" ..." if len(dropped) > 5 else ""))
        if overlaps:
            self.warn(14, f"{len(overlaps)} file(s) are staged by two allowlist entries (the later one wins): "
                          + ", ".join(overlaps[:5]) + (" ..." if len(overlaps) > 5 else ""))

    def check_runtime(self, doc: dict) -> None:
        if "runtime" not in doc:
            self.error(15, f"runtime is required for kind {KIND} (runtime.app names the ASGI app)")
            return
        if (runtime := self.mapping(doc["runtime"], "runtime", 15)) is None:
            return
        for key in runtime:
            if key not in RUNTIME_KEYS:
                self.error(15, f"runtime key {key!r} is not valid for kind {KIND} "
                               f"(allowed: {', '.join(sorted(RUNTIME_KEYS))})")
        if "app" not in runtime:
            self.error(16, f'kind {KIND} requires runtime.app as "module.path:attribute"')
        elif (app := self.string(runtime["app"], "runtime.app", 16)) is not None:
            self.check_app(app)
        mesh_var = runtime.get("mesh_shape_env")
        if mesh_var is None:
            self.error(17, f"runtime.mesh_shape_env is not set: tt-model would export {DEFAULT_MESH_SHAPE_ENV}; "
                           "name the variable the server reads")
        elif not isinstance(mesh_var, str) or not ENV_KEY_RE.fullmatch(mesh_var):
            self.error(17, f"runtime.mesh_shape_env must be a variable name ([A-Za-z_][A-Za-z0-9_]*), "
                           f"got {shown(mesh_var)}")
        else:
            self.check_mesh_var_is_read(mesh_var, runtime.get("app"))
        if "packages" in runtime:
            self.check_packages(runtime["packages"])
        if "lock" in runtime and (lock := self.string(runtime["lock"], "runtime.lock", 19)) is not None:
            if not (self.base / lock).is_file():
                self.error(19, f"runtime.lock names {lock!r}, which does not exist next to the manifest "
                               f"({self.base / lock})")
            if runtime.get("packages"):
                self.warn(19, "runtime.lock is set, so tt-model ignores runtime.packages")

    def app_module_file(self, module: str) -> tuple[Path | None, bool]:
        """The staged file of `module` (the last entry that ships it wins), and whether any entry was not on disk."""
        rels = [module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"]
        found, unknown = None, False
        for _, root, entry in self.entries:
            for rel in rels:
                if rel == entry or rel.startswith(entry.rstrip("/") + "/"):
                    if root is None:
                        unknown = True
                    elif (root / rel).is_file():
                        found = root / rel
        return found, unknown

    def check_app(self, app: str) -> None:
        if ":" not in app or not app.strip():
            self.error(16, f'kind {KIND} requires runtime.app as "module.path:attribute", got {app!r}')
            return
        if not APP_RE.fullmatch(app):
            self.error(16, f'runtime.app {app!r} must look like "package.module:attribute"')
            return
        module, attr = app.split(":")
        top = module.split(".")[0]
        shipped = {Path(rel).parts[0] for _, _, rel in self.entries if Path(rel).parts}
        if top not in shipped:
            self.error(16, f"runtime.app {app!r} lives under {top!r}, which no allowlist entry ships "
                           f"(source.code / extra_code top-level paths: {', '.join(sorted(shipped)) or 'none'})")
            return
        path, unknown = self.app_module_file(module)
        if path is None:
            if unknown:
                self.notes.append(f"runtime.app module {module} may come from a git root: not checked")
            else:
                self.error(16, f"runtime.app module {module!r} is not in the staged tree: neither "
                               f"{module.replace('.', '/')}.py nor .../__init__.py is under an allowlisted path")
            return
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (SyntaxError, UnicodeDecodeError) as exc:
            self.error(16, f"runtime.app module {path} does not parse: {exc}")
            return
        if not module_binds(tree, attr):
            self.error(16, f"runtime.app module {path} binds no top-level {attr!r}")

    def check_mesh_var_is_read(self, name: str, app) -> None:
        if not isinstance(app, str) or not app.split(".")[0]:
            return
        top = app.split(":")[0].split(".")[0]
        roots = [root / top for _, root, rel in self.entries if root is not None and Path(rel).parts[:1] == (top,)]
        files = [f for r in roots if r.is_dir() for f in r.rglob("*.py")] + [r.with_suffix(".py") for r in roots
                                                                            if r.with_suffix(".py").is_file()]
        if files and not any(name in f.read_text(errors="replace") for f in files):
            self.warn(17, f"runtime.mesh_shape_env {name!r} appears nowhere in the {top!r} package: "
                          "the server will not see the mesh shape")

    def stage(self, staging: Path) -> None:
        """Copy the allowlist into one tree, in tt-model's order, later entries overwriting (build.py stage_code)."""
        for label, root, rel in self.entries:
            src, dst = (root / rel, staging / rel) if root is not None else (None, None)
            if src is None or not src.exists():
                self.notes.append(f"{label} {rel!r} not staged: its root is a git reference or not on this machine")
            elif src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*CODE_IGNORE), dirs_exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)

    def child_env(self, staging: Path, home: Path, tmp: Path) -> dict:
        runtime = self.doc.get("runtime") if isinstance(self.doc.get("runtime"), dict) else {}
        drop = {"PYTHONPATH", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONUSERBASE", "XDG_CACHE_HOME",
                *TT_MODEL_OWNED_ENV, str(runtime.get("mesh_shape_env") or DEFAULT_MESH_SHAPE_ENV)}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_")) and k not in drop}
        # Image build: HOME=/home/tt, HF_HOME=/hf with nothing mounted, bytecode already compiled.
        env.update(PYTHONPATH=str(staging), HOME=str(home), HF_HOME=str(tmp / "hf"), PYTHONDONTWRITEBYTECODE="1")
        return env

    def run_verify(self, verbose: bool) -> tuple[int, int]:
        lines = self.doc.get("verify") or []
        if not isinstance(lines, list):
            return 0, 0
        passed = failed = 0
        with tempfile.TemporaryDirectory(prefix="verify_manifest-") as tmp_name:
            tmp = Path(tmp_name)
            staging, home = tmp / IMAGE_ROOT.lstrip("/"), tmp / "home" / "tt"
            staging.mkdir(parents=True)
            (home / "work").mkdir(parents=True)
            self.stage(staging)
            env = self.child_env(staging, home, tmp)
            # The venv may put this checkout on sys.path through a .pth file; the image has no such path, so the
            # child drops every entry inside a local root before the entry runs (namespace packages like models/
            # would otherwise merge the checkout back in).
            # The interpreter's own prefixes stay, even when a root contains them (a root of "." above .venv).
            roots = sorted({os.path.realpath(r) for _, r, _ in self.entries if r is not None})
            keep = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
            prelude = ("import sys as _s, os.path as _p; _u = lambda e, ds: any(e == d or e.startswith(d + _p.sep) "
                       f"for d in ds); _s.path[:] = [e for e in _s.path if not _u(_p.realpath(e or '.'), {roots!r}) "
                       f"or _u(_p.realpath(e or '.'), {keep!r})]; del _s, _p, _u\n")
            if verbose:
                print(f"  staging: {staging} (PYTHONPATH, stands for {IMAGE_ROOT}); HOME={home}")
            for i, line in enumerate(lines):
                if not isinstance(line, str):
                    continue
                source = line.replace(IMAGE_ROOT, str(staging))
                try:
                    proc = subprocess.run([sys.executable, "-c", prelude + source], check=False, env=env,
                                          cwd=home / "work", capture_output=True, text=True,
                                          timeout=VERIFY_TIMEOUT_S)
                    ok, why, stderr = proc.returncode == 0, failure_line(proc.stderr, proc.returncode), proc.stderr
                except subprocess.TimeoutExpired:
                    ok, why, stderr = False, f"timed out after {VERIFY_TIMEOUT_S} s", ""
                short = line if len(line) <= 100 else line[:97] + "..."
                print(f"  {'PASS' if ok else 'FAIL'}  verify[{i}] {short}")
                if not ok:
                    print(f"        {why}")
                    if verbose and stderr.strip():
                        print("\n".join("        | " + s for s in stderr.rstrip().splitlines()))
                passed, failed = passed + ok, failed + (not ok)
        return passed, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="verify_manifest.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifests", nargs="+", type=Path, metavar="MANIFEST", help="tt-model.yaml file(s)")
    ap.add_argument("--static-only", action="store_true", help="skip the verify lines")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print notes and full stderr of failures")
    args = ap.parse_args(argv)
    for path in args.manifests:
        if not path.is_file():
            raise ToolError(f"manifest not found: {path}")
    try:
        import packaging.requirements  # noqa: F401
        import yaml  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ToolError(f"{exc.name} is not installed in {sys.executable} (it is in requirements.lock)") from None

    status = 0
    for path in args.manifests:
        m = Manifest(path)
        m.check()
        print(path)
        for line in m.errors:
            print(f"  error    {line}")
        for line in m.warnings:
            print(f"  warning  {line}")
        print(f"  static: {len(m.errors)} error(s), {len(m.warnings)} warning(s)")
        if m.card_sections is not None:
            print("  card: " + ", ".join(f"{k} {'present' if v else 'missing'}" for k, v in m.card_sections.items()))
        if args.static_only:
            print("  verify: not run (--static-only)")
        elif not m.doc or not isinstance(m.doc.get("verify", []), list):
            print("  verify: not run (no readable verify list)")
        else:
            passed, failed = m.run_verify(args.verbose)
            print(f"  verify: {passed} passed, {failed} failed")
            status |= failed > 0
        if args.verbose:
            for line in m.notes:
                print(f"  note     {line}")
        status |= bool(m.errors)
    return int(status)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ToolError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        sys.exit(130)

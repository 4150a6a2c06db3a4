# SPDX-License-Identifier: Apache-2.0
"""A TT-Metal runtime root that lets the ttnn 0.81.1 wheel open a *mock* Blackhole P150 with no card.

On a mock device ttnn validates every op, program config and L1/circular-buffer budget for the real
grid and fills its program cache, but nothing executes: outputs are zeros, and trace capture crashes.
That is enough to prove that a TT module's shapes, layouts and memory plans fit a p150a.

What is built (symlinks into the installed wheel; the wheel is never modified):
- ``tt_metal/*``, ``ttnn`` and ``runtime/hw`` linked from the wheel (op kernel sources, linker scripts);
- ``runtime/sfpi/compiler/bin/riscv-tt-elf-g++``: a stand-in for the SFPI compiler, which no package
  registry provides. It answers ``--version``, writes empty objects, copies the wheel's pre-compiled
  firmware for firmware links, and links a three-instruction placeholder for kernel links with Debian's
  ``riscv64-unknown-elf-ld`` (tt-metal's loader needs a relocatable ELF);
- ``blackhole_P150.yaml``: a one-chip UMD cluster descriptor (the board id must carry the P150 prefix).

Needs ``binutils-riscv64-unknown-elf`` (Debian). The recipe rests on tt-metal's mock-cluster support
(``TT_METAL_MOCK_CLUSTER_DESC_PATH``, ``TT_METAL_RUNTIME_ROOT``); each piece above fixes an error ttnn raises
without it.
Use ``mock_env(root)`` before the first ``import ttnn`` of the process.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

CLUSTER_DESC = """\
# Mock UMD cluster descriptor: one Blackhole P150 on PCIe, no Ethernet links.
arch: {0: blackhole}
chips: {}
chips_with_mmio: [{0: 0}]
ethernet_connections: []
harvesting:
  0: {noc_translation: true, harvest_mask: 0, dram_harvesting_mask: 0, eth_harvesting_mask: 0x120, \
pcie_harvesting_mask: 2, l2cpu_harvesting_mask: 0}
boards:
  - [{board_id: 0x41200000001}, {board_type: p150}, {chips: [0]}]
"""

PLACEHOLDER_ASM = """\
  .section .start,"ax"
  .globl _start
_start:
  lui a0, %hi(_start)
  addi a0, a0, %lo(_start)
  ret
"""

# The compiler stand-in. @BH@ / @WH@ are the wheel's Blackhole / Wormhole pre-compiled firmware folders.
STUB_COMPILER = r"""#!/bin/bash
# NOT A COMPILER: stand-in for riscv-tt-elf-g++ so that a *mock* device can open (outputs are never run).
[ -n "${STUB_GXX_LOG:-}" ] && echo "stub-g++ $*" >> "$STUB_GXX_LOG"
if [ "${1:-}" = "--version" ]; then echo "riscv-tt-elf-g++ (mock stand-in) 15.1.0"; exit 0; fi
out=""; depfile=""; script=""; symbols=""; prev=""; firmware="@BH@"
for arg in "$@"; do
  case "$prev" in -o) out="$arg" ;; -MF) depfile="$arg" ;; esac
  case "$arg" in
    -T*) script="${arg#-T}" ;;
    -Wl,--just-symbols=*) symbols="${arg#-Wl,--just-symbols=}" ;;
    -mcpu=tt-wh*) firmware="@WH@" ;;
  esac
  prev="$arg"
done
[ -n "$depfile" ] && echo "${out}:" > "$depfile"
case "$out" in
  *.gch) exit 1 ;;  # precompiled headers: tt-metal only warns when they fail
  */firmware/*.elf) core=$(basename "$(dirname "$out")"); cp "$firmware/$core/$core.elf" "$out" ;;
  *.elf)
    ldargs=(-m elf32lriscv -z max-page-size=16 -z common-page-size=16 --emit-relocs)
    [ -n "$symbols" ] && ldargs+=(--just-symbols="$symbols")
    [ -n "$script" ] && ldargs+=(-T "$script")
    exec riscv64-unknown-elf-ld "${ldargs[@]}" "$(dirname "$0")/placeholder.o" -o "$out" ;;
  *) : > "$out" ;;
esac
"""


class MockRuntimeError(RuntimeError):
    """The mock runtime cannot be built here; the message says what is missing."""


def wheel_dir() -> Path:
    spec = importlib.util.find_spec("ttnn")  # locate without importing: the environment must be set first
    if spec is None or not spec.submodule_search_locations:
        raise MockRuntimeError("ttnn is not installed (pip install ttnn==0.81.1)")
    return Path(list(spec.submodule_search_locations)[0])


def build_mock_runtime(root: str | Path) -> Path:
    """Create (or refresh) the mock runtime root at ``root`` and return it."""
    for tool in ("riscv64-unknown-elf-as", "riscv64-unknown-elf-ld"):
        if shutil.which(tool) is None:
            raise MockRuntimeError(f"{tool} not found: apt-get install -y binutils-riscv64-unknown-elf")
    wheel, root = wheel_dir(), Path(root)
    if root.exists():
        shutil.rmtree(root)
    (root / "tt_metal").mkdir(parents=True)
    bindir = root / "runtime" / "sfpi" / "compiler" / "bin"
    bindir.mkdir(parents=True)
    (root / "runtime" / "sfpi" / "include").mkdir(parents=True)
    for item in (wheel / "tt_metal").iterdir():
        (root / "tt_metal" / item.name).symlink_to(item)
    (root / "ttnn").symlink_to(wheel / "ttnn")
    (root / "runtime" / "hw").symlink_to(wheel / "runtime" / "hw")
    precompiled = sorted((wheel / "tt_metal" / "pre-compiled").iterdir())
    blackhole = next((d for d in precompiled if (d / "drisc").is_dir()), None)  # only Blackhole firmware has drisc/
    wormhole = next((d for d in precompiled if not (d / "drisc").is_dir()), None)
    if blackhole is None or wormhole is None:
        raise MockRuntimeError(f"{wheel}: pre-compiled Blackhole/Wormhole firmware not found")
    stub = bindir / "riscv-tt-elf-g++"
    stub.write_text(STUB_COMPILER.replace("@BH@", str(blackhole)).replace("@WH@", str(wormhole)))
    stub.chmod(0o755)
    (root / "placeholder.S").write_text(PLACEHOLDER_ASM)
    subprocess.run(["riscv64-unknown-elf-as", "-march=rv32i", "-mabi=ilp32", "-o", str(bindir / "placeholder.o"),
                    str(root / "placeholder.S")], check=True)
    (root / "blackhole_P150.yaml").write_text(CLUSTER_DESC)
    return root


def cluster_description_env(directory: str | Path) -> dict[str, str]:
    """Just the mock cluster description: enough for host-side tilising and bfloat8_b conversion (no
    device, no RISC-V tools needed). Use before the first ``import ttnn``."""
    path = Path(directory) / "blackhole_P150.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CLUSTER_DESC)
    return {"TT_METAL_MOCK_CLUSTER_DESC_PATH": str(path)}


def mock_env(root: str | Path) -> dict[str, str]:
    """Environment that points ttnn at the mock runtime (note: TT_METAL_CACHE must end in '/')."""
    root = Path(root)
    return {"TT_METAL_RUNTIME_ROOT": f"{root}/", "TT_METAL_MOCK_CLUSTER_DESC_PATH": str(root / "blackhole_P150.yaml"),
            "TT_METAL_CACHE": f"{root}/cache/"}

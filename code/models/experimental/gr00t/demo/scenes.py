# SPDX-License-Identifier: Apache-2.0
"""The made-up demo scenes (not NVIDIA data: not reachable offline), named by each version's ``DemoScene``
(``common/versions.py``): robot state as the request sends it, and frames drawn with PIL.

- N1.5 GR1: one 256×256 ``ego_view`` of a counter with a pear and a plate;
- N1.7 DROID: exterior and wrist views at t−15 and t, 320×180, of a table with a blue block and a green bowl;
- N1.6 GR1: N1.5's ego view (under the N1.6 camera name) and GR1 state with the waist;
- N1.6 Unitree G1: one 320×240 (4:3) ego view of a table with an apple and a plate, legs/waist/arms/hands state;
- N1.6 WidowX (bridge): one 256×256 top-down view of a spoon and a towel, the 8 one-wide state keys.
"""

from __future__ import annotations

from PIL import Image, ImageDraw

GR1_STATE = {  # made-up, in the range of GR1 arm/hand joints
    "left_arm": [[0.01, 0.21, 0.05, -1.81, -0.13, -0.05, 0.01]],
    "right_arm": [[-0.02, -0.17, 0.37, -1.74, 0.50, -0.06, 0.98]],
    "left_hand": [[0.01, 0.02, 0.00, 0.01, 0.02, 0.04]],
    "right_hand": [[-1.49, -1.49, -1.48, -1.48, -2.96, 2.99]],
}
# made-up DROID Franka state: gripper pointing down (rotation rows from a real-looking pose), open gripper;
# flat lists, as the published N1.7 package's request has them (the server also takes [[...]])
DROID_STATE = {
    "eef_9d": [0.53, 0.02, 0.46, -0.0786, 0.3927, -0.9163, 0.9923, 0.1193, -0.034],
    "gripper_position": [0.0],
    "joint_position": [-0.005, 0.034, 0.001, -1.917, 0.164, 1.610, 0.084],
}
DROID_TIMES = ("tm15", "t0")
GR1_N16_STATE = {**GR1_STATE, "waist": [[0.0, 0.02, -0.01]]}  # N1.6 GR1 adds the waist (yaw, pitch, roll)
G1_STATE = {  # made-up Unitree G1 standing pose (rad): legs slightly bent, arms down, hands open
    "left_leg": [[-0.10, 0.0, 0.0, 0.30, -0.20, 0.0]],
    "right_leg": [[-0.10, 0.0, 0.0, 0.30, -0.20, 0.0]],
    "waist": [[0.0, 0.0, 0.0]],
    "left_arm": [[0.20, 0.25, 0.0, 0.90, 0.0, 0.0, 0.0]],
    "right_arm": [[0.20, -0.25, 0.0, 0.90, 0.0, 0.0, 0.0]],
    "left_hand": [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
    "right_hand": [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
}
# made-up WidowX 250 end-effector pose (m, rad), the bridge data's zero pad and an open gripper (1 = open)
WIDOWX_STATE = {"x": [0.31], "y": [0.02], "z": [0.12], "roll": [0.0], "pitch": [-0.05], "yaw": [0.01],
                "pad": [0.0], "gripper": [1.0]}  # the frames of each camera: t−15, t


def draw_scene() -> Image.Image:
    img = Image.new("RGB", (256, 256), (196, 206, 214))  # wall
    d = ImageDraw.Draw(img)
    d.rectangle([0, 150, 255, 255], fill=(142, 104, 70))  # counter
    d.rectangle([0, 146, 255, 152], fill=(110, 80, 52))  # counter edge
    d.ellipse([150, 175, 230, 215], fill=(236, 236, 232), outline=(180, 180, 176), width=2)  # plate
    d.ellipse([165, 183, 215, 207], fill=(246, 246, 242))
    d.ellipse([60, 168, 96, 206], fill=(176, 196, 60))  # pear body
    d.ellipse([68, 150, 88, 176], fill=(184, 202, 70))  # pear neck
    d.line([78, 150, 80, 140], fill=(90, 60, 30), width=3)  # stem
    d.polygon([(95, 0), (135, 0), (128, 70), (102, 70)], fill=(70, 74, 80))  # robot forearm
    d.rectangle([96, 70, 134, 92], fill=(52, 55, 60))  # wrist
    d.rectangle([98, 92, 106, 118], fill=(40, 42, 46))  # fingers
    d.rectangle([124, 92, 132, 118], fill=(40, 42, 46))
    return img


def draw_droid(view: str, t: str) -> Image.Image:
    """A 320×180 table scene: blue block, green bowl; the gripper is lower at t than at t−15."""
    img = Image.new("RGB", (320, 180), (180, 190, 200))
    d = ImageDraw.Draw(img)
    wrist = view.startswith("wrist")
    d.rectangle([0, 60 if wrist else 95, 319, 179], fill=(150, 120, 90))  # table
    s = 1.8 if wrist else 1.0  # the wrist camera sees the scene closer
    cx = 160
    d.ellipse([cx + 20 * s, 120 - 15 * s, cx + 80 * s, 120 + 10 * s], fill=(40, 150, 60))  # green bowl
    d.ellipse([cx + 30 * s, 120 - 10 * s, cx + 70 * s, 120 + 4 * s], fill=(30, 110, 45))
    d.rectangle([cx - 70 * s, 112 - 10 * s, cx - 45 * s, 112 + 8 * s], fill=(40, 70, 200))  # blue block
    drop = 0 if t == "tm15" else 18
    if not wrist:
        d.rectangle([cx - 68, 0, cx - 48, 40 + drop], fill=(235, 235, 235))  # arm
        d.rectangle([cx - 74, 40 + drop, cx - 42, 52 + drop], fill=(60, 60, 65))  # gripper
    else:
        d.polygon([(0, 179), (50, 120 + drop // 2), (70, 179)], fill=(60, 60, 65))  # fingers in view
        d.polygon([(319, 179), (270, 120 + drop // 2), (250, 179)], fill=(60, 60, 65))
    return img


def gr1_frames(layout) -> dict[str, list[tuple[str, Image.Image]]]:
    """{camera: [(file stem, frame)]}: the one GR1 camera's frame at t."""
    return {cam: [(f"{cam}_t0", draw_scene())] for cam in layout.cameras}


def droid_frames(layout) -> dict[str, list[tuple[str, Image.Image]]]:
    """{camera: [(file stem, frame), ...]}: each DROID camera at t−15 and t."""
    return {cam: [(f"{cam}_{t}", draw_droid(cam, t)) for t in DROID_TIMES] for cam in layout.cameras}


def draw_g1() -> Image.Image:
    """A 320×240 G1 ego view: a table with a red apple and a white plate, two hands at the bottom edge."""
    img = Image.new("RGB", (320, 240), (200, 198, 190))
    d = ImageDraw.Draw(img)
    d.rectangle([0, 110, 319, 239], fill=(120, 96, 72))  # table
    d.ellipse([190, 140, 270, 175], fill=(238, 238, 234), outline=(190, 190, 186), width=2)  # plate
    d.ellipse([80, 135, 115, 170], fill=(200, 40, 40))  # apple
    d.line([97, 135, 99, 126], fill=(80, 55, 30), width=3)
    d.polygon([(30, 239), (70, 190), (110, 239)], fill=(70, 72, 78))  # left hand
    d.polygon([(290, 239), (250, 190), (210, 239)], fill=(70, 72, 78))  # right hand
    return img


def draw_widowx() -> Image.Image:
    """A 256×256 top-down bridge view: a blue towel, a metal spoon, the gripper above."""
    img = Image.new("RGB", (256, 256), (176, 150, 118))  # wooden sink counter
    d = ImageDraw.Draw(img)
    d.rectangle([140, 130, 220, 200], fill=(60, 90, 170))  # towel
    d.ellipse([50, 90, 80, 110], fill=(190, 190, 196))  # spoon bowl
    d.line([78, 100, 120, 112], fill=(170, 170, 178), width=5)  # spoon handle
    d.rectangle([110, 20, 130, 60], fill=(40, 40, 44))  # gripper
    d.rectangle([104, 60, 112, 80], fill=(30, 30, 34))
    d.rectangle([128, 60, 136, 80], fill=(30, 30, 34))
    return img


def g1_frames(layout) -> dict[str, list[tuple[str, Image.Image]]]:
    return {cam: [(f"{cam}_t0", draw_g1())] for cam in layout.cameras}


def widowx_frames(layout) -> dict[str, list[tuple[str, Image.Image]]]:
    return {cam: [(f"{cam}_t0", draw_widowx())] for cam in layout.cameras}

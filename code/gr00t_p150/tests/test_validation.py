# SPDX-License-Identifier: Apache-2.0
"""Every malformed request is refused with 400 naming the field (413 for oversize bodies), before any
model work, and never changes a later answer."""

from __future__ import annotations

import base64
import copy
import io
import json
import time
import zlib
from threading import current_thread

import numpy as np
import pytest
from PIL import Image

from .conftest import assert_matches_golden, png


def gif(h: int, w: int) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(buf, format="GIF")
    return base64.b64encode(buf.getvalue()).decode()


CASES = {
    "unknown_camera": (lambda r: r["images"].update(wrist=r["images"]["ego_view"]), "images.wrist"),
    "missing_camera": (lambda r: r.update(images={}), "images.ego_view"),
    "two_frames": (lambda r: r["images"].update(ego_view=[r["images"]["ego_view"]] * 2), "images.ego_view"),
    "not_base64": (lambda r: r["images"].update(ego_view="%%%not-base64%%%"), "images.ego_view"),
    "not_an_image": (lambda r: r["images"].update(ego_view=base64.b64encode(b"GIF89 nope").decode()),
                     "images.ego_view"),
    "gif_not_accepted": (lambda r: r["images"].update(ego_view=gif(64, 64)), "images.ego_view"),
    "too_small": (lambda r: r["images"].update(ego_view=png(63, 256)), "images.ego_view"),
    "too_large": (lambda r: r["images"].update(ego_view=png(64, 4097)), "images.ego_view"),
    "missing_group": (lambda r: r["state"].pop("right_hand"), "state.right_hand"),
    "extra_group": (lambda r: r["state"].update(waist=[[0.0, 0.0, 0.0]]), "state.waist"),
    "wrong_length": (lambda r: r["state"].update(left_arm=[[0.0] * 8]), "state.left_arm"),
    "string_in_state": (lambda r: r["state"].update(left_arm=[["0.1"] * 7]), "state.left_arm"),
    "long_instruction": (lambda r: r.update(instruction="a" + " a" * 101), "instruction"),
    "empty_instruction": (lambda r: r.update(instruction="  "), "instruction"),
    "noise_shape": (lambda r: r.update(noise=[[0.0] * 32] * 15), "noise"),
    "noise_overflows_float32": (lambda r: r["noise"][0].__setitem__(0, 1e39), "noise"),
    "state_overflows_float32": (lambda r: r["state"]["left_arm"][0].__setitem__(0, 1e39), "state.left_arm"),
    "noise_and_seed": (lambda r: r.update(seed=3), "noise"),
    "negative_seed": (lambda r: (r.pop("noise"), r.update(seed=-1)), "seed"),
    "unknown_embodiment": (lambda r: r.update(embodiment="unitree_g1"), "embodiment"),
    "unknown_field": (lambda r: r.update(temperature=0.5), "temperature"),
    "bad_state_dtype": (lambda r: r.update(state_dtype="float16"), "state_dtype"),
    "instruction_not_text": (lambda r: r.update(instruction=5), "instruction"),
}


DROID_CASES = {
    "one_frame": (lambda r: r["images"].update(wrist_image_left=r["images"]["wrist_image_left"][:1]),
                  "images.wrist_image_left"),
    "three_frames": (lambda r: r["images"]["exterior_image_1_left"].append(r["images"]["exterior_image_1_left"][0]),
                     "images.exterior_image_1_left"),
    "square_frame": (lambda r: r["images"]["wrist_image_left"].__setitem__(1, png(180, 180)),
                     "images.wrist_image_left[1]"),
    "portrait_frame": (lambda r: r["images"]["exterior_image_1_left"].__setitem__(0, png(320, 180)),
                       "images.exterior_image_1_left[0]"),
    "missing_camera": (lambda r: r["images"].pop("wrist_image_left"), "images.wrist_image_left"),
    "gr1_camera": (lambda r: r["images"].update(ego_view=png(180, 320)), "images.ego_view"),
    "long_instruction": (lambda r: r.update(instruction=" ".join(["block"] * 52)), "instruction"),
    "punctuation_only": (lambda r: r.update(instruction="?!"), "instruction"),
    "n15_noise_shape": (lambda r: r.update(noise=[[0.0] * 32] * 16), "noise"),
    "wrong_state_length": (lambda r: r["state"].update(eef_9d=[[0.0] * 7]), "state.eef_9d"),
    "degenerate_rotation": (lambda r: r["state"].update(eef_9d=[[0.5, 0.0, 0.4] + [0.0] * 6]), "state.eef_9d"),
    "gr1_embodiment": (lambda r: r.update(embodiment="gr1"), "embodiment"),
}
N16_CAM = "ego_view_bg_crop_pad_res256_freq20"  # N1.6 GR1's one camera (its modality config's video key)
N16_CASES = {
    "n15_camera": (lambda r: r["images"].update(ego_view=r["images"].pop(N16_CAM)), "images.ego_view"),
    "missing_camera": (lambda r: r.update(images={}), f"images.{N16_CAM}"),
    "two_frames": (lambda r: r["images"].update({N16_CAM: [r["images"][N16_CAM]] * 2}), f"images.{N16_CAM}"),
    "missing_waist": (lambda r: r["state"].pop("waist"), "state.waist"),
    "waist_too_short": (lambda r: r["state"].update(waist=[[0.0, 0.0]]), "state.waist"),
    "n15_noise_shape": (lambda r: r.update(noise=[[0.0] * 32] * 16), "noise"),
    "horizon_only_noise": (lambda r: r.update(noise=r["noise"][:16]), "noise"),  # the envelope is 50 × 128
    "long_instruction": (lambda r: r.update(instruction=" ".join(["pear"] * 103)), "instruction"),
    "punctuation_only": (lambda r: r.update(instruction="?!"), "instruction"),
    "g1_embodiment": (lambda r: r.update(embodiment="unitree_g1"), "embodiment"),
}
# The registry's versions, each with its layout's cases and how exactly the field is named: "prefix" where the
# schema names an item inside the field (state.left_arm.0.0), "exact" where the layout's checks name it.
MALFORMED = {"n15": (CASES, "prefix"), "n16": (N16_CASES, "exact"), "n17": (DROID_CASES, "exact")}


@pytest.mark.parametrize(("version", "case"), [(v, c) for v, (cases, _) in MALFORMED.items() for c in cases],
                         ids=lambda x: x)
def test_malformed_request_is_a_400_naming_the_field(clients, version, case):
    client = clients(version)
    request_body = copy.deepcopy(client.get("/demo").json()["request"])
    cases, match = MALFORMED[version]
    mutate, field = cases[case]
    mutate(request_body)
    r = client.post("/predict", json=request_body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["field"] == field if match == "exact" else err["field"].startswith(field), err
    assert err["rule"] and field in err["message"]
    assert "[" not in err["field"] or err["field"].endswith("]"), err  # no pydantic union tags in paths


def test_every_version_has_its_malformed_cases():
    from models.experimental.gr00t.common.versions import VERSIONS

    assert set(MALFORMED) == set(VERSIONS) and all(cases for cases, _ in MALFORMED.values())


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(client, request_body, token):
    for where in ("state", "noise"):
        text = json.dumps(request_body)
        if where == "state":
            text = text.replace(json.dumps(request_body["state"]["left_arm"][0][0]), token, 1)
        else:
            text = text.replace(json.dumps(request_body["noise"][0][0]), token, 1)
        r = client.post("/predict", content=text, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"].startswith(where), r.json()


def test_invalid_json_is_a_400(client):
    r = client.post("/predict", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "body"


def test_oversize_body_is_refused_with_413(client, server_config, request_body):
    filler = "x" * (server_config.max_body_bytes + 1)
    r = client.post("/predict", json={**request_body, "instruction": filler})
    assert r.status_code == 413 and "GR00T_MAX_BODY_BYTES" in r.json()["error"]["message"]


def test_streamed_oversize_body_is_refused_with_413(client, server_config):
    def chunks():
        yield b'{"instruction": "'
        for _ in range(server_config.max_body_bytes // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    r = client.post("/predict", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


@pytest.mark.golden
def test_bad_requests_do_not_change_later_answers(client, demo, request_body, reference_answer):
    for case in CASES.values():
        body = copy.deepcopy(demo["request"])
        case[0](body)
        client.post("/predict", json=body)
    actions = client.post("/predict", json=request_body).json()["actions"]
    assert actions == reference_answer["actions"]
    assert_matches_golden(actions, demo["expected"]["actions"])


def test_non_finite_actions_from_the_model_are_a_500_and_the_server_goes_on(client, request_body, monkeypatch):
    backend = client.app.state.engine.backend
    honest = backend.run  # the device half of a request

    def poisoned(*args, **kwargs):
        result = honest(*args, **kwargs)
        result.actions[next(iter(result.actions))][0, 0] = np.nan
        return result

    monkeypatch.setattr(backend, "run", poisoned)
    r = client.post("/predict", json=request_body)
    assert r.status_code == 500 and "non-finite actions" in r.json()["error"]["message"]
    monkeypatch.undo()
    assert client.post("/predict", json=request_body).status_code == 200


@pytest.mark.parametrize("body", [b'{"images": {}, "state": {"\\udfff": [1]}, "instruction": "a"}',  # JSON escape
                                  b'{"images": {}, "state": {"\xed\xbf\xbf": [1]}, "instruction": "a"}',  # raw bytes
                                  b'{"images": {}, "state": {"a\\u0007b": [1]}, "instruction": "a"}'],
                         ids=["escaped_surrogate", "raw_surrogate_bytes", "control_character"])
def test_keys_no_encoder_can_write_are_echoed_escaped_in_a_400(client, body):
    r = client.post("/predict", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text  # was a 500 (UnicodeEncodeError) for lone surrogates
    field = r.json()["error"]["field"]
    assert field.startswith("state.") and "\\u" in field and field.isprintable()


def test_an_instruction_bomb_is_refused_before_tokenising_in_well_under_a_second(client, request_body):
    # 1.5 MiB (under this server's 2 MiB body limit): a 4 MiB one took 12 s to tokenise, on the device thread
    request_body["instruction"] = "pick " * (3 * 2**19 // 5)
    t = time.perf_counter()
    r = client.post("/predict", json=request_body)
    assert r.status_code == 400 and r.json()["error"]["field"] == "instruction"
    assert "refused before tokenising" in r.json()["error"]["rule"] and time.perf_counter() - t < 1.0


def test_a_png_whose_image_data_is_short_is_refused_not_zero_filled(client, request_body):
    request_body["images"]["ego_view"] = base64.b64encode(png_with_rows(256, 256, rows=1)).decode()
    r = client.post("/predict", json=request_body)
    assert r.status_code == 400 and "truncated PNG" in r.json()["error"]["rule"], r.text


def png_with_rows(w: int, h: int, rows: int) -> bytes:
    """An RGB PNG whose header says ``w``×``h`` but whose (complete) zlib stream holds ``rows`` rows."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    raw = b"".join(b"\x00" + bytes(3 * w) for _ in range(rows))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0]))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.mark.parametrize(("sent", "echoed"), [("robot-7.req:42", True), ("x" * 4096, False), ("a b\tc", False)])
def test_only_a_plain_short_request_id_is_echoed(client, request_body, sent, echoed):
    r = client.post("/predict", json=request_body, headers={"X-Request-ID": sent})
    got = r.headers["x-request-id"]
    assert (got == sent) is echoed and len(got) <= 128


def test_requests_are_encoded_off_the_device_thread_and_run_on_it(client, request_body, monkeypatch):
    """A body over SMALL_REQUEST_BYTES (a small one on an idle device: test_production's idle-device test)."""
    from gr00t_p150.server import service as service_module

    monkeypatch.setattr(service_module, "SMALL_REQUEST_BYTES", 100)
    backend = client.app.state.engine.backend
    threads = {}
    prepare, run = backend.prepare, backend.run
    monkeypatch.setattr(backend, "prepare", lambda *a, **k: (threads.update(prepare=current_thread().name),
                                                             prepare(*a, **k))[1])
    monkeypatch.setattr(backend, "run", lambda p: (threads.update(run=current_thread().name), run(p))[1])
    assert client.post("/predict", json=request_body).status_code == 200
    assert threads["run"].startswith("gr00t-device") and not threads["prepare"].startswith("gr00t-device")

# SPDX-License-Identifier: Apache-2.0
"""The two-command-queue protocol of ``tt/runner.py`` against a fake ttnn, because the mock P150 cannot run it
(its ``wait_for_event`` crashes, and trace capture too).

The fake records what the runner enqueues on each queue (uploads, trace replays, event records and waits) and
then executes the two queues in an interleaving chosen by a scheduler: in order within each queue, a wait
blocking its queue until the event it names has been recorded, and otherwise free. Every replay of a stage
checks that each input it reads holds *this* request's value: a missing rule-1 wait lets the next request's
upload overwrite an input before the last reader of the previous request ran; a missing rule-2 wait lets a
stage read an input before its upload landed. Both are found by the adversarial schedulers; with both rules,
no schedule (the two extremes and 300 random ones, over three back-to-back requests) finds a hazard.

The fake's readback does not wait for the device, so the requests' commands pile up on the queues without the
host-side synchronisation the server really has: a stricter setting than serving."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch

from models.experimental.gr00t.tt.runner import STAGES, TTRunner

STAGE_INPUTS = {"vision": ("patches",), "llm": ("input_ids",), "adapter": ("vl_mask", "state"),
                "denoise": ("text_keys", "noise")}  # as TtGr00tN17 declares them (a mock test checks that)


@dataclass(eq=False)
class Event:
    recorded: bool = False


@dataclass
class FakeTtnn:
    """The part of ttnn the two-queue runner calls; ``drop_waits_on`` removes one queue's waits (controls)."""

    drop_waits_on: int | None = None
    queues: dict[int, list] = field(default_factory=lambda: {0: [], 1: []})

    def wait_for_event(self, cq_id, event):
        if cq_id != self.drop_waits_on:
            self.queues[cq_id].append(("wait", event))

    def record_event(self, device, cq_id, *_, **__):
        event = Event()
        self.queues[cq_id].append(("record", event))
        return event

    def copy_host_to_device_tensor(self, host, device_tensor, cq_id=0):
        self.queues[cq_id].append(("write", device_tensor, host))

    def execute_trace(self, device, trace_id, cq_id=0, blocking=True):
        assert not blocking
        self.queues[cq_id].append(("trace", trace_id))

    def synchronize_device(self, device):
        raise AssertionError("the timed path is not under test here")


class FakeModel:
    STAGE_INPUTS = STAGE_INPUTS
    device = "fake-p150a"

    def __init__(self):
        self.inputs = {name: name for names in STAGE_INPUTS.values() for name in names}

    def read_actions(self):
        return torch.zeros(1, 40, 132)  # no device sync: the next request's commands follow at once


def enqueue(fake: FakeTtnn, requests: int, monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "ttnn", fake)
    runner = TTRunner(FakeModel(), traced=True, num_cqs=2)
    runner.traces = {stage: stage for stage in STAGES}
    for r in range(requests):
        runner.run({name: r for name in FakeModel().inputs})


def execute(fake: FakeTtnn, pick) -> list[str]:
    """Run both queues to the end in the order ``pick`` chooses among the runnable ones; the hazards found."""
    pc, value, replays, hazards = {0: 0, 1: 0}, {}, {s: 0 for s in STAGES}, []
    while any(pc[q] < len(fake.queues[q]) for q in pc):
        runnable = [q for q in pc if pc[q] < len(fake.queues[q])
                    and not (fake.queues[q][pc[q]][0] == "wait" and not fake.queues[q][pc[q]][1].recorded)]
        assert runnable, "deadlock: both queues wait for events never recorded"
        q = pick(runnable)
        command = fake.queues[q][pc[q]]
        pc[q] += 1
        if command[0] == "record":
            command[1].recorded = True
        elif command[0] == "write":
            value[command[1]] = command[2]
        elif command[0] == "trace":
            stage, request = command[1], replays[command[1]]
            replays[stage] += 1
            hazards += [f"request {request} {stage} read {name} = {value.get(name)}"
                        for name in STAGE_INPUTS[stage] if value.get(name) != request]
    return hazards


SCHEDULERS = {"upload queue first": lambda qs: max(qs), "compute queue first": lambda qs: min(qs)}


def schedules():
    yield from SCHEDULERS.items()
    rng = random.Random(7)
    for i in range(300):
        yield f"random {i}", lambda qs: rng.choice(qs)


def test_the_two_queue_protocol_has_no_hazard_under_any_schedule(monkeypatch):
    fake = FakeTtnn()
    enqueue(fake, requests=3, monkeypatch=monkeypatch)
    assert sum(c[0] == "trace" for c in fake.queues[0]) == 3 * len(STAGES)
    assert all(c[0] != "trace" for c in fake.queues[1]) and all(c[0] != "write" for c in fake.queues[0])
    for name, pick in schedules():
        for q in fake.queues.values():  # a fresh run of the same commands
            for c in q:
                if c[0] == "record":
                    c[1].recorded = False
        assert execute(fake, pick) == [], name


@pytest.mark.parametrize("dropped, scheduler, hazard", [
    (1, "upload queue first", "request 0 denoise read noise = 2"),  # rule 1 missing: overwritten under a reader
    (0, "compute queue first", "request 0 vision read patches = None"),  # rule 2 missing: read before the upload
])
def test_each_rule_of_the_protocol_is_needed(monkeypatch, dropped, scheduler, hazard):
    fake = FakeTtnn(drop_waits_on=dropped)
    enqueue(fake, requests=3, monkeypatch=monkeypatch)
    assert hazard in execute(fake, SCHEDULERS[scheduler])

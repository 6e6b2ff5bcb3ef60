"""The producer's fast paths give what the slow ones gave: a definition's text byte for byte
(an upsert recognises an equal definition by its text), job ids of the uuid4 form, the
same canonical argument JSON and the same refusals, and the store's clock of the store a
Client holds now."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import Client
from scheduler.errors import PayloadError
from scheduler.model import (
    After,
    At,
    Cron,
    Delivery,
    Every,
    JobSpec,
    Misfire,
    Overlap,
    RetryPolicy,
    TaskRef,
)
from scheduler.specs import make_spec, new_id
from scheduler.stores.memory import MemoryStore
from scheduler.stores.redis.protocol import definitions
from scheduler.testing import FakeClock
from scheduler.validation import json_args

NAMES = ["t", "billing.send_invoice", 'q"uote\\s', "naïve ✓", "tab\there"]
ARGS = ["{}", '{"a":1}', json_args({"due_ms": 123, "tag": "x"}), json_args({"é": ["ü", None]})]
NUMBERS = [0.0, 0.001, 0.1, 0.3, 1.0, 7200.0, 1e-7, 1e22, 123456789.123, 1764547200.25]


def specs() -> list[JobSpec]:
    out = []
    for name in NAMES:
        for args in ARGS:
            ref = TaskRef(name, args)
            for x in NUMBERS:
                out += [JobSpec("j", ref, After(x)), JobSpec("j", ref, At(x))]
            out += [
                JobSpec("j", ref, Every(60.0)),
                JobSpec("j", ref, Every(0.5, 1764547200.0)),
                JobSpec("j", ref, Cron("*/5 * * * *", "Europe/Paris")),
                JobSpec("j", ref, After(5.0), lane="fast"),
                JobSpec("j", ref, After(5.0), timeout=3.0),
                JobSpec("j", ref, After(5.0), retry=RetryPolicy(max_attempts=3)),
                JobSpec("j", ref, At(5.0), misfire=Misfire.RUN_ONCE),
                JobSpec("j", ref, At(5.0), overlap=Overlap.ALLOW),
                JobSpec("j", ref, At(5.0), delivery=Delivery.AT_MOST_ONCE),
                JobSpec("j", ref, At(5.0), misfire_grace=2.0, catch_up_window=9.0),
                JobSpec("j", ref, After(5)),  # an int delay (a spec built by hand)
                JobSpec("j", ref, At(float("nan"))),  # never valid input: still the same text
            ]
    return out


@pytest.mark.parametrize("spec", specs(), ids=lambda s: f"{type(s.schedule).__name__}")
def test_a_definition_is_the_same_text_by_the_fast_and_the_slow_path(spec):
    assert definitions.encode(spec) == definitions.encode_slow(spec)
    # by repr: At(nan) is not equal to itself (Python 3.13's dataclass __eq__ compares
    # field by field, without the tuple comparison's identity shortcut)
    fast, slow = (
        definitions.decode(definitions.encode(spec), "j"),
        definitions.decode(definitions.encode_slow(spec), "j"),
    )
    assert repr(fast) == repr(slow)


def test_the_slow_path_is_the_canonical_dump():
    spec = JobSpec("j", TaskRef("t", '{"a":1}'), After(7200.0))
    d = {"t": "t", "s": ["after", 7200.0], "a": '{"a":1}'}
    assert definitions.encode(spec) == json.dumps(d, sort_keys=True, separators=(",", ":"))


def test_new_ids_are_uuid4_hex():
    ids = {new_id() for _ in range(2000)}
    assert len(ids) == 2000
    for x in ids:
        u = uuid.UUID(hex=x)
        assert (u.hex, u.version, u.variant) == (x, 4, uuid.RFC_4122)


def test_a_spec_without_an_id_gets_a_fresh_one_and_equal_options_compare_equal():
    a = make_spec("t", After(1.0), check_task=False)
    b = make_spec("t", After(1.0), check_task=False, misfire="skip", overlap="skip")
    assert a.job_id != b.job_id
    assert a == JobSpec(a.job_id, TaskRef("t"), After(1.0))
    assert b.misfire is Misfire.SKIP and b.overlap is Overlap.SKIP
    assert hash(a) == hash(JobSpec(a.job_id, TaskRef("t"), After(1.0)))
    with pytest.raises(ValueError):
        make_spec("t", After(1.0), check_task=False, misfire="sometimes")
    with pytest.raises(ValueError, match="lane name"):
        make_spec("t", After(1.0), check_task=False, lane=" padded")


class Key(str):
    """A str subclass: not of the exact types the fast check trusts."""


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"due_ms": 1, "tag": "x", "ok": True, "none": None, "f": 0.1, "neg": -0.0},
        {"nested": {"b": [1, 2.5, "x"]}, "a": []},
        {Key("k"): 1},
        {"big": 10**30, "s": "naïve \ud800"},
    ],
)
def test_canonical_argument_json_is_unchanged(args):
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert json_args(args) == text


@pytest.mark.parametrize(
    "args, why",
    [
        ({"t": (1, 2)}, "round trip"),
        ({"d": {1: "x"}}, "round trip"),
        ({"f": float("nan")}, "JSON-serialisable"),
        ({"o": object()}, "JSON-serialisable"),
        ({"s": "x" * 70_000}, "over the"),
    ],
)
def test_arguments_that_would_not_round_trip_are_still_refused(args, why):
    with pytest.raises(PayloadError, match=why):
        json_args(args)


class Clockless:
    """A store without a clock (a ``Store`` need not have one): wall time is the local one."""


def test_the_client_reads_the_clock_of_the_store_it_holds_now():
    client = Client(MemoryStore(clock=FakeClock(start=1_000.0)))
    assert client._wall() == 1_000.0
    client.store = Clockless()  # type: ignore[assignment]  # swapped: nothing cached sticks
    assert abs(client._wall() - time.time()) < 60
    client.store = MemoryStore(clock=FakeClock(start=2_000.0))
    assert client._wall() == 2_000.0


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.text(), JSON_VALUES, max_size=5))
def test_canonical_json_is_json_dumps_with_the_canonical_settings(args):
    """The encoder built once (validation._encode) writes what json.dumps writes."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert json_args(args, limit=10**9) == text


def test_arguments_that_contain_themselves_are_refused_and_leave_no_trace():
    """The encoder built once keeps no circular-reference markers: a value that contains
    itself ends as one nested too deeply does, and the encodings after it are unharmed
    (markers left behind by a failed encoding would refuse sound values)."""
    loop: dict[str, object] = {}
    loop["self"] = loop
    listed: list[object] = []
    listed.append(listed)
    for bad in ({"x": loop}, {"x": listed}):
        with pytest.raises(PayloadError, match="contain themselves"):
            json_args(bad)
    shared = {"k": 1}
    assert json_args({"a": shared, "b": [shared, shared]}) == (
        '{"a":{"k":1},"b":[{"k":1},{"k":1}]}'
    )
    with pytest.raises(PayloadError, match="JSON-serialisable"):
        json_args({"x": [{"y": object()}]})
    assert json_args({"x": [{"y": 1}]}) == '{"x":[{"y":1}]}'

"""Failpoints (workers/failpoints.py): parsed strictly, fire on the hits asked for."""

from __future__ import annotations

import pytest

from workers import failpoints


def test_parse_and_fire_on_the_asked_hits(monkeypatch):
    monkeypatch.setattr(failpoints, "_points", failpoints.parse("renew=fail:2-3,after_claim=fail"))
    failpoints.hit("renew")  # hit 1: not yet
    for _ in range(2):  # hits 2 and 3 fire
        with pytest.raises(failpoints.FailpointError, match="renew"):
            failpoints.hit("renew")
    failpoints.hit("renew")  # hit 4: over
    with pytest.raises(failpoints.FailpointError):
        failpoints.hit("after_claim")  # every hit
    failpoints.hit("before_complete")  # not configured: nothing


@pytest.mark.parametrize(
    "text",
    ["renew", "renew=explode", "nowhere=fail", "renew=fail:x", "renew=fail:1-", "renew=fail:-2"],
)
def test_malformed_settings_are_refused(text):
    with pytest.raises(ValueError, match="DUETIME_FAILPOINTS"):
        failpoints.parse(text)


def test_unset_means_nothing_is_armed():
    assert failpoints.parse("") == {}
    assert failpoints._points == {}  # the test run itself has no failpoints set

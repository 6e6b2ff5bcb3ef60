"""A namespace of a newer data layout stops a running replica (docs/operating.md, *Replicas
with different code*): how a script's error reply is read, what hears of the refusal, and
how the stop it asks for meets the signals of an orchestrator. No Redis: the pieces alone
(tests/integration/test_server_checks.py runs them together, and `duetime run` too)."""

from __future__ import annotations

import signal

from scheduler.cli.replica import _StopRequests
from scheduler.errors import LayoutRefusedError, StoreCorruptError
from scheduler.signals import Signals
from scheduler.stores.redis.integrity.server_checks import refused

LAYOUT = "duetime layout 9 in this namespace, but this duetime reads layouts 1 to 4: run one"


def test_the_scripts_layout_line_is_a_layout_refusal():
    error = refused(Exception(LAYOUT), "redis://h")
    assert isinstance(error, LayoutRefusedError)
    assert str(error).startswith("layout 9 in this namespace")


def test_a_corrupt_key_whose_name_holds_the_words_is_no_layout_refusal():
    """A lane may be named "nightly duetime layout": its corrupt due set must stay a
    corruption (replicas back off until it is repaired), never a refusal that stops them."""
    text = "duetime corrupt duetime:{ns}:due:nightly duetime layout is a string, expected zset"
    error = refused(Exception(text), "redis://h")
    assert isinstance(error, StoreCorruptError) and not isinstance(error, LayoutRefusedError)


def test_signals_tell_a_refusal_and_only_a_refusal():
    signals, heard = Signals(), []
    signals.on_refused = heard.append
    signals.claim_round(ConnectionError("down"))
    signals.claim_round(StoreCorruptError("corrupt", "k"))
    assert heard == []
    refusal = LayoutRefusedError("layout 9 in this namespace")
    signals.claim_round(refusal)
    assert heard == [refusal]
    ready, why = signals.ready()
    assert not ready and "LayoutRefusedError" in why


def test_after_a_refusal_the_first_signal_is_a_first_signal():
    """An orchestrator's SIGTERM during the clean stop a refusal began asked for that same
    stop; it cut the wait for running jobs (their leases handed back) as a second one."""
    requests = _StopRequests()
    requests.refuse(LayoutRefusedError("layout 9"))
    assert requests.stop.is_set() and requests.refused is not None
    requests(signal.SIGTERM, None)
    assert requests.forced is None  # still the clean stop
    requests(signal.SIGTERM, None)
    assert requests.forced == signal.SIGTERM  # a second signal ends the wait


def test_without_a_refusal_the_second_signal_forces():
    requests = _StopRequests()
    requests(signal.SIGINT, None)
    assert requests.stop.is_set() and requests.forced is None
    requests(signal.SIGINT, None)
    assert requests.forced == signal.SIGINT

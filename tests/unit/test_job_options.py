"""A job's options have one definition (``scheduler.specs.JOB_OPTIONS``): the Python calls
take exactly its keywords, ``duetime enqueue`` has a flag for each, and the old ``--timeout``
(which meant the Redis call's there, the job's in Python) is refused with both new names."""

from __future__ import annotations

import inspect

import pytest
from click.testing import CliRunner

from scheduler import AsyncClient, Client
from scheduler.cli import main
from scheduler.cli.produce import enqueue, given_options
from scheduler.model import After, At, Delivery, Every, Misfire, Overlap, RetryPolicy
from scheduler.specs import JOB_OPTIONS, OPTIONS, make_spec

NOT_OPTIONS = {"fn", "schedule", "job_id", "kwargs", "check_task"}


def test_make_spec_takes_exactly_the_table():
    params = set(inspect.signature(make_spec).parameters) - NOT_OPTIONS
    assert params == {o.name for o in JOB_OPTIONS}
    assert ("kwargs", *(o.name for o in JOB_OPTIONS)) == OPTIONS


def test_the_cli_has_a_flag_for_every_option():
    flags = {opt for p in enqueue.params for opt in p.opts}
    missing = [o.cli for o in JOB_OPTIONS if o.cli not in flags]
    assert missing == []
    choices = {o.name: set(o.choices) for o in JOB_OPTIONS if o.kind == "choice"}
    assert choices == {
        "misfire": {m.value for m in Misfire},
        "overlap": {o.value for o in Overlap},
        "delivery": {d.value for d in Delivery},
    }


@pytest.mark.parametrize("call", [Client.enqueue, AsyncClient.enqueue])
def test_both_clients_pass_options_through(call):
    assert "options" in inspect.signature(call).parameters  # **options -> make_spec


def test_the_cli_reads_each_kind():
    opts = given_options(
        {
            "opt_lane": "reports",
            "opt_timeout": "90s",
            "opt_retry": '{"max_attempts": 5, "backoff": 2}',
            "opt_misfire": "run_once",
            "opt_misfire_grace": "1m",
            "opt_catch_up_window": None,
        }
    )
    assert opts == {
        "lane": "reports",
        "timeout": 90.0,
        "retry": RetryPolicy(max_attempts=5, backoff=2),
        "misfire": "run_once",
        "misfire_grace": 60.0,
    }


@pytest.mark.parametrize(
    ("retry", "said"),
    [
        ("{", "--retry is not JSON"),
        ("[1]", "--retry must be a JSON object"),
        ('{"attempts": 3}', "unknown field(s) ['attempts']"),
        ('{"max_attempts": 0}', "max_attempts must be an int >= 1"),
    ],
)
def test_a_bad_retry_is_one_line_and_writes_nothing(retry, said):
    result = CliRunner().invoke(
        main, ["enqueue", "t.x", "--in", "1s", "--retry", retry, "--redis", "redis://127.0.0.1:1"]
    )
    assert result.exit_code == 2 and said in result.output, result.output


def test_the_old_timeout_is_refused_with_both_new_names():
    result = CliRunner().invoke(main, ["stats", "--redis", "redis://127.0.0.1:1", "--timeout", "3"])
    assert result.exit_code == 2
    assert "--timeout is now --redis-timeout" in result.output
    assert "--job-timeout" in result.output


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"misfire": "catch_up"}, "misfire= applies"),
        ({"misfire_grace": 5}, "misfire_grace= applies"),
        ({"catch_up_window": 60}, "catch_up_window= applies"),
        ({"overlap": Overlap.ALLOW}, "overlap= applies"),
        ({"overlap": "queue", "misfire": "run_once"}, "misfire= and overlap= apply"),
    ],
)
@pytest.mark.parametrize("schedule", [After(5), At(2e9)])
def test_a_one_off_refuses_the_options_only_a_series_uses(schedule, given, said):
    """A one-off's only run is never skipped, coalesced or overlapped: these were accepted
    and ignored, in both stores."""
    with pytest.raises(ValueError, match=said) as got:
        make_spec("t.x", schedule, check_task=False, **given)
    assert "recurring jobs (every=, cron=) only" in str(got.value)


def test_a_series_and_a_one_off_with_the_defaults_take_them():
    assert make_spec("t.x", Every(60), check_task=False, overlap="queue", misfire_grace=5).overlap
    spec = make_spec("t.x", After(5), check_task=False, misfire="skip", overlap=Overlap.SKIP)
    assert (spec.misfire, spec.overlap) == (Misfire.SKIP, Overlap.SKIP)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--misfire", "catch_up"], "--misfire applies to --every and --cron only"),
        (["--overlap", "skip"], "--overlap applies"),
        (["--misfire-grace", "5s", "--catch-up-window", "1h"], "--misfire-grace and --catch-up"),
    ],
)
def test_the_cli_refuses_them_for_a_one_off_before_it_connects(extra, said):
    args = ["enqueue", "t.x", "--in", "1s", *extra, "--redis", "redis://127.0.0.1:1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and said in result.output, result.output

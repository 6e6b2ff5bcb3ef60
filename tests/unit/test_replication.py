"""replication.py without a server: WAIT accounting, the primary refresh and the primary
watch, on stand-ins for redis-py's client and Sentinel pool."""

from __future__ import annotations

import logging

import pytest

from scheduler.stores.redis.integrity import replication
from scheduler.stores.redis.integrity.replication import ReplicationWatch, Waiter
from scheduler.stores.redis.protocol import urls


class Pool:
    """Stands in for redis-py's SentinelConnectionPool: the last primary it saw."""

    def __init__(self) -> None:
        self.master_address: tuple[str, int] | None = None
        self.asked = 0
        self.next_address = ("10.0.0.1", 6379)

    def get_master_address(self) -> tuple[str, int]:
        self.asked += 1
        self.master_address = self.next_address
        return self.master_address


class Client:
    def __init__(self, pool: object | None = None) -> None:
        self.connection_pool = pool

    def execute_command(self, *args: object) -> int:
        return 0  # a script's reply (replication.RAISE: the counter's old value)


def test_wait_counts_unconfirmed_writes_and_warns_rarely(caplog):
    w = Waiter(Client(), replicas=1, timeout_ms=50)
    with caplog.at_level(logging.WARNING, "duetime.redis"):
        w.check(1)
        w.check(0)
        w.check(0, writes=5)
    assert w.unreplicated_writes == 6
    assert caplog.text.count("WAIT 1 50") == 1


def test_a_refused_wait_is_raised():
    with pytest.raises(PermissionError):
        Waiter(Client(), replicas=1, timeout_ms=50).check(PermissionError("NOPERM wait"))


def test_refresh_asks_the_sentinels_at_most_once_a_second(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(replication.time, "monotonic", lambda: now[0])
    pool = Pool()
    watch = ReplicationWatch(Client(pool), "u", "f", lambda kind, detail: None)
    watch.refresh()
    watch.refresh()
    assert pool.asked == 1
    now[0] += replication.REFRESH
    watch.refresh()
    assert pool.asked == 2
    ReplicationWatch(Client(object()), "u", "f", lambda k, d: None).refresh()  # plain: no-op


def test_a_new_primary_is_recorded_once(caplog):
    pool = Pool()
    events: list[tuple[str, str]] = []
    watch = ReplicationWatch(Client(pool), "u", "f", lambda k, d: events.append((k, d)))
    pool.master_address = ("10.0.0.1", 6379)
    watch.after_claim(0, 0, [])  # the first primary: nothing to report
    pool.master_address = ("10.0.0.2", 6379)
    with caplog.at_level(logging.ERROR, "duetime.redis"):
        watch.after_claim(0, 0, [])
        watch.after_claim(0, 0, [])
    assert events == [("failover", "primary 10.0.0.1:6379 -> 10.0.0.2:6379")]
    assert watch.failovers == 1 and "Redis failover at u" in caplog.text


def test_a_pubsub_connection_on_another_server_has_to_move():
    pool = Pool()
    pool.master_address = ("h", 2)

    class Conn:
        host, port = "h", 1

    assert urls.primary_moved(Client(pool), Conn())
    Conn.port = 2
    assert not urls.primary_moved(Client(pool), Conn())
    assert not urls.primary_moved(Client(object()), Conn())  # a plain URL never moves
    assert not urls.primary_moved(Client(pool), None)  # not connected yet


def test_adds_raise_seq_high_and_a_seq_below_it_is_a_lost_write():
    """after_add reads every reply of a batch (add.lua's calls of many jobs reply the call's
    counters for each job; older servers' two-item replies carry none)."""
    records: list[tuple[str, str]] = []
    watch = ReplicationWatch(Client(), "redis://x", "p:", lambda k, d: records.append((k, d)))
    watch.after_add(0, [["created", 0, 0, 3], ["unchanged", 0, 0, 3], ["created", 5]])
    assert (watch.seq_high, watch.lost_writes, records) == (3, 0, [])
    watch.after_add(3, [["created", 0, 3, 4], ["created", 0, 3, 5]])
    assert (watch.seq_high, watch.lost_writes, records) == (5, 0, [])
    watch.after_add(5, [["created", 0, 5, 6], ["created", 0, 2, 3]])  # one reply is below
    assert (watch.seq_high, watch.lost_writes) == (6, 3)
    assert records and records[0][0] == "data_loss" and "seq counter was 2" in records[0][1]
    watch.after_add(6, [["created", 9]])  # nothing to check
    assert watch.seq_high == 6


class Pipeline:
    """Stands in for a pipeline of EXISTS calls on the server ``keys`` describes."""

    def __init__(self, keys: set[str]) -> None:
        self.keys, self.asked = keys, []

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def exists(self, key: str) -> None:
        self.asked.append(key)

    def execute(self) -> list[int]:
        return [int(k in self.keys) for k in self.asked]


def test_a_producer_looks_up_its_recent_adds_on_a_new_primary(monkeypatch):
    """A split brain: the old primary acknowledged an enqueue alone; the seq watermark
    misses it when other writers advanced the new primary's counter first. The producer's
    inventory of its recent adds finds it by id once its pool moves."""
    pool, on_new = Pool(), {"p:job:a", "p:job:b"}
    client = Client(pool)
    client.pipeline = lambda transaction=True: Pipeline(on_new)  # type: ignore[attr-defined]
    records: list[tuple[str, str]] = []
    watch = ReplicationWatch(client, "u", "p:", lambda k, d: records.append((k, d)))
    pool.master_address = ("10.0.0.1", 6379)
    watch.after_add(0, [["created", 0, 0, 1], ["created", 0, 1, 2]], ["a", "b"])
    watch.after_add(2, [["created", 0, 2, 3]], ["lost"])  # the old primary's, alone
    assert records == []
    pool.master_address = ("10.0.0.2", 6379)  # moved; others advanced seq past 3 meanwhile
    watch.after_add(3, [["created", 0, 7, 8]], ["c"])
    assert watch.lost_writes == 1
    ((kind, detail),) = records
    assert kind == "data_loss" and "1 of the 3 enqueue(s)" in detail and detail.endswith("lost")
    records.clear()
    watch.after_add(8, [["created", 0, 8, 9]], ["d"])  # same primary: nothing looked up
    assert records == [] and watch.lost_writes == 1
    # entries older than RECENT_S are not looked up; a plain URL keeps no inventory
    monkeypatch.setattr(replication, "RECENT_S", -1.0)
    pool.master_address = ("10.0.0.3", 6379)
    watch.after_add(9, [["created", 0, 9, 10]], ["e"])
    assert records == []
    plain = ReplicationWatch(Client(object()), "u", "p:", lambda k, d: records.append((k, d)))
    plain.after_add(0, [["created", 0, 0, 1]], ["x"])
    assert plain.recent.note(None, ["y"]) is None and not plain.recent._ids

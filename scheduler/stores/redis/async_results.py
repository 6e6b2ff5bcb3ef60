"""Results for ``AsyncClient``: ``results.py``'s watch on ``redis.asyncio``.

One subscriber task per ``AsyncStore`` (started by the first watch, on the client's
loop), subscribed to the ``results`` channel of every part of the namespace; a watch
joins it, then registers and reads the stored outcome once (``results.register``, the
same operation as the sync store's), then waits for the subscriber to deliver the end.
After a lost connection every watch's outcome is read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from scheduler.model import Outcome
from scheduler.stores.redis.results import Watch, Watches, nothing, on_message, register

log = logging.getLogger("duetime.redis")


class AsyncResultSubscriber:
    def __init__(self, client: Any, channels: list[str]) -> None:
        self._r, self._channels = client, channels
        self.watches = Watches()
        self._ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_ready(self, timeout: float = 5.0) -> None:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:  # noqa: UP041 - not TimeoutError before 3.11
            raise ConnectionError("the results channel could not be subscribed in 5 s") from None

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            pubsub = self._r.pubsub()
            try:
                await pubsub.subscribe(*self._channels)
                confirmed = 0
                while confirmed < len(self._channels):
                    msg = await pubsub.get_message(timeout=1.0)
                    confirmed += msg is not None and msg.get("type") == "subscribe"
                if self._ready.is_set():
                    await self._recheck_all()
                self._ready.set()
                backoff = 0.05
                async for msg in pubsub.listen():
                    if msg.get("type") == "message":
                        on_message(self.watches, msg["data"])
                raise ConnectionError("the results subscription ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect, then read every watch again
                log.warning("results channel lost (%s); reconnecting in %.2fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def _recheck_all(self) -> None:
        for w in self.watches.all():
            try:
                outcome = await w.recheck()
            except Exception as exc:  # noqa: BLE001 - the next reconnection tries again
                log.debug("results: re-reading %s failed: %s", w.job_id, exc)
                continue
            if outcome is not None:
                self.watches.deliver(w, outcome)

    async def stop(self) -> None:
        self.watches.close()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def watch(
    st: Any,
    job_id: str,
    scheduled_ms: int | None,
    deliver: Callable[[Outcome], None],
    hold: float = 3600.0,
) -> tuple[Outcome | None, Callable[[], None]]:
    """``Outcomes.watch`` (stores/base.py) on an ``AsyncStore`` ``st``, awaited."""
    layout = await st.checked()
    sub = st.results
    if sub is None:
        sub = st.results = AsyncResultSubscriber(st.redis, [k.results for k in layout.parts])
    await sub.wait_ready()
    keys = layout.part(job_id)

    async def read() -> Outcome | None:
        found: Outcome | None = await st.run(register(keys, job_id, scheduled_ms, hold))
        return found

    w = Watch(job_id, scheduled_ms, deliver, read)
    sub.watches.add(w)  # first listen, then register and read: no end missed
    try:
        known = await read()
    except BaseException:
        sub.watches.remove(w)
        raise
    if known is not None:
        sub.watches.remove(w)
        return known, nothing
    return None, lambda: sub.watches.remove(w)

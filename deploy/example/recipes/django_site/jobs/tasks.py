"""Tasks of the Django recipe: plain ``def`` and ``async def`` mix in one replica. They run
in the ``duetime_run`` command's process, where Django is set up (models usable)."""

from __future__ import annotations

import asyncio

from scheduler import current_invocation, task


@task("site.welcome")
def welcome(user_id: int) -> str:
    return f"welcome mail for user {user_id}"


@task("site.digest")
async def digest(user_id: int) -> str:
    await asyncio.sleep(0.01)  # an HTTP call or an async ORM query would go here
    return f"digest {current_invocation().job_id} for user {user_id}"

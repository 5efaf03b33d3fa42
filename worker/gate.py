"""The worker's request gate: requests share the engine; an exclusive one waits for the rest."""
from __future__ import annotations

import asyncio


class Gate:
    """Requests share the engine; an exclusive one (settings change, maintenance) waits for
    the running ones to finish and holds new ones back until it is done."""

    def __init__(self):
        self._cond = asyncio.Condition()
        self._active = 0
        self._exclusive = False

    async def enter(self, exclusive: bool) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            if exclusive:
                self._exclusive = True
                await self._cond.wait_for(lambda: self._active == 0)
            else:
                self._active += 1

    async def leave(self, exclusive: bool) -> None:
        async with self._cond:
            if exclusive:
                self._exclusive = False
            else:
                self._active -= 1
            self._cond.notify_all()

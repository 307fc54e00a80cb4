"""The database slots of a server process: a capacity limit, claims (urgent) let in before uploads."""

from __future__ import annotations

import asyncio

import pytest

from perfci_server.database_slots import DatabaseSlots


def test_a_freed_slot_goes_to_a_waiting_claim_before_earlier_uploads():
    async def scenario():
        slots, order = DatabaseSlots(1), []
        release = asyncio.Event()

        async def request(name, urgent):
            async with slots.slot(urgent):
                order.append(name)
                if name == "holder":
                    await release.wait()

        holder = asyncio.create_task(request("holder", False))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(request(n, u)) for n, u in (("upload-1", False), ("upload-2", False), ("claim", True))]
        await asyncio.sleep(0)
        assert slots.waiting == 3 and slots.free == 0
        release.set()
        await asyncio.gather(holder, *waiting)
        assert order == ["holder", "claim", "upload-1", "upload-2"]
        assert (slots.free, slots.waiting) == (1, 0)

    asyncio.run(scenario())


def test_capacity_is_never_exceeded_and_a_cancelled_waiter_loses_no_slot():
    async def scenario():
        slots, inside, peak = DatabaseSlots(3), 0, 0

        async def request(urgent):
            nonlocal inside, peak
            async with slots.slot(urgent):
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.001)
                inside -= 1

        tasks = [asyncio.create_task(request(i % 3 == 0)) for i in range(30)]
        await asyncio.sleep(0)
        tasks[-1].cancel()  # a client that went away while waiting
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[-1], asyncio.CancelledError)
        assert peak == 3
        assert (slots.free, slots.waiting) == (3, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize("urgent", [True, False])
def test_a_request_that_raises_gives_its_slot_back(urgent):
    async def scenario():
        slots = DatabaseSlots(1)
        with pytest.raises(RuntimeError):
            async with slots.slot(urgent):
                raise RuntimeError("the endpoint failed")
        assert slots.free == 1

    asyncio.run(scenario())


def test_a_slot_handed_to_a_request_cancelled_at_that_moment_passes_on():
    async def scenario():
        slots, order = DatabaseSlots(1), []

        async def request(name):
            async with slots.slot(False):
                order.append(name)

        held = slots.slot(True)
        await held.__aenter__()
        doomed, next_one = asyncio.create_task(request("doomed")), asyncio.create_task(request("next"))
        await asyncio.sleep(0)
        assert slots.waiting == 2
        await held.__aexit__(None, None, None)  # hands the slot to "doomed" (no suspension in between)...
        doomed.cancel()  # ...which is cancelled before it runs
        await asyncio.wait_for(asyncio.gather(doomed, next_one, return_exceptions=True), timeout=5)
        assert doomed.cancelled() and order == ["next"] and slots.free == 1

    asyncio.run(scenario())

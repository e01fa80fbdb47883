"""The metrics server's slots: a newcomer takes the place of the oldest connection still sending
its request, from its own address first; one that answers a request keeps its slot. (Async only
for Trio's cancel scopes.)"""

from __future__ import annotations

from gemshare_nvs.observe.scrape_slots import ScrapeSlots


async def test_a_newcomer_from_a_full_address_drops_that_addresss_oldest_lingerer():
    slots = ScrapeSlots(total=10, per_peer=2)
    first, second = slots.admit("10.0.0.1"), slots.admit("10.0.0.1")
    elsewhere = slots.admit("10.0.0.2")
    third = slots.admit("10.0.0.1")
    assert third is not None and first.scope.cancel_called and not first.reading
    assert not second.scope.cancel_called and not elsewhere.scope.cancel_called
    assert len(slots) == 3


async def test_a_newcomer_to_full_slots_drops_the_oldest_lingerer_of_any_address():
    slots = ScrapeSlots(total=3, per_peer=3)
    answering = slots.admit("10.0.0.1")
    answering.reading = False  # its request came: it is being answered
    lingering = slots.admit("10.0.0.2")
    later = slots.admit("10.0.0.3")
    assert slots.admit("10.0.0.4") is not None
    assert lingering.scope.cancel_called
    assert not answering.scope.cancel_called and not later.scope.cancel_called


async def test_with_every_slot_answering_a_newcomer_is_turned_away():
    slots = ScrapeSlots(total=2, per_peer=2)
    for scrape in (slots.admit("10.0.0.1"), slots.admit("10.0.0.2")):
        scrape.reading = False
    assert slots.admit("10.0.0.3") is None and len(slots) == 2


async def test_a_released_slot_is_free_again():
    slots = ScrapeSlots(total=1, per_peer=1)
    only = slots.admit("10.0.0.1")
    only.reading = False
    slots.release(only)
    assert slots.admit("10.0.0.1") is not None

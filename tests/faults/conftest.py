"""The fault tests stop brokers, kill members and make groups rebalance. kafka-python 3.0 then
leaves some of its sockets to the garbage collector, whose ResourceWarning lands in whichever test
the collection happens to run in, often a later module's. Collect them after each fault test,
where they come from, with that one warning ignored."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _collect_client_sockets() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()

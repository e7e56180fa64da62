"""Shared by the kernel runtime's tests: skip without privileges or SRv6, and prove that no
test leaves a namespace (or an interface in the test's own namespace) behind."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from mrc.kernel import netns


def unavailable() -> str | None:
    reason = netns.missing_privileges()
    if reason:
        return reason
    from mrc.kernel.fabric import probe_seg6

    return probe_seg6()


REASON = unavailable()
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"kernel runtime: {REASON}")


def namespaces() -> list[str]:
    return sorted(os.listdir(netns.NETNS_DIR)) if netns.NETNS_DIR.exists() else []


def own_interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


def locks() -> list[str]:
    return sorted(p.name for p in netns.LOCK_DIR.glob("*.lock")) if netns.LOCK_DIR.exists() \
        else []


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Count namespaces (ours and everyone's), run locks and this namespace's interfaces
    before and after the test: a kernel test must leave all of them as it found them."""
    netns.cleanup_stale()  # a killed earlier session's fabric is not this test's doing
    before, mine, held = namespaces(), own_interfaces(), locks()
    yield
    assert namespaces() == before, f"leftover namespaces: {set(namespaces()) ^ set(before)}"
    assert own_interfaces() == mine, "interfaces appeared in the test's own namespace"
    assert locks() == held, "leftover run locks"

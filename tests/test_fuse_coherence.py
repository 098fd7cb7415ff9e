"""KernelCache: the rules that keep the kernel's page cache and size to one version (no mount)."""

from __future__ import annotations

from zfuse.coherence import KernelCache


def test_pages_are_kept_only_for_the_version_they_were_loaded_from() -> None:
    cache = KernelCache(attr_timeout=1.0)
    assert cache.opened("k", "v1", 10) == (False, False)
    cache.closed("k", "v1", direct=False)
    assert cache.opened("k", "v1", 10) == (True, False)
    cache.closed("k", "v1", direct=False)
    assert cache.opened("k", "v2", 10) == (False, False)  # same size, other version: dropped
    cache.closed("k", "v2", direct=False)
    cache.forget("k")  # written through the mount
    assert cache.opened("k", "v2", 10) == (False, False)


def test_unknown_versions_never_keep_pages_and_never_share_the_cache() -> None:
    cache = KernelCache(attr_timeout=1.0)
    assert cache.opened("k", None, 10) == (False, False)
    assert cache.opened("k", None, 10) == (False, True)  # cannot tell: not through the cache
    cache.closed("k", None, direct=False)
    assert cache.opened("k", None, 10) == (False, False)


def test_a_second_version_opened_meanwhile_reads_past_the_page_cache() -> None:
    cache = KernelCache(attr_timeout=1.0)
    assert cache.opened("k", "v1", 10) == (False, False)
    assert cache.opened("k", "v1", 10) == (True, False)
    assert cache.opened("k", "v2", 20) == (False, True)
    # While v1 is read through the cache, the kernel is told v1's size.
    assert cache.size_to_report("k", 20) == 10
    cache.closed("k", "v2", direct=True)
    cache.closed("k", "v1", direct=False)
    cache.closed("k", "v1", direct=False)
    assert cache.size_to_report("k", 20) == 20


def test_a_size_the_kernel_may_still_believe_sends_another_size_past_the_cache() -> None:
    cache = KernelCache(attr_timeout=1.0)
    assert cache.size_to_report("k", 10) == 10  # a stat answered: believed for 1 s
    assert cache.opened("k", "v2", 20) == (False, True)
    assert cache.opened("k", "v3", 10) == (False, False)
    never = KernelCache(attr_timeout=0.0)  # the kernel believes no size: nothing to fear
    assert never.size_to_report("k", 10) == 10
    assert never.opened("k", "v2", 20) == (False, False)


def test_memory_stays_bounded_and_open_keys_are_kept() -> None:
    cache = KernelCache(attr_timeout=0.0, max_keys=100)
    cache.opened("open", "v", 1)
    for i in range(1000):
        cache.opened(f"k{i}", "v", 1)
        cache.closed(f"k{i}", "v", direct=False)
    assert len(cache) <= 100
    assert cache.opened("open", "v", 1) == (True, False)  # still known: it was open

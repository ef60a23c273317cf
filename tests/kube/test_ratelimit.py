"""The writer's token bucket: what waits for spare budget leaves it to the requests that
come first (the pending statuses and Events wait; admissions do not)."""

from __future__ import annotations

from atoll.kube.ratelimit import TokenBucket


async def test_waiting_for_spare_budget_takes_no_token() -> None:
    bucket = TokenBucket(qps=200, burst=10)
    while bucket.try_acquire():
        pass  # the burst spent
    await bucket.wait_spare(reserve=3)
    # spare now: a token can be taken with 3 left, and waiting took none of them
    assert bucket.try_acquire(reserve=3)
    await bucket.wait_spare(reserve=0)
    assert bucket.try_acquire()


async def test_spare_budget_is_there_at_once_when_the_bucket_is_full() -> None:
    bucket = TokenBucket(qps=1, burst=4)
    await bucket.wait_spare(reserve=2)
    taken = sum(1 for _ in range(4) if bucket.try_acquire())
    assert taken == 4  # nothing was taken by the wait

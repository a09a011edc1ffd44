"""Runs paused for their plan's approval, in Redis: found, and taken out exactly once.

A paused run is one entry of its shard's `awaiting-approval` stream (keys.AWAITING_APPROVAL),
published by Phase B's commit like any event; no consumer group reads it, so it holds no
worker's slot, and it survives restarts as the stream does. It leaves the stream in one of
three ways, each the same script: an approval (the gateway publishes the run's PlanReady), a
cancel or its deadline (a worker's sweeper publishes its LoopExited). The script deletes the
entry and publishes the event only if the delete found it: whoever comes first takes the run
on, and every other attempt changes nothing.
"""

from __future__ import annotations

from aeonloop.bus.codec import Routable, encode
from aeonloop.bus.connection import RedisClient
from aeonloop.bus.keys import AWAITING_APPROVAL, HEAD_RECORD, Keys, head_of

#: XDEL the paused entry; only if it was there, XADD what takes the run on and make it the
#: run's head (KEYS[3], the run's records: field ARGV[3], kept ARGV[4] s), as the commit does
#: for every progress event (bus.commit). 1 taken, 0 not.
_TAKE = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 6))
redis.call('HSET', KEYS[3], ARGV[3], ARGV[5] .. ' ' .. id)
redis.call('EXPIRE', KEYS[3], ARGV[4])
return 1
"""

#: An entry of the stream: its id and its fields.
Entry = tuple[bytes, dict[bytes, bytes]]


async def paused(redis: RedisClient, keys: Keys, shard: int) -> list[Entry]:
    """Every run paused in `shard`, oldest first."""
    return await redis.xrange(keys.stream(AWAITING_APPROVAL, shard))


async def find(redis: RedisClient, keys: Keys, correlation_id: str) -> Entry | None:
    """The entry of run `correlation_id` if it is paused."""
    wanted = correlation_id.encode()
    for entry_id, fields in await paused(redis, keys, keys.shard_of(correlation_id)):
        if fields.get(b"cid") == wanted:
            return entry_id, fields
    return None


async def take(
    redis: RedisClient,
    keys: Keys,
    shard: int,
    entry_id: bytes,
    then: Routable,
    maxlen: int,
    keep_s: int,
) -> bool:
    """Take the paused entry out and publish `then` in its place (in its shard), its run's
    head from now on (kept `keep_s`, AEON_ANSWER_TTL_S, like its other records); False when
    someone else took it first."""
    encoded = encode(then)
    fields = [part for pair in encoded.items() for part in pair]
    taken = await redis.eval(
        _TAKE,
        3,
        keys.stream(AWAITING_APPROVAL, shard),
        keys.stream(then.STREAM, shard),
        keys.run_records(encoded["cid"].decode(), shard),
        entry_id,
        maxlen,
        HEAD_RECORD,
        keep_s,
        head_of(encoded["type"].decode(), then.STREAM),
        *fields,
    )
    return bool(taken)

"""Every Redis key Aeon uses, in one place, namespaced by the configured prefix and sharded.

A run belongs to one shard, picked from its correlation id (`Keys.shard_of`), and everything of
that run's journey lives in its shard's hash slot: each phase's stream, the answers stream, the
answer key, the dedupe locks and the dead letters all carry the shard's hash tag (`{s0}`). So:

- every script and multi-key command touches one slot, as Redis Cluster requires;
- on a cluster, a hop's writes (outputs, done mark, ack) go to one node in the order sent, so a
  failover that loses the newest writes loses a suffix of them, never the ack without the
  outputs (docs/delivery.md, "On Redis Cluster");
- with `AEON_SHARDS` = N, the N shard tags are chosen to fall in N equal ranges of the 16,384
  slots, so a cluster whose masters hold equal contiguous ranges (what `redis-cli --cluster
  create` makes) puts each shard on its own master when N equals the masters.

A run's answer text stream (`Keys.answer_text`: the answer's pieces as the model writes them,
runs.answer_text) is there too, settled by the script that publishes the answer.

A run's records (`Keys.run_records`: what its events refer to instead of carrying, and its head,
written by the same commit) live there too. Memo entries, the write probe and the recorded shard
count are the only keys outside the shards: each is read and written alone, and losing a memo costs
an LLM call, not correctness.

A memo entry is `<prefix>:memo:<run>/<scope>/<prompt>`: one LLM call of one run, the scope
saying which (`memo_scope`: the phase, the pass, the step, what the call is for; a repair call
adds `repair:<prompt>`, `repair_scope`). The whole key is made by `memo_key`, and nowhere else,
so a redelivered hop asks for exactly the keys its first delivery wrote. A fork reads its
parent's for the calls before its fork point: `memo_call` says which call a key is, and
`memo_key` with the parent's id gives the parent's key for it (runs.memo.ForkedMemo).
"""

from __future__ import annotations

import functools
import itertools
import re
import zlib
from dataclasses import dataclass
from enum import StrEnum

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

#: The LLM rate limit's keys (Keys.llm_limit): the requests of the last minute, their tokens,
#: the slots in flight, and the pause a 429 set.
LLM_LIMIT = "llm-limit"
LLM_LIMIT_PARTS = ("requests", "tokens", "in-flight", "pause")
#: The logical name of the answers stream: the one stream gateways read, not phases.
ANSWERS = "answers"
#: The logical name of the dead-letter stream (one per shard).
DEAD_LETTER = "dead-letter"
#: The logical name of the stream of runs paused for their plan's approval: no group reads
#: it; an approval, or the sweeper (a cancel, the deadline), takes a run out (runs.approvals).
AWAITING_APPROVAL = "awaiting-approval"
#: The logical name of the stream of webhook outcomes (a run's answer POSTed, or given up on):
#: no group reads it; gateways follow it, as they follow answers, and workers trim it alike.
WEBHOOK_OUTCOMES = "webhook-outcomes"
#: The run record (runs.records) that keeps a run's webhook outcome as long as its answer.
WEBHOOK_RECORD = "webhook"
#: The run record counting the POSTs made of a run's webhook over all its deliveries: a plain
#: integer (HINCRBY, never packed), raised before each POST (aeonloop.webhooks); `aeon dlq
#: replay` deletes it, so a replayed webhook has its tries again.
WEBHOOK_TRIES_RECORD = "webhook-tries"
#: The run record (`Keys.run_records`) holding the files its request attached, written once by
#: the commit of Phase A's hop (phases.history.request_records).
FILES_RECORD = "files"
#: The run record holding the request that started the run (phases.history.request_records),
#: but for its files and turns, which have records of their own: what a fork of the run is
#: made from, and where a fork's lineage (its `fork`) is read, as long as the run's answer.
REQUEST_RECORD = "request"
#: The run record holding the plain draft answer Phase A wrote (phases.history.new_records),
#: which Phase E reads and may publish.
DRAFT_RECORD = "draft"
#: The run record holding the earlier turns its request carried, written with FILES_RECORD.
TURNS_RECORD = "turns"
#: The run record (`Keys.run_records`) holding the run's head: where its newest progress event
#: is (`<type> <stream> <entry id>`), written by the script that adds that event (bus.commit,
#: and runs.approvals' for the PlanReady an approval publishes), so a reader finds a run's
#: state with one read, not a scan of its shard's streams (runs.store).
HEAD_RECORD = "head"
#: The run record holding what a run list shows of the request (its text cut short, when it
#: was made, its deadline), written once by the script that adds the request (runs.store): the
#: list outlives the requests stream, trimmed AEON_STREAM_KEEP_S after a run (issue 41).
LISTING_RECORD = "listing"
#: The logical name of a run's answer text stream (runs.answer_text): the answer's pieces as
#: the model writes them, one stream per run, beside its answer key.
ANSWER_TEXT = "answer-text"


class LockState(StrEnum):
    """What a consumer finds when it locks an event (bus.locking).

    DONE is also the value an event's lock keeps once the event is handled: the dedupe mark.
    """

    MINE = "mine"
    DONE = "done"
    BUSY = "busy"


@functools.cache
def shard_tag(shard: int, shards: int) -> str:
    """The hash tag of `shard` out of `shards`: `s<shard>`, or `s<shard>.<n>` for the first n
    that puts it in the shard's own range of slots (a pure function: every process agrees)."""
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    for n in itertools.count():
        tag = f"s{shard}" if n == 0 else f"s{shard}.{n}"
        if low <= key_slot(tag.encode()) < high:
            return tag
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count is endless


def head_of(kind: str, stream: str) -> str:
    """A run's head (HEAD_RECORD) but for its entry id, which the script that adds the event
    appends: `<type> <stream>`, the event's type and its stream's logical name (runs.store
    reads it back)."""
    return f"{kind} {stream}"


def memo_scope(
    phase: str, call: str = "", *, pass_number: int | None = None, step: str | None = None
) -> str:
    """Which of a run's LLM calls a memoised reply answers: `phase`, then `p<pass_number>` when
    the call belongs to a pass, then `call` (with `:<step>` for a step's own call), e.g. `a`,
    `b/plan`, `c/p2/step:s1`, `d/p2/update`."""
    parts = [phase]
    if pass_number is not None:
        parts.append(f"p{pass_number}")
    if call:
        parts.append(call if step is None else f"{call}:{step}")
    return "/".join(parts)


def repair_scope(scope: str, prompt: str) -> str:
    """The scope of the call that repairs the reply `prompt` gave in `scope`."""
    return f"{scope}/repair:{prompt}"


def memo_key(run: str, scope: str, prompt: str) -> str:
    """The memo of `prompt`'s reply in `scope` of `run` (Keys.memo puts it under the prefix)."""
    return f"{run}/{scope}/{prompt}"


_PASS_PART = re.compile(r"p(\d+)")


@dataclass(frozen=True)
class MemoCall:
    """Which call of a run a memo key (`memo_key`) remembers: its phase, its pass (None: the
    call belongs to no pass), and the rest, the scope past the run's id."""

    phase: str
    pass_number: int | None
    rest: str


def memo_call(key: str, run: str) -> MemoCall | None:
    """The call of `run` that `key` remembers; None if `key` is not one of `run`'s."""
    if not key.startswith(f"{run}/"):
        return None
    rest = key[len(run) + 1 :]
    parts = rest.split("/")
    number = _PASS_PART.fullmatch(parts[1]) if len(parts) > 2 else None
    return MemoCall(parts[0], int(number.group(1)) if number else None, rest)


@dataclass(frozen=True)
class Keys:
    prefix: str
    shards: int = 1

    def shard_of(self, correlation_id: str) -> int:
        """The shard a run lives in: CRC-32 of its correlation id (stable across processes,
        unlike `hash`)."""
        if self.shards == 1:
            return 0
        return zlib.crc32(correlation_id.encode()) % self.shards

    def _in(self, shard: int) -> str:
        return f"{self.prefix}:{{{shard_tag(shard, self.shards)}}}"

    def stream(self, name: str, shard: int) -> str:
        return f"{self._in(shard)}:{name}"

    def streams(self, name: str) -> list[str]:
        """The stream `name` in every shard, by shard number."""
        return [self.stream(name, shard) for shard in range(self.shards)]

    def stream_of(self, name: str, correlation_id: str) -> str:
        """The stream `name` in the shard of run `correlation_id`."""
        return self.stream(name, self.shard_of(correlation_id))

    def group(self, phase: str) -> str:
        return f"phase-{phase}"

    def answer(self, correlation_id: str, shard: int | None = None) -> str:
        """A run's answer, kept after its stream entry is trimmed; set once (bus.commit). In
        its run's shard: the one its id picks, unless the run was put in another."""
        where = self.shard_of(correlation_id) if shard is None else shard
        return f"{self._in(where)}:answer:{correlation_id}"

    def answer_text(self, correlation_id: str, shard: int | None = None) -> str:
        """A run's answer text stream (runs.answer_text): in its run's shard like its answer,
        so the commit that publishes the answer settles the stream in the same script."""
        where = self.shard_of(correlation_id) if shard is None else shard
        return f"{self._in(where)}:{ANSWER_TEXT}:{correlation_id}"

    def cancel(self, correlation_id: str) -> str:
        """A run's cancel mark (runs.cancels), beside its answer so one script can check the
        answer and set the mark."""
        return f"{self._in(self.shard_of(correlation_id))}:cancel:{correlation_id}"

    def run_records(self, correlation_id: str, shard: int | None = None) -> str:
        """A hash of the run's records (runs.records), in the run's shard like its answer."""
        where = self.shard_of(correlation_id) if shard is None else shard
        return f"{self._in(where)}:run:{correlation_id}"

    def lock(self, shard: int, group: str, event_id: str) -> str:
        """Who handles the event now (a consumer name), or DONE once it is handled."""
        return f"{self._in(shard)}:lock:{group}:{event_id}"

    def run_list(self, shard: int) -> str:
        """The shard's runs, newest last: a sorted set of correlation ids scored by when their
        request was added (ms), each kept AEON_ANSWER_KEEP_S like its answer (runs.store)."""
        return f"{self._in(shard)}:run-list"

    def dead_letter(self, shard: int) -> str:
        return self.stream(DEAD_LETTER, shard)

    def tenant(self, tenant: str, what: str) -> str:
        """A key of `tenant`'s quotas or cost ledger (aeonloop.tenants), `what` it holds: every
        key of one tenant carries its hash tag (`{t:<name>}`), so one script can read and
        update them together on a cluster; a tenant's keys live apart from the runs' shards."""
        return f"{self.prefix}:{{t:{tenant}}}:{what}"

    def tenant_of(self, correlation_id: str) -> str:
        """Which tenant's slot a run holds (aeonloop.tenants): read when its answer comes."""
        return f"{self.prefix}:tenant-of:{correlation_id}"

    def usage_tenants(self, day: str) -> str:
        """The tenants whose runs were charged on `day` (YYYY-MM-DD, UTC): what `aeon usage`
        reads the ledger of."""
        return f"{self.prefix}:usage-tenants:{day}"

    def memo(self, key: str) -> str:
        """Where the memo `key` (`memo_key`) is kept."""
        return f"{self.prefix}:memo:{key}"

    @property
    def shard_count(self) -> str:
        """The number of shards the deployment under this prefix uses (bus.layout)."""
        return f"{self.prefix}:shards"

    def llm_limit(self, endpoint: str, model: str) -> list[str]:
        """The keys of the rate limit one LLM endpoint and model share across workers
        (llm.limiter), in its script's order; all under one hash tag of their own, so the one
        script touches one slot on a cluster."""
        tag = f"llm:{zlib.crc32(f'{endpoint} {model}'.encode()):08x}"
        return [f"{self.prefix}:{{{tag}}}:{LLM_LIMIT}:{part}" for part in LLM_LIMIT_PARTS]

    @property
    def write_probe(self) -> str:
        """A key written, and expired at once, to learn whether Redis takes writes again."""
        return f"{self.prefix}:write-probe"

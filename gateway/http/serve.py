"""`aeon serve [--host H] [--port P]`: the HTTP API and the run page (gateway.http.api), served
by uvicorn.

With AEON_REDIS_URL set it only publishes and reads, like any gateway, so any number of them
can serve one deployment. Without it, it runs the stack `aeon ask` embeds (a private Redis and
workers in this process), whose runs and answers go away with the process.

SIGTERM or Ctrl-C: stop accepting, end the open event streams (a reader resumes elsewhere by
its Last-Event-ID), finish the requests in flight within AEON_SHUTDOWN_GRACE_S, exit 0.

The web libraries are imported when the command runs, so no other command starts slower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

from aeonloop.bus.connection import RedisClient, connect
from aeonloop.bus.keys import Keys
from aeonloop.bus.settings import BusSettings
from aeonloop.exceptions import SettingsError
from aeonloop.gateway.client import AeonClient
from aeonloop.gateway.embedded import embedded_pipeline
from aeonloop.gateway.http.guards import TenantGate
from aeonloop.gateway.http.run_feed import RunFeed
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.validation import port_option
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings, ready_adapter
from aeonloop.runs.store import RunStore
from aeonloop.settings import TenantSettings
from aeonloop.telemetry import metrics
from aeonloop.tenants.ledger import Ledger
from aeonloop.tools.toolbox import open_toolbox

log = logging.getLogger("aeon.http")

#: Connections the kernel queues before the server accepts them: a thousand readers may
#: reconnect at once after a restart.
BACKLOG = 4096
#: Open files asked for when the hard limit is unlimited.
OPEN_FILES = 65_536


def add_commands(commands: argparse._SubParsersAction, command: Callable[..., Any]) -> None:
    p = command(commands, "serve", serve, "serve the HTTP API and the run page", "INFO")
    p.add_argument("--host", help="the address to listen on (AEON_HTTP_HOST, 127.0.0.1)")
    p.add_argument(
        "--port",
        type=port_option(lowest=0),
        help="the port (AEON_HTTP_PORT, 8080); 0 takes any free one",
    )


async def serve(args: argparse.Namespace) -> int:
    http: HttpSettings = args.http
    given = {"http_host": args.host, "http_port": args.port}
    http = http.with_(**{name: value for name, value in given.items() if value is not None})
    http.tenants()  # a mistake in the tokens file: one line now, not at the first request
    listening = _listen(http.http_host, http.http_port)
    raise_open_files_limit()
    metrics.record()  # served at /metrics; first, so an embedded stack's phases are counted too
    settings: BusSettings = args.settings
    try:
        if settings.redis_url:
            return await _serve_on(settings, http, listening, args.loop, _model(args.llm))
        llm = await ready_adapter(args.llm)
        log.warning(
            "no AEON_REDIS_URL: running an embedded Redis and every phase in this process; "
            "its runs and answers go away with it"
        )
        try:
            async with (
                open_toolbox(args.tools) as tools,
                embedded_pipeline(settings, llm, args.loop, tools) as embedded,
            ):
                return await _serve_on(embedded, http, listening, args.loop, _model(args.llm))
        finally:
            await llm.aclose()
    finally:
        listening.close()


def raise_open_files_limit() -> None:
    """Let this process open as many files as it is allowed: every event stream is a socket,
    and a soft limit of 1,024 (many systems' default) would stop short of a thousand readers."""
    try:
        import resource
    except ImportError:  # not on Windows, which has no such limit to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, OPEN_FILES)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts, so a taken port is one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as error:
        raise SettingsError(
            f"cannot listen on {host}:{port} ({error.strerror or error}): choose a free port "
            "(--port, AEON_HTTP_PORT) or another address (--host, AEON_HTTP_HOST)"
        ) from None


def _model(llm: LLMSettings) -> str:
    """The model the deployment's runs are priced by: AEON_LLM_MODEL, or the adapter's kind
    (offline, scripted) when it names none."""
    return llm.model or llm.kind


def _tenants(redis: RedisClient, keys: Keys, model: str) -> TenantGate:
    """The gate holding each tenant to AEON_TENANT_* on this deployment's Redis."""
    return TenantGate(Ledger(redis, keys, TenantSettings.from_env(), model))


async def _serve_on(
    settings: BusSettings,
    http: HttpSettings,
    listening: socket.socket,
    loop: LoopSettings,
    model: str,
) -> int:
    import uvicorn

    from aeonloop.gateway.http.api import build_app
    from aeonloop.gateway.http.connections import bounded_h11

    logging.getLogger("uvicorn.access").addFilter(WITHOUT_QUERY)
    # The client's reader blocks one connection per shard; it reads for the feed too.
    redis = await connect(settings, consumers=settings.shards)
    try:
        feed = RunFeed(RunStore(redis, Keys(settings.prefix, settings.shards), settings))
        metrics.HTTP_EVENT_STREAMS.set_function(lambda: feed.open_streams)
        tenants = _tenants(redis, Keys(settings.prefix, settings.shards), model)
        also = tenants.settling(feed.seen)
        async with AeonClient(settings=settings, redis=redis, also=also, loop=loop) as client:
            app = build_app(client, feed, http, tenants)
            config = uvicorn.Config(
                app,
                lifespan="off",
                log_config=None,
                server_header=False,
                timeout_graceful_shutdown=settings.shutdown_grace_s,
                # X-Forwarded-For only from the proxies named: anyone else could send it, and
                # rotate it past the rate limit.
                proxy_headers=bool(http.http_trusted_proxies),
                forwarded_allow_ips=list(http.http_trusted_proxies),
                http=bounded_h11(http.http_header_timeout_s),
                limit_concurrency=http.http_max_connections,
            )
            server = _quiet_signals(uvicorn.Server, feed.stop_streams)(config)
            host, port = listening.getsockname()[:2]
            where = f"[{host}]" if ":" in host else host
            log.info(
                "serving http://%s:%d/ (the API under /v1, its docs at /docs, MCP at /mcp, "
                "A2A at /a2a)",
                where,
                port,
            )
            try:
                async with app.state.mcp_sessions.run():  # MCP at /mcp (gateway.mcp_server)
                    await server.serve(sockets=[listening])
            finally:
                await app.state.a2a.aclose()  # A2A tasks followed (gateway.http.a2a_server)
    finally:
        await redis.aclose()
    log.info("stopped cleanly")
    return 0


class _WithoutQuery(logging.Filter):
    """uvicorn's access lines with each path's query string cut off: a client may put a secret
    there (a token sent as `?token=...`, which the API refuses), and a log line must not keep
    it. Every argument that is a path is cut, so no order of uvicorn's arguments is assumed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                arg.split("?", 1)[0] if isinstance(arg, str) and arg.startswith("/") else arg
                for arg in record.args
            )
        return True


#: The filter `aeon serve` puts on uvicorn's access logger (once: the same instance).
WITHOUT_QUERY = _WithoutQuery()


def _quiet_signals(server_class: type, on_stop: Callable[[], None]) -> type:
    """uvicorn's server, taking SIGINT and SIGTERM through the event loop and not raising them
    again once stopped (uvicorn does, to end the process as the signal would have): the
    command ends after its own teardown, the embedded stack's included. `on_stop` is called
    first, so open event streams end cleanly rather than being cut when uvicorn gives up
    waiting for them."""

    class Server(server_class):  # type: ignore[misc, valid-type]
        def handle_exit(self, sig: int, frame: Any) -> None:
            on_stop()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(number, self.handle_exit, number, None)
            try:
                yield
            finally:
                for number in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(number)

    return Server

"""The shape of a reference chain: how many hops, and the event each hop reads and publishes.

The references replay the pipeline's traffic without its logic: hop i reads stream i through its
own consumer group and publishes the next event, of the size and type name the pipeline's own
event had at that point of a run. `ChainSpec` is what the bench process measured and what the
reference process is told (on its command line), so both sides agree on streams and payloads.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from bench import eventloop

#: MAXLEN ~ on every XADD, as the pipeline's committer does, so the commands match.
STREAM_MAXLEN = 100_000
GROUP = "ref"


@dataclass(frozen=True)
class ChainSpec:
    """`types[i]` / `sizes[i]`: the event entering hop i; the last pair is the final answer."""

    prefix: str
    types: tuple[str, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.types) != len(self.sizes) or len(self.types) < 2:
            raise ValueError("a chain needs matching types and sizes, at least one hop")

    @property
    def hops(self) -> int:
        return len(self.types) - 1

    def stream(self, hop: int) -> str:
        """The stream hop `hop` reads; `stream(hops)` is the answers stream the gateway reads."""
        return f"{self.prefix}:hop{hop}" if hop < self.hops else f"{self.prefix}:out"

    def event(self, hop: int) -> tuple[bytes, bytes]:
        """The type name and body of the event published into stream `hop`."""
        return self._bodies[hop]

    def payload(self, hop: int, cid: bytes) -> dict[bytes, bytes]:
        """The entry published into stream `hop`: the pipeline's three fields, same sizes."""
        kind, body = self._bodies[hop]
        return {b"type": kind, b"cid": cid, b"body": body}

    @cached_property
    def _bodies(self) -> list[tuple[bytes, bytes]]:
        """Built once: the references must do no per-message work the pipeline could avoid."""
        return [
            (kind.encode(), b"x" * size) for kind, size in zip(self.types, self.sizes, strict=True)
        ]

    def to_args(self) -> list[str]:
        sizes = ",".join(str(size) for size in self.sizes)
        return ["--prefix", self.prefix, "--types", ",".join(self.types), "--sizes", sizes]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The options `to_args` writes, for a reference process's command line."""
        parser.add_argument("--prefix", required=True)
        parser.add_argument("--types", required=True, help="comma-separated event type names")
        parser.add_argument("--sizes", required=True, help="comma-separated body sizes in bytes")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ChainSpec:
        return cls(
            prefix=args.prefix,
            types=tuple(args.types.split(",")),
            sizes=tuple(int(size) for size in args.sizes.split(",")),
        )


def run_chain_process(
    argv: Sequence[str] | None,
    prog: str,
    about: str | None,
    modes: Sequence[str],
    serve: Callable[[str, ChainSpec, str], Coroutine[Any, Any, None]],
) -> None:
    """The command line of a reference chain process: `--url`, `--mode` and the chain's
    arguments, then `serve(url, spec, mode)` on the bench's event loop."""
    parser = argparse.ArgumentParser(prog=prog, description=about)
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=modes, required=True)
    ChainSpec.add_arguments(parser)
    args = parser.parse_args(argv)
    eventloop.run(serve(args.url, ChainSpec.from_args(args), args.mode))


def stop_on_signals() -> asyncio.Event:
    """Set on SIGTERM or SIGINT: how a reference chain process is told to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop

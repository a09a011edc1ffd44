"""Which asyncio event loop the benchmark's processes run on.

`aeon worker` runs on uvloop when it is installed (gateway.cli.main._run), so the reference
consumers and the bench process do too: comparing a uvloop pipeline with default-loop references
would flatter the pipeline by about 20 % of CPU (docs/bus.md, "Performance notes").
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_name() -> str:
    """The loop's name for the report: uvloop or asyncio."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to completion on uvloop when installed, else on the default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)

"""Aeon: an event-driven, multi-pass LLM reasoning pipeline on Redis Streams.

The distribution and this import package are `aeonloop` (the name `aeon` on PyPI belongs to
another project); the command and the product are `aeon`. The repository's top folders are the
package's subpackages, read as the pipeline from the outside in:

    testing.py  a whole Aeon in one line for tests: Redis, workers, a client (AeonTestStack)
    gateway/    how requests come in and answers go out: CLI, HTTP, Python client, FastStream
    phases/     the pipeline: A profile, B plan, the C-loop with D, E answer
    llm/        the LLM call: the session, local JSON repair, the adapters
    prompts/    every prompt text, and how replies are read
    bus/        the Redis Streams transport and its delivery protocol
    tools/      the MCP servers a run's steps may call
    servers/    Redis servers started on this machine (embedded, a local cluster)
    telemetry/  metrics and traces
    limits.py   the limits a request and a run are held to; contracts.py what layers share
    settings.py one settings layer; exceptions.py one exception tree

The public API is `__all__` below: `from aeonloop import AeonClient, ExecutionResult, ...`.
Every other module and name is internal and may change without notice (docs/public-api.md).
The names are loaded on first use, so `import aeonloop` (and `import aeonloop.prompts`, which
runs this file first) imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Each public name and the module that defines it (or, for the test harness, offers it).
_PUBLIC: dict[str, str] = {
    # The Python client and what it returns.
    "AeonClient": "aeonloop.gateway.client",
    "CancelOutcome": "aeonloop.runs.cancels",
    "Progress": "aeonloop.gateway.progress",
    "ExecutionResult": "aeonloop.phases.events",
    "FinalAnswer": "aeonloop.phases.models",
    "ExitReason": "aeonloop.phases.models",
    "Outcome": "aeonloop.phases.outcome",
    "Usage": "aeonloop.contracts",
    # What a request carries, and a plan a person approves.
    "Rule": "aeonloop.phases.models",
    "AttachedFile": "aeonloop.contracts",
    "Turn": "aeonloop.contracts",
    "Plan": "aeonloop.phases.models",
    # A FastStream app's names.
    "AeonStreams": "aeonloop.gateway.faststream_interop",
    "RequestSubmitted": "aeonloop.phases.events",
    "FinalAnswerReady": "aeonloop.phases.events",
    # The harness for users' tests: a whole stack in one line, and a model they script.
    "AeonTestStack": "aeonloop.testing",
    "ScriptedLLM": "aeonloop.testing",
    # The errors a caller of the above catches (the whole tree: docs/architecture.md, "Errors").
    "AeonError": "aeonloop.exceptions",
    "UsageError": "aeonloop.exceptions",
    "SettingsError": "aeonloop.exceptions",
    "BadInput": "aeonloop.exceptions",
    "TooLarge": "aeonloop.exceptions",
    "ParentGone": "aeonloop.exceptions",
    "BusError": "aeonloop.exceptions",
    "AnswerTimeout": "aeonloop.exceptions",
}

#: Written out for type checkers and linters; tests/unit/test_public_api.py keeps it equal to
#: _PUBLIC's names.
__all__ = [
    "AeonClient",
    "AeonError",
    "AeonStreams",
    "AeonTestStack",
    "AnswerTimeout",
    "AttachedFile",
    "BadInput",
    "BusError",
    "CancelOutcome",
    "ExecutionResult",
    "ExitReason",
    "FinalAnswer",
    "FinalAnswerReady",
    "Outcome",
    "ParentGone",
    "Plan",
    "Progress",
    "RequestSubmitted",
    "Rule",
    "ScriptedLLM",
    "SettingsError",
    "TooLarge",
    "Turn",
    "Usage",
    "UsageError",
    "__version__",
]

if TYPE_CHECKING:
    from aeonloop.contracts import AttachedFile, Turn, Usage
    from aeonloop.exceptions import (
        AeonError,
        AnswerTimeout,
        BadInput,
        BusError,
        ParentGone,
        SettingsError,
        TooLarge,
        UsageError,
    )
    from aeonloop.gateway.client import AeonClient
    from aeonloop.gateway.faststream_interop import AeonStreams
    from aeonloop.gateway.progress import Progress
    from aeonloop.phases.events import ExecutionResult, FinalAnswerReady, RequestSubmitted
    from aeonloop.phases.models import ExitReason, FinalAnswer, Plan, Rule
    from aeonloop.phases.outcome import Outcome
    from aeonloop.runs.cancels import CancelOutcome
    from aeonloop.testing import AeonTestStack, ScriptedLLM


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept here after it."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'aeonloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

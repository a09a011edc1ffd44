"""Aeon: an event-driven, multi-pass LLM reasoning pipeline on Redis Streams.

The distribution and this import package are `aeonloop` (the name `aeon` on PyPI belongs to
another project); the command and the product are `aeon`. The repository's top folders are the
package's subpackages, read as the pipeline from the outside in:

    gateway/    how requests come in and answers go out: CLI, HTTP, Python client, FastStream
    phases/     the pipeline: A profile, B plan, the C-loop with D, E answer
    prompts/    every prompt text, and how replies are read
    llm/        the LLM adapters (OpenAI-compatible servers, the offline model)
    bus/        the Redis Streams transport and its delivery protocol
    servers/    Redis servers started on this machine (embedded, a local cluster)
    telemetry/  metrics and traces
    settings.py one settings layer; exceptions.py one exception tree

Importing this package imports nothing else, so `import aeonloop.prompts` stays light.
"""

__version__ = "0.1.0"

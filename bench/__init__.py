"""Benchmarks of Aeon's bus and pipeline, run by hand or in CI, never as timed tests.

`python -m bench` measures, against a real Redis, what the pipeline costs per hop next to plain
redis-py references, how many runs one worker keeps in flight behind a slow LLM, how that scales
to two worker processes, and how much memory each in-flight run takes (issue 5). Every figure
that depends on this machine is also reported as a ratio to a reference measured in the same
invocation, because absolute times on a shared 2-core box say little on their own.
"""

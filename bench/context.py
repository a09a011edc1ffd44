"""What every benchmark section shares: the Redis, where logs go, the profile, a clean slate.

Each section works under prefixes of its own (`new_prefix`), so sections never see each other's
streams, and every key made under them is deleted at the end, which matters when the benchmark
runs against a Redis the user gave it (--redis-url) rather than its own throwaway server.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio import Redis

from bench.profiles import Profile


@dataclass
class BenchContext:
    redis_url: str
    #: The embedded server's pid (its CPU is reported), None for a server given by URL.
    redis_pid: int | None
    profile: Profile
    log_dir: Path
    redis: Redis
    prefixes: list[str] = field(default_factory=list)
    #: Results one section measured that another needs too (say the 1-worker burst).
    shared: dict[str, object] = field(default_factory=dict)
    #: The quality section (`aeon eval` on its shipped cases): the OpenAI-compatible server and
    #: model (--llm-url, --model), how many cases to run (--quality-cases; None: all), the modes
    #: (--quality-modes), the efforts (--quality-effort; None: the default), plain samples a
    #: case (--quality-k; None: matched to Aeon's spend), where the report is kept after every
    #: case (--quality-results) and the frontier drawn (--quality-plot).
    llm_url: str | None = None
    model: str | None = None
    quality_cases: int | None = None
    quality_modes: list[str] = field(default_factory=lambda: ["checks", "words"])
    quality_effort: list[str] | None = None
    quality_k: int | None = None
    quality_results: Path | None = None
    quality_plot: Path | None = None

    def new_prefix(self, name: str) -> str:
        prefix = f"bench-{name}-{uuid.uuid4().hex[:6]}"
        self.prefixes.append(prefix)
        return prefix

    async def clean(self, prefix: str) -> None:
        """Delete every key under `prefix` (streams, answers, locks, memos)."""
        batch: list[bytes] = []
        async for key in self.redis.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                await self.redis.unlink(*batch)
                batch.clear()
        if batch:
            await self.redis.unlink(*batch)

"""The small models the LLM session shares with a run, kept below both.

The LLM session (llm/) counts a run's tokens into its `Usage` and renders the files a request
attached (`AttachedFile`) and the earlier turns of its conversation (`Turn`); the phases carry
them in their events and the gateways read them from an answer or build them into a request.
Defined here, beside the settings, so that llm/ needs nothing from phases/ and a gateway that
reads an answer loads no pipeline (docs/architecture.md, "Layers"). Only Pydantic and the limits
they hold to are imported.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aeonloop.limits import MAX_FILE_PATH_CHARS, MAX_TOKEN_BUDGET


class Usage(BaseModel):
    """Token usage summed over a run's LLM calls, and what it took to get usable replies."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    #: Part of the counts was not reported by an LLM server (one sent no usage, or no server
    #: was called: the offline and scripted models) and is estimated from text length.
    estimated: bool = False
    #: JSON replies made usable locally (lenient JSON, enum case), without an LLM call.
    local_repairs: int = 0
    #: Repair calls to the LLM (SUPERVISOR_REPAIR_JSON_USER); each is also one of `calls`.
    repair_calls: int = 0
    #: The most tokens (prompt and completion) the run may spend; None: no cap. No call starts
    #: that what is left of it cannot pay for (llm.session).
    token_budget: int | None = Field(None, ge=1, le=MAX_TOKEN_BUDGET)
    #: What the tokens cost by the price table (AEON_PRICES) of the gateway that shows the run
    #: (aeonloop.tenants), in the table's currency; None: no price for the model, or not shown
    #: by a gateway.
    cost: float | None = None
    #: Of `prompt_tokens`, those the servers' prompt caches reused, summed over the calls whose
    #: server reported it (OpenAI, vLLM, llama.cpp's server); None: no call's server reported it
    #: ("not reported", never 0).
    cached_tokens: int | None = Field(None, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        estimated: bool = False,
        cached_tokens: int | None = None,
    ) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.calls += 1
        self.estimated = self.estimated or estimated
        if cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + cached_tokens


class AttachedFile(BaseModel):
    """A file a request attaches as context: the path its sender names it by, and its text.

    Only the request event carries the contents; the run keeps them once, as a record of its
    history (phases.history, written by Phase A's commit), and its later events carry only the
    paths (`RunState.file_paths`)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., min_length=1, max_length=MAX_FILE_PATH_CHARS)
    content: str


class Turn(BaseModel):
    """An earlier turn of the conversation a request continues: who spoke, and what they said.

    Carried like an attached file: only the request event holds the turns; the run keeps them
    once, as a record of its history (phases.history), and its later events carry only how many
    there are (`RunState.turn_count`). The prompts take them as context, oldest first."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str

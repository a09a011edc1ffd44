"""The few Pydantic calls `prompts/` needs, working under Pydantic 1.10 and 2.x.

The contract is docs/requirements.md, FR-014 and FR-014A.

`prompts/` is meant to be usable as a library on its own, including in code bases still on
Pydantic 1, so every version-dependent call goes through here and nowhere else.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

PYDANTIC_V2 = pydantic.VERSION.startswith("2.")

ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_model(model: type[ModelT], data: Any) -> ModelT:
    """Validate plain data into `model`, raising pydantic's ValidationError on mismatch."""
    if PYDANTIC_V2:
        return model.model_validate(data)
    return model.parse_obj(data)


def dump_model(instance: BaseModel) -> dict[str, Any]:
    """Plain-dict form of a model instance."""
    if PYDANTIC_V2:
        return instance.model_dump()
    return instance.dict()


@cache
def model_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """Names of the fields a model declares.

    Each model's once: a class's fields are fixed when it is created, and rendering a prompt asks
    for them on every call.
    """
    if PYDANTIC_V2:
        return tuple(model.model_fields)
    return tuple(model.__fields__)


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """JSON schema of a model, used to tell a model (or a repair prompt) the exact shape."""
    if PYDANTIC_V2:
        return model.model_json_schema()
    return model.schema()


def schema_only(**keywords: Any) -> dict[str, Any]:
    """`Field` keywords that add `keywords` to the field's JSON schema and nothing to its
    validation: what a server that enforces the schema may let a model write (a step id's
    pattern), narrower than what the host accepts from a server that does not."""
    if PYDANTIC_V2:
        return {"json_schema_extra": keywords}
    return dict(keywords)  # Pydantic 1 puts Field's extra keywords in the schema


if PYDANTIC_V2:
    from pydantic import ConfigDict

    class StrictModel(BaseModel):
        """Base for prompt inputs: unknown fields are a caller's typo, so they are refused.

        Frozen, so an instance stays what was validated when it was built (the registry renders
        one of exactly its input model without validating it again).
        """

        model_config = ConfigDict(extra="forbid", frozen=True)

    class LenientModel(BaseModel):
        """Base for prompt outputs: models add chatter fields; the contract is the named ones."""

        model_config = ConfigDict(extra="ignore")

else:  # pragma: no cover - exercised by the Pydantic 1.10 CI run

    class StrictModel(BaseModel):  # type: ignore[no-redef]
        """Base for prompt inputs: unknown fields are a caller's typo, so they are refused.

        Frozen, so an instance stays what was validated when it was built (the registry renders
        one of exactly its input model without validating it again).
        """

        class Config:
            extra = "forbid"
            frozen = True

    class LenientModel(BaseModel):  # type: ignore[no-redef]
        """Base for prompt outputs: models add chatter fields; the contract is the named ones."""

        class Config:
            extra = "ignore"

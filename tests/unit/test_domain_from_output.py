"""Domain models read straight off a validated prompt output (phases B and C).

Phases build these domain models with `model_validate(output, from_attributes=True)`: one
validation, no dict in between. That is the cheap path only while every domain field is an
attribute of the output; a field the output lacks would be looked up, and missed, on every call.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from aeonloop.phases.models import (
    Consistency,
    ConvergenceAssessment,
    CritiqueIssue,
    SemanticValidationReport,
    ValidationIssue,
)
from aeonloop.prompts.registry import (
    ConsistencyOutput,
    ConvergenceAssessmentOutput,
    CritiqueIssueOutput,
    SemanticIssueOutput,
    SemanticValidationOutput,
)

PAIRS = [
    (ConvergenceAssessmentOutput, ConvergenceAssessment),
    (ConsistencyOutput, Consistency),
    (SemanticValidationOutput, SemanticValidationReport),
    (SemanticIssueOutput, ValidationIssue),
    (CritiqueIssueOutput, CritiqueIssue),
]


@pytest.mark.parametrize(("output", "domain"), PAIRS)
def test_every_domain_field_is_an_attribute_of_the_output(
    output: type[BaseModel], domain: type[BaseModel]
) -> None:
    assert set(domain.model_fields) <= set(output.model_fields)


def test_a_domain_model_read_off_the_output_equals_one_validated_from_its_dump() -> None:
    output = ConvergenceAssessmentOutput.model_validate(
        {
            "converged": False,
            "completeness_score": 0.7,
            "coherence_score": 0.8,
            "consistency": {"plan_aligned": True, "step_aligned": True, "answer_aligned": False},
            "reason_codes": ["incomplete"],
            "summary": "s3 is missing",
            "chatter": "ignored by the output model",
        }
    )
    read = ConvergenceAssessment.model_validate(output, from_attributes=True)
    assert read == ConvergenceAssessment.model_validate(output.model_dump())
    assert isinstance(read.consistency, Consistency)

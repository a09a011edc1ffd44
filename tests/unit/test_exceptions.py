"""One exception tree: every error Aeon raises on purpose is an AeonError, defined in
aeonloop.exceptions, caught by branch, and still importable where callers always found it."""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from pathlib import Path

import pytest

from aeonloop import exceptions
from aeonloop.exceptions import (
    AeonError,
    AnswerTimeout,
    BadInput,
    BusError,
    ContextLengthError,
    ForeignEventId,
    HistoryMissing,
    LLMError,
    LLMFailure,
    LLMOutputError,
    LLMUnreachable,
    LocalClusterError,
    LocalRedisError,
    PromptError,
    RedisServerError,
    ReplyError,
    SettingsError,
    TruncatedReply,
    UsageError,
)

ROOT = Path(exceptions.__file__).parent
#: The one exception class that stays in its module: the OpenAI adapter's own retry signal,
#: which never leaves the adapter (it is an LLMError, so it is in the tree all the same).
PRIVATE = {"RetryLater"}


def _package_sources() -> list[Path]:
    """The package's modules: the root's, and those of its subpackages (not bench/, which is
    kept out of the wheel, nor tests/ or anything a build or a venv left here)."""
    return [
        path
        for path in ROOT.rglob("*.py")
        if path.relative_to(ROOT).parts[0] != "bench"
        and all(
            (folder / "__init__.py").is_file()
            for folder in path.parents
            if folder.is_relative_to(ROOT)
        )
    ]


def test_every_class_of_the_tree_is_an_aeon_error() -> None:
    tree = [
        value
        for value in vars(exceptions).values()
        if isinstance(value, type) and value.__module__ == exceptions.__name__
    ]
    assert len(tree) > 20
    assert all(issubclass(cls, AeonError) for cls in tree)


@pytest.mark.parametrize(
    ("cls", "branch", "builtin"),
    [
        (SettingsError, UsageError, ValueError),
        (BadInput, UsageError, ValueError),
        (ForeignEventId, UsageError, ValueError),
        (HistoryMissing, BusError, LookupError),
        (ContextLengthError, LLMError, Exception),
        (LLMOutputError, ReplyError, Exception),
        (TruncatedReply, ReplyError, Exception),
        (RedisServerError, LocalRedisError, RuntimeError),
        (LocalClusterError, LocalRedisError, RuntimeError),
        (AnswerTimeout, AeonError, TimeoutError),
    ],
)
def test_each_class_is_in_its_branch_and_keeps_its_builtin(
    cls: type, branch: type, builtin: type
) -> None:
    assert issubclass(cls, branch) and issubclass(cls, builtin)


def test_an_llm_failure_is_a_failed_call_or_an_unusable_reply_and_nothing_else() -> None:
    """What a phase handler catches to degrade its run: never a prompt defect."""
    assert issubclass(LLMError, LLMFailure) and issubclass(ReplyError, LLMFailure)
    assert not issubclass(PromptError, LLMFailure)
    assert not issubclass(LLMUnreachable, LLMFailure), "the run's time ran out; no call failed"
    assert not issubclass(LLMOutputError, LLMError), "phase E tells the two apart"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("aeonloop.settings", "SettingsError"),
        ("aeonloop.gateway.validation", "BadInput"),
        ("aeonloop.gateway.http.run_feed", "ForeignEventId"),
        ("aeonloop.gateway.http.errors", "ApiError"),
        ("aeonloop.gateway.client", "AnswerTimeout"),
        ("aeonloop.bus.codec", "DecodeError"),
        ("aeonloop.phases.history", "HistoryMissing"),
        ("aeonloop.llm.session", "LLMOutputError"),
        ("aeonloop.llm.reply", "TruncatedReply"),
        ("aeonloop.llm.base", "LLMError"),
        ("aeonloop.llm.base", "ContextLengthError"),
        ("aeonloop.llm.base", "LLMUnreachable"),
        ("aeonloop.llm.base", "LLMNotReady"),
        ("aeonloop.prompts.errors", "PromptError"),
        ("aeonloop.prompts.errors", "JSONExtractionError"),
        ("aeonloop.servers.embedded", "RedisServerError"),
        ("aeonloop.servers.local_cluster", "LocalClusterError"),
    ],
)
def test_each_class_is_still_found_where_it_is_raised(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(exceptions, name)


def test_no_exception_class_is_defined_outside_the_tree() -> None:
    """A module that needs a new error adds it to the tree, in its branch."""
    bases = {name for name, value in vars(exceptions).items() if isinstance(value, type)} | {
        name for name, value in vars(builtins).items() if isinstance(value, type)
    }
    exceptional = {name for name in bases if name.endswith(("Error", "Exception"))} | {
        name
        for name, value in vars(exceptions).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    stray = []
    for path in _package_sources():
        if path == ROOT / "exceptions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name not in PRIVATE:
                names = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                if names & exceptional:
                    stray.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert stray == []


def test_the_tree_imports_only_the_standard_library() -> None:
    """aeonloop.prompts imports its errors from it, and must work under Pydantic 1.10 alone."""
    tree = ast.parse((ROOT / "exceptions.py").read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}

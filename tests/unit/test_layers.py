"""The layers hold (docs/architecture.md, "Layers"), and the architecture's map is the tree.

import-linter checks the contracts written in pyproject.toml ([tool.importlinter]) over the
package as it is installed: a module that imports from a layer above its own, a prompts/ module
that imports more of Aeon than its exceptions, or a cycle between the modules of one package
fails here, naming the import. Another test keeps the contract whole: a new top-level module
or package not placed in a layer would otherwise be checked by no one. The last ones hold
docs/architecture.md's "Layout" table to the tree and its "Layers" table to the contract.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
ARCHITECTURE = REPO / "docs" / "architecture.md"
#: A name in backticks: `bus/`, `keys.py`, `llm/observed.py`.
CODE = re.compile(r"`([^`]+)`")


def _contract(contract_id: str) -> dict:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = (c for c in config["contracts"] if c["id"] == contract_id)
    return contract


def test_import_contracts_are_kept(tmp_path: Path) -> None:
    # The command import-linter documents, run where it leaves no cache behind.
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(linter), str(PYPROJECT), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _top_level() -> set[str]:
    """The package's top modules and subpackages, as the docs name them: `limits.py`, `bus/`."""
    modules = {path.name for path in REPO.glob("*.py") if path.name != "__init__.py"}
    return modules | {f"{path.parent.name}/" for path in REPO.glob("*/__init__.py")}


def _layers() -> list[set[str]]:
    """pyproject's layers, top first, each a set of module names (bench, optional, left out)."""
    layers = [layer for layer in _contract("layers")["layers"] if not layer.startswith("(")]
    return [{name.strip() for name in layer.split("|")} for layer in layers]


def _module_name(shown: str) -> str:
    return shown.removesuffix("/").removesuffix(".py")


def test_every_top_level_module_has_a_layer() -> None:
    named = {name for layer in _layers() for name in layer} | {"bench"}
    assert {_module_name(shown) for shown in _top_level()} == named


def _table(section: str) -> list[tuple[str, str]]:
    """The rows (first cell, second cell) of the first table under `## {section}`."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in body.splitlines() if line.startswith("| ")]
    return [(first.strip(), second.strip()) for first, second in rows[1:]]  # past the header


def test_the_layout_table_is_the_tree() -> None:
    rows = {CODE.fullmatch(first).group(1): second for first, second in _table("Layout")}
    assert set(rows) == _top_level()
    for package, what in rows.items():
        if not package.endswith("/"):
            continue
        folder = REPO / package
        named = set(CODE.findall(what))
        for name in named:
            if "/" in name.rstrip("/") and name.endswith((".py", "/")):
                assert (REPO / name).exists(), f"{package} names {name}, which is not there"
            elif name.endswith((".py", "/")):
                found = list(folder.rglob(name.rstrip("/")))
                assert found, f"{package} names {name}, which is not in {package}"
        for sub in folder.glob("*/__init__.py"):
            assert f"{sub.parent.name}/" in named, f"{package}{sub.parent.name}/ is not named"


def test_the_layers_table_is_the_contract() -> None:
    shown = [
        {_module_name(n) for n in CODE.findall(modules) if n.endswith(("/", ".py"))}
        for _, modules in _table("Layers")
    ]
    assert shown == _layers()


#: What a gateway that submits requests and reads answers must not load: the LLM layer, the
#: phase handlers with what only they run on (their deps, the LLM session, the worker), and
#: the bus's delivery side: the consumer and its parts, the committer, the worker, and the
#: webhooks group (the client checks a webhook URL with webhooks.policy alone).
PIPELINE = (
    "aeonloop.llm",
    *(f"aeonloop.phases.phase_{name}" for name in "abcde"),
    "aeonloop.phases.deps",
    "aeonloop.phases.planning",
    "aeonloop.phases.worker",
    "aeonloop.bus.consumer",
    "aeonloop.bus.locking",
    "aeonloop.bus.recovery",
    "aeonloop.bus.retry",
    "aeonloop.bus.commit",
    "aeonloop.bus.worker",
    "aeonloop.webhooks.delivery",
)


def test_the_client_loads_no_pipeline() -> None:
    """`import aeonloop.gateway.client` in a fresh interpreter loads none of the pipeline: the
    limits it checks come from aeonloop.limits (docs/architecture.md, "Layers")."""
    code = (
        "import sys, aeonloop.gateway.client\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('aeonloop'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = done.stdout.split()
    assert "aeonloop.gateway.client" in loaded
    pipeline = [m for m in loaded if m.startswith(PIPELINE)]
    assert not pipeline, f"importing the client loads {pipeline}"

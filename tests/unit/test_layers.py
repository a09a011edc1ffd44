"""The layers hold (docs/architecture.md, "Layers").

import-linter checks the contracts written in pyproject.toml ([tool.importlinter]) over the
package as it is installed: a module that imports from a layer above its own, a prompts/ module
that imports more of Aeon than its exceptions, or a cycle between the modules of one package
fails here, naming the import. The second test keeps the contract whole: a new top-level module
or package not placed in a layer would otherwise be checked by no one.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"


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


def test_every_top_level_module_has_a_layer() -> None:
    named = {
        name.strip().strip("()")
        for layer in _contract("layers")["layers"]
        for name in layer.split("|")
    }
    modules = {path.stem for path in REPO.glob("*.py") if path.name != "__init__.py"}
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert modules | packages == named


#: What a gateway that submits requests and reads answers must not load: the LLM layer, and
#: the phase handlers with what only they run on (their deps, the LLM session, the worker).
PIPELINE = (
    "aeonloop.llm",
    *(f"aeonloop.phases.phase_{name}" for name in "abcde"),
    "aeonloop.phases.deps",
    "aeonloop.phases.planning",
    "aeonloop.phases.worker",
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

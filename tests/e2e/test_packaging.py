"""The wheel installs one import package, `aeonloop`, and lives beside PyPI's `llm` and `config`.

Before the package had a name of its own it installed eight top-level names (`bus`, `config`,
`llm`, ...): installing it beside the `llm` tool overwrote one with the other, and a folder with
its own `config.py` broke `from gateway.client import AeonClient`. This builds the wheel as a
user's pip would, installs it in a fresh venv with both of those packages, and uses all three.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def source_packages(folder: Path = ROOT, name: str = "aeonloop") -> set[str]:
    """The source tree's packages under their installed names (the repository is `aeonloop`):
    folders holding an `__init__.py`, reached through packages only, bench/ and tests/ aside."""
    found = {name}
    for child in sorted(folder.iterdir()):
        if (child / "__init__.py").is_file() and child.name not in {"bench", "tests"}:
            found |= source_packages(child, f"{name}.{child.name}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT], cwd=out)
    (built,) = out.glob("aeonloop-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/", 1)[0] for name in names if ".dist-info/" not in name}
    assert tops == {"aeonloop"}, tops
    # Every subpackage the source tree has is shipped, and nothing of bench/ or tests/.
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    assert source_packages() == set(packages), "pyproject's packages must list every subpackage"
    assert "aeonloop/prompts/templates/system/" in "".join(names), "prompt templates shipped"
    assert any(n.startswith("aeonloop/gateway/http/static/") for n in names), "run page shipped"
    assert "aeonloop/gateway/quality/cases.jsonl" in names, "aeon eval's shipped cases"
    assert not any(n.startswith(("aeonloop/bench/", "aeonloop/tests/")) for n in names)
    # Nothing stale: every file shipped is a file of the source tree.
    stale = [n for n in names if n.startswith("aeonloop/") and not (ROOT / n[9:]).is_file()]
    assert not stale, f"the wheel ships files the source no longer has: {stale[:5]}"


def test_installed_beside_llm_and_config_all_three_work(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    run([python, "-m", "pip", "install", "-q", wheel, "llm", "config"], cwd=tmp_path)

    # A user's folder with modules of its own named like the old top-level packages.
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.py").write_text("MINE = 'the folder’s own config'\n")
    (work / "llm.py").write_text("MINE = 'the folder’s own llm'\n")
    run([python, "-c", "from aeonloop.gateway.client import AeonClient; print(AeonClient)"], work)
    answer = run([bin_dir / "aeon", "ask", "Explain how tides work"], cwd=work, timeout=120)
    assert answer.strip(), "aeon ask printed no answer"

    # PyPI's packages are untouched by the install, outside that folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(
        [python, "-c", "from config import Config; import io; Config(io.StringIO('a: 1'))"],
        elsewhere,
    )
    assert run([bin_dir / "llm", "--version"], cwd=elsewhere).startswith("llm")

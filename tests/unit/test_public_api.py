"""The public API (docs/public-api.md): what `from aeonloop import ...` offers, kept light and
kept in use.

Every name of `aeonloop.__all__` resolves to the object its module defines; `import aeonloop`
loads no other module of the package (so `import aeonloop.prompts` stays usable on its own);
and the import lines of the README and docs/ name only public names, so what users copy from
them is what they may rely on.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import aeonloop

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
#: An import of Aeon at the start of a line (code blocks and their indented copies).
IMPORT = re.compile(r"^\s*(?:from\s+(aeonloop[\w.]*)\s+import\s+(.+)|import\s+(aeonloop[\w.]*))")


def test_every_public_name_resolves_to_its_definition() -> None:
    public = {name for name in aeonloop.__all__ if name != "__version__"}
    assert public == set(aeonloop._PUBLIC)
    for name in sorted(public):
        module = importlib.import_module(aeonloop._PUBLIC[name])
        assert getattr(aeonloop, name) is getattr(module, name), name
    assert isinstance(aeonloop.__version__, str)


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(aeonloop, "LLMSession")


def test_import_aeonloop_loads_nothing_else() -> None:
    code = (
        "import sys, aeonloop, aeonloop.prompts\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('aeonloop'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["aeonloop", "aeonloop.prompts"]


def _import_lines() -> list[tuple[str, str, str, str]]:
    """(page:line, module, names, line) of every import of Aeon the pages show."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            match = IMPORT.match(line)
            if match:
                module = match.group(1) or match.group(3)
                names = match.group(2) or ""
                if names.strip() == "(":  # a parenthesised list: read to its end
                    end = next(i for i in range(number, len(lines)) if ")" in lines[i])
                    names = ",".join(lines[number : end + 1]).replace(")", "")
                where = f"{page.relative_to(REPO)}:{number}"
                found.append((where, module, names, line))
    return found


def test_the_docs_import_only_public_names() -> None:
    lines = _import_lines()
    assert any(module == "aeonloop" for _, module, _, _ in lines)  # the scan finds the pages'
    public = set(aeonloop.__all__)
    wrong = []
    for where, module, names, line in lines:
        named = {part.split(" as ")[0].strip() for part in names.split(",") if part.strip()}
        if module != "aeonloop" or not named <= public:
            wrong.append(f"{where}: {line.strip()}")
    assert not wrong, "the docs import internal names:\n" + "\n".join(wrong)

"""An executable check: a command run on the output, where an operator allows it.

Only a user's rules file may hold one (the model never writes a command), and it runs only when
an operator sets AEON_ALLOW_EXECUTABLE_CHECKS=1. The command is split with shlex and run without a
shell, in a fresh temporary directory holding the output as `artifact.md`, with the output also on
stdin; exit 0 holds, a timeout fails. A check whose run is cancelled, or whose worker stops, kills
its command: none outlives the check.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from pathlib import Path
from typing import BinaryIO

from aeonloop.checks.running import CheckOutcome
from aeonloop.checks.wording import clip

ARTIFACT_NAME = "artifact.md"
#: Where a detail quotes what the command said, at most this many characters.
_DETAIL_LIMIT = 300
SKIPPED_REASON = (
    "executable checks are disabled; an operator enables them with AEON_ALLOW_EXECUTABLE_CHECKS=1"
)


async def command_outcome(
    command: str, output: str, allow_executable: bool, timeout: float
) -> CheckOutcome:
    """The outcome of an executable check: run only where an operator allows it."""
    if not allow_executable:
        return CheckOutcome(False, SKIPPED_REASON, ran=False)
    return await executable_check(command, output, timeout)


async def executable_check(command: str, output: str, timeout: float) -> CheckOutcome:
    """Run `command` (no shell) with the output on stdin and in ./artifact.md; exit 0 holds."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return CheckOutcome(False, f"command cannot be parsed: {exc}")
    if not argv:
        return CheckOutcome(False, "command is empty")
    with tempfile.TemporaryDirectory(prefix="aeon-check-") as workdir:
        artifact = Path(workdir, ARTIFACT_NAME)
        artifact.write_text(output, encoding="utf-8")
        with artifact.open("rb") as stdin:
            return await _run(argv, stdin, workdir, timeout)


async def _run(argv: list[str], stdin: BinaryIO, workdir: str, timeout: float) -> CheckOutcome:
    """Run the command with `stdin` as a file, not a pipe: a command that exits without
    reading its input (`true`, `grep -q` on ./artifact.md) then cannot make the write fail.
    Under uvloop such a write fails with "unable to perform operation on <WriteUnixTransport
    closed=True>" rather than the BrokenPipeError asyncio's communicate() ignores."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workdir,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return CheckOutcome(False, f"command cannot start: {exc}")
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return CheckOutcome(False, f"timed out after {timeout:g}s")
    except asyncio.CancelledError:  # a cancelled run, a stopping worker: the command goes too
        process.kill()
        raise
    said = clip((err or out).decode(errors="replace").strip(), _DETAIL_LIMIT)
    details = f"exit {process.returncode}" + (f": {said}" if said else "")
    return CheckOutcome(process.returncode == 0, details)

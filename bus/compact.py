"""What a run leaves for readers after it (its stored answer, its records) is kept compressed.

A run's answer key and its history hash outlive the run by AEON_ANSWER_TTL_S, and measured
10.3 KiB a run as JSON (7.3 for the answer, 3.0 for the history): most of the Redis memory a
finished run holds. That JSON repeats field names, the request, step descriptions and prose,
and zlib keeps a third or less of it. A value is stored as `PACKED` then its zlib stream; a
value without that marker is JSON written by an earlier version and is read as it is, so
answers and histories stored before an upgrade stay readable. JSON never starts with a NUL.
"""

from __future__ import annotations

import zlib

#: Marks a compressed value: JSON text cannot start with a NUL byte.
PACKED = b"\x00z"
#: zlib's fastest level. A run's answer as `aeon ask --json` prints it (8,261 bytes) packs to
#: 2,143 bytes at 1 and 1,818 at 6 (its default), in 158 µs against 271: a worker packs each
#: hop's records, and its CPU per run is the scarcer of the two (issue 39): what a finished run
#: holds in Redis went from 5.37 to 5.53 KiB, its target 8 (`python -m bench`, retention).
_LEVEL = 1


def pack(value: bytes) -> bytes:
    """`value` compressed, marked as such."""
    return PACKED + zlib.compress(value, _LEVEL)


def unpack(value: bytes) -> bytes:
    """The JSON `pack` was given, or `value` itself when it was stored uncompressed."""
    if value.startswith(PACKED):
        return zlib.decompress(value[len(PACKED) :])
    return value

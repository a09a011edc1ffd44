"""A gateway process for the end-to-end tests: one AeonClient, many requests in flight at once.

    python tests/e2e/gateway_proc.py --count 30 --timeout 60 --request "Explain tides"

Reads AEON_REDIS_URL and AEON_PREFIX like any Aeon process. Submits `count` requests
concurrently (request i is the text with " (#i)" appended, so runs differ), then waits for
every answer on the same client. Prints one JSON line per happening, flushed at once so a test
can follow it while it runs:

    {"event": "submitted", "i": 0, "cid": "..."}
    {"event": "answered", "cid": "...", "status": "converged", "degraded": false}
    {"event": "timeout", "cid": "...", "message": "no answer for ... within ..."}
    {"event": "done", "answered": 30, "timeouts": 0}

Exit code 0 when every request was answered, 3 when any timed out (as `aeon ask`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from aeonloop.gateway.client import ANSWER_GRACE_S, AeonClient, AnswerTimeout


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def main(args: argparse.Namespace) -> int:
    async with AeonClient() as client:
        cids = await asyncio.gather(
            *(
                client.submit(f"{args.request} (#{i})", timeout=args.timeout)
                for i in range(args.count)
            )
        )
        for i, cid in enumerate(cids):
            emit("submitted", i=i, cid=cid)

        async def wait(cid: str) -> bool:
            try:
                result = await client.wait(cid, args.timeout + ANSWER_GRACE_S)
            except AnswerTimeout as error:
                emit("timeout", cid=cid, message=str(error))
                return False
            emit("answered", cid=cid, status=result.status, degraded=result.degraded)
            return True

        outcomes = await asyncio.gather(*(wait(cid) for cid in cids))
    answered = sum(outcomes)
    emit("done", answered=answered, timeouts=len(cids) - answered)
    return 0 if answered == len(cids) else 3


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=60.0, help="each request's deadline (s)")
    parser.add_argument("--request", default="Explain tides, then summarise them for a child")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))

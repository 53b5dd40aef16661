"""Keeps one command running: starts it again whenever it exits, until told to stop.

    python -m deploy.keep_running --name spark-connect -- <command> [args ...]

The stack starts its Spark Connect server under it. Every run reaches Spark through that one
server, so a server that died (out of memory, killed) would fail every run until somebody
started it again; under this it is back within seconds, on the same port. A command that
exits soon after it started waits longer before each new start (doubling, up to a minute), so
one that cannot start (its port taken, a bad setting) does not spin. SIGTERM or SIGINT stops
the command, then this process: `make stack-down` signals the whole process group.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Callable, Sequence

FIRST_PAUSE_SECONDS = 1.0
LONGEST_PAUSE_SECONDS = 60.0
# A command that ran this long before it exited starts again after the first pause.
HEALTHY_SECONDS = 60.0


def say(name: str, message: str) -> None:
    print(f"[keep_running {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}] {name}: {message}", flush=True)


def next_pause(pause: float, ran_seconds: float) -> float:
    """The pause before the start after next: back to the first after a healthy run, else doubled."""
    return FIRST_PAUSE_SECONDS if ran_seconds >= HEALTHY_SECONDS else min(pause * 2, LONGEST_PAUSE_SECONDS)


def keep_running(command: Sequence[str], name: str, *, sleep: Callable[[float], None] = time.sleep,
                 max_starts: int | None = None) -> int:
    """Run `command` again each time it exits, until SIGTERM or SIGINT (or `max_starts` starts,
    for tests); returns the command's last exit code."""
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    pause, starts, code = FIRST_PAUSE_SECONDS, 0, 0
    try:
        while True:
            started = time.monotonic()
            child = subprocess.Popen(command)  # same process group: a signal to the group reaches both
            starts += 1
            say(name, f"started (pid {child.pid}, start {starts})")
            code = child.wait()
            if stopping or starts == max_starts:
                break
            ran = time.monotonic() - started
            say(name, f"exited with code {code} after {ran:.0f} s; starting it again in {pause:.0f} s")
            sleep(pause)
            if stopping:
                break
            pause = next_pause(pause, ran)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="what the command is, in the log lines")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to keep running: give it after --")
    return keep_running(command, args.name)


if __name__ == "__main__":
    sys.exit(main())

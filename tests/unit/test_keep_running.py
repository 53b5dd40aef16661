"""deploy/keep_running.py, which the stack starts its Spark Connect server under: a command that
dies is started again, after a pause that grows while it keeps dying soon; a signal stops both."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deploy.keep_running import FIRST_PAUSE_SECONDS, HEALTHY_SECONDS, LONGEST_PAUSE_SECONDS, keep_running, next_pause

REPO = Path(__file__).resolve().parents[2]


def test_a_command_that_exits_is_started_again_after_growing_pauses(tmp_path):
    starts, pauses = tmp_path / "starts", []
    command = [sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"]
    handler = signal.getsignal(signal.SIGTERM)

    code = keep_running(command, "failing", sleep=pauses.append, max_starts=4)

    assert starts.read_text() == "xxxx" and code == 3
    assert pauses == [FIRST_PAUSE_SECONDS, 2 * FIRST_PAUSE_SECONDS, 4 * FIRST_PAUSE_SECONDS]
    assert signal.getsignal(signal.SIGTERM) == handler  # the caller's handlers again


def test_the_pause_is_capped_and_starts_over_after_a_healthy_run():
    assert next_pause(LONGEST_PAUSE_SECONDS, ran_seconds=1) == LONGEST_PAUSE_SECONDS
    assert next_pause(8.0, ran_seconds=HEALTHY_SECONDS) == FIRST_PAUSE_SECONDS


def _pids(path: Path, count: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        if len(pids) >= count:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"the command did not start {count} time(s) within {timeout} s")


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_killed_command_comes_back_and_a_signal_stops_both(tmp_path):
    pids = tmp_path / "pids"
    server = f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}} '); time.sleep(300)"
    supervisor = subprocess.Popen([sys.executable, "-m", "deploy.keep_running", "--name", "server", "--",
                                   sys.executable, "-c", server], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        first = _pids(pids, 1)[0]
        os.kill(first, signal.SIGKILL)  # the server dies; its supervisor does not
        second = _pids(pids, 2)[1]
        assert second != first and supervisor.poll() is None

        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=30)
        assert _gone(second), "the command outlived its supervisor"
        assert len(_pids(pids, 2)) == 2  # not started again after the signal
        log = supervisor.stdout.read()
        assert "server: exited with code -9" in log and "starting it again in 1 s" in log
    finally:
        if supervisor.poll() is None:
            supervisor.kill()

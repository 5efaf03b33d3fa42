

def wait_for(pred, timeout: float = 30.0, step: float = 0.05, what: str = "condition"):
    """Poll `pred` until it returns something true (returned), or fail after `timeout` s."""
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until(check, timeout: float = 60.0) -> bool:
    """Whether `check` came true within `timeout` s (for an assert with a message of its own)."""
    try:
        return bool(wait_for(check, timeout))
    except AssertionError:
        return bool(check())


def mentions_code(text: str, code: str) -> bool:
    """True when `code` appears as a number of its own in `text`: not as the tail of a
    timestamp's microseconds ("…:07.514711+00:00") or a piece of a uuid, which made a bare
    `"4711" in dump` fail by chance."""
    import re
    return re.search(rf"(?<![\w.:-]){re.escape(code)}(?![\w-])", text) is not None


def kill_worker_and_its_log(plugin) -> None:
    """SIGKILL the worker, then delete Kuzu's log: a log no replay could read (Kuzu 0.11.3 can
    crash replaying a killed worker's log, and what it cannot replay is lost)."""
    import os
    import signal
    import time
    pid = plugin.client.status()["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            time.sleep(0.05)
        except ProcessLookupError:
            break
    for wal in plugin.banks_dir().rglob("graph.kuzu.wal"):
        wal.unlink()


def backlog(queue, n: int) -> list[str]:
    """n turns handed over while the queue is paused: a backlog, batched when it resumes."""
    from memoryplus.wire.records import Turn
    queue.pause("test: a backlog")
    for i in range(n):
        queue.put("default", Turn(id=f"b{i}", user=f"My colleague Worker{i} plays the tuba.", assistant="Noted."))
    assert queue.wait_spooled(5)
    return [f"Worker{i} plays the tuba" for i in range(n)]

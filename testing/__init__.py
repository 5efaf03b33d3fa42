

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


def mentions_code(text: str, code: str) -> bool:
    """True when `code` appears as a number of its own in `text`: not as the tail of a
    timestamp's microseconds ("…:07.514711+00:00") or a piece of a uuid, which made a bare
    `"4711" in dump` fail by chance."""
    import re
    return re.search(rf"(?<![\w.:-]){re.escape(code)}(?![\w-])", text) is not None



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

"""The Streamable HTTP transport: on 127.0.0.1 only, every request with the bearer token, and
the SDK's DNS-rebinding protection (a foreign Host or Origin header is refused), so that a web
page the user visits cannot reach the memory through the browser.

The token comes from the environment (MEMORYPLUS_MCP_TOKEN) or a file (--token-file), never
from argv; without either, one is made and kept in the data directory (0600).
"""
from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from mcp.server.transport_security import TransportSecuritySettings

TOKEN_ENV = "MEMORYPLUS_MCP_TOKEN"
TOKEN_FILE = "mcp_token"
HOST = "127.0.0.1"


def security() -> TransportSecuritySettings:
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{HOST}:*", "localhost:*"],
        allowed_origins=[f"http://{HOST}:*", "http://localhost:*"])


def token(data_dir: Path, token_file: str | None) -> tuple[str, str]:
    """(the token, where it came from, for the user: never the token itself)."""
    value = os.environ.get(TOKEN_ENV, "").strip()
    if value:
        return value, f"the {TOKEN_ENV} environment variable"
    path = Path(token_file).expanduser() if token_file else Path(data_dir) / TOKEN_FILE
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if token_file:
            raise ValueError(f"no token file {path}") from None
        value = ""
    if not value:
        value = secrets.token_urlsafe(32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(value + "\n")
    return value, str(path)


class BearerToken:
    """ASGI middleware: HTTP requests without `Authorization: Bearer <token>` get 401 (the
    lifespan messages pass, so the SDK's session manager starts and stops)."""

    def __init__(self, app, expected: str):
        self.app, self.expected = app, ("Bearer " + expected).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error": "a bearer token is required (Authorization: Bearer ...)"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve(mcp, expected: str, port: int) -> None:
    import uvicorn
    app = BearerToken(mcp.streamable_http_app(), expected)
    config = uvicorn.Config(app, host=HOST, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()

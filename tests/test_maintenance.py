"""docs/maintenance.md's procedures: token rotation, backup and restore (Kubernetes:
tests/test_kubernetes.py)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import redis

from router import create_app
from tests.conftest import OPERATOR, auth
from tests.servers import OwnRedis, wait_for


def _line(name: str, token: str, scope: str) -> str:
    return f"{name}=sha256:{hashlib.sha256(token.encode()).hexdigest()}:{scope}\n"


def test_a_token_rotates_without_a_restart(redis_url: str, tmp_path: Path) -> None:
    """Add the new token to the file, move callers, remove the old: both work between, no restart."""
    tokens = tmp_path / "tokens"
    tokens.write_text(_line("ops", OPERATOR, "operator") + _line("agents", "old-secret", "caller"))
    app = create_app({"redis_url": redis_url, "tokens_file": str(tokens), "testing": True})
    client = app.test_client()
    try:
        def status(token: str) -> int:
            return client.get("/v1/bindings", headers=auth(token)).status_code

        assert (status("old-secret"), status("new-secret")) == (200, 401)
        tokens.write_text(tokens.read_text() + _line("agents-2", "new-secret", "caller"))
        wait_for(lambda: status("new-secret") == 200 or None, 10, "the new token")
        assert status("old-secret") == 200  # both work while callers move over
        tokens.write_text(_line("ops", OPERATOR, "operator")
                          + _line("agents-2", "new-secret", "caller"))
        wait_for(lambda: status("old-secret") == 401 or None, 10, "the old token's removal")
        assert status("new-secret") == 200
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_an_rdb_backup_restores_bindings_and_history() -> None:
    """SAVE, copy dump.rdb into a new server's directory: the table and its history come back."""
    source, restored = OwnRedis(persist=False), OwnRedis(persist=False)
    source.start()
    try:
        app = create_app({"redis_url": source.url, "tokens": f"{OPERATOR}:operator",
                          "testing": True})
        client = app.test_client()
        put = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
                         json={"current": "sum-v1", "candidate": "sum-v2"})
        assert put.status_code == 201
        moved = client.post("/v1/bindings/summarizer/promote", headers={
            **auth(OPERATOR), "If-Match": "1"}, json={"reason": "shadow first"})
        assert moved.status_code == 200, moved.json
        before = client.get("/v1/bindings/summarizer/history", headers=auth(OPERATOR)).json
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
        # The procedure: BGSAVE (SAVE here, to wait for it), then copy the file.
        admin = redis.Redis.from_url(source.url)
        admin.save()
        backup = Path(source.dir.name) / "dump.rdb"
        admin.close()
        shutil.copy(backup, Path(restored.dir.name) / "dump.rdb")
        restored.start()
        again = create_app({"redis_url": restored.url, "tokens": f"{OPERATOR}:operator",
                            "testing": True})
        try:
            view = again.test_client()
            binding = view.get("/v1/bindings/summarizer", headers=auth(OPERATOR)).json
            assert binding["version"] == 2 and binding["binding"]["stage"] == "shadow"
            assert view.get("/v1/bindings/summarizer/history",
                            headers=auth(OPERATOR)).json == before
        finally:
            again.extensions["rolegate"].cache.stop()
            again.extensions["rolegate"].redis.close()
    finally:
        source.close()
        restored.close()

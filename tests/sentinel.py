"""A real Sentinel deployment on loopback for tests: a primary, replicas, three Sentinels.

All from the redis-server (or bundled valkey-server) binary, each in a temp
dir; the Sentinels watch the primary under the name `MASTER_NAME` and fail over
one second after it stops answering. Two replicas by default: with
ROLEGATE_MIN_REPLICAS=1, one replica must still be there to confirm writes
after the other was promoted. `kill_primary()` kills it outright
(SIGKILL, as a crash would), `restart_old_primary()` brings it back, and the
Sentinels then turn it into a replica of the new primary.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from router.server.embedded import valkey_executable
from tests.servers import free_port, wait_for

MASTER_NAME = "rolegate"
#: How long the Sentinels wait for an answer before calling the primary down.
DOWN_AFTER_MS = 1000


class _Node:
    """One server process (data node or Sentinel) with its port and directory."""

    def __init__(self, executable: str, root: Path, name: str) -> None:
        self.executable = executable
        self.port = free_port()
        self.dir = root / name
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, *args: str) -> None:
        self.proc = subprocess.Popen([self.executable, *args], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            wait_for(lambda: _pings(client), 20, f"server on {self.port}")
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


class OwnSentinels:
    """A primary, `replicas` replicas and three Sentinels, all on free loopback ports."""

    def __init__(self, replicas: int = 2) -> None:
        executable = shutil.which("redis-server") or valkey_executable()
        self._tmp = tempfile.TemporaryDirectory(prefix="rolegate-sentinel-")
        root = Path(self._tmp.name)
        self.primary = _Node(executable, root, "primary")
        self.replicas = [_Node(executable, root, f"replica-{i}") for i in range(replicas)]
        self.sentinels = [_Node(executable, root, f"sentinel-{i}") for i in range(3)]

    @property
    def sentinel_addresses(self) -> str:
        """The REDIS_SENTINELS value: host:port of each Sentinel."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def _data_args(self, node: _Node) -> list[str]:
        return ["--port", str(node.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(node.dir)]

    def start(self) -> None:
        """Start the primary, its replicas (in sync), then the Sentinels (each sees all)."""
        self.primary.run(*self._data_args(self.primary))
        for replica in self.replicas:
            replica.run(*self._data_args(replica),
                        "--replicaof", "127.0.0.1", str(self.primary.port))
        primary = redis.Redis(port=self.primary.port)
        try:
            wait_for(lambda: _online_replicas(primary) == len(self.replicas), 90,
                     "the replicas to finish their first sync")
        finally:
            primary.close()
        for sentinel in self.sentinels:
            conf = sentinel.dir / "sentinel.conf"
            conf.write_text(
                f"port {sentinel.port}\nbind 127.0.0.1\ndir {sentinel.dir}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} 5000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n")
            sentinel.run(str(conf), "--sentinel")
        wait_for(lambda: all(self._sentinel_knows(s, replicas=len(self.replicas), sentinels=2)
                             for s in self.sentinels), 90,
                 "every Sentinel to see the replica and the other Sentinels", interval=0.1)

    def _sentinel_knows(self, sentinel: _Node, *, replicas: int, sentinels: int) -> bool:
        client = redis.Redis(port=sentinel.port, socket_connect_timeout=0.5, decode_responses=True)
        try:
            state = client.execute_command("SENTINEL", "MASTER", MASTER_NAME)
            if isinstance(state, list):
                state = dict(zip(state[::2], state[1::2]))
            return (int(state["num-slaves"]) >= replicas
                    and int(state["num-other-sentinels"]) >= sentinels)
        except redis.RedisError:
            return False
        finally:
            client.close()

    def primary_port(self) -> int | None:
        """The primary's port as the first answering Sentinel reports it."""
        for sentinel in self.sentinels:
            client = redis.Redis(port=sentinel.port, socket_connect_timeout=0.5)
            try:
                address = client.execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                return int(address[1])
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def kill_primary(self) -> None:
        """Kill the primary outright (SIGKILL): what a crash looks like to the others."""
        self.primary.kill()

    def restart_old_primary(self) -> None:
        """Start the killed primary again on its port and data; the Sentinels demote it."""
        self.primary.run(*self._data_args(self.primary))

    def close(self) -> None:
        """Stop everything and remove the directories."""
        for node in (*self.sentinels, *self.replicas, self.primary):
            node.stop()
        self._tmp.cleanup()


def _online_replicas(primary: redis.Redis) -> int:
    # A replica counts in connected_slaves while its first sync is still running;
    # only state=online ones acknowledge WAIT.
    info = primary.info("replication")
    return sum(1 for key, value in info.items()
               if key.startswith("slave") and isinstance(value, dict)
               and value.get("state") == "online")


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False

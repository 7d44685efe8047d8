"""A real Redis Cluster on loopback for tests: three masters, no replicas, temp dirs.

Started from the same redis-server (or bundled valkey-server) binary as
`tests.servers.OwnRedis`, wired by hand (CLUSTER ADDSLOTS, CLUSTER MEET) so it
needs no redis-cli. Each node's cluster bus listens on its port + 10000, so
ports are drawn below 45000 with both the port and its bus port free.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
from functools import partial
from pathlib import Path

import redis
from redis.cluster import RedisCluster

from router.server.embedded import valkey_executable
from tests.servers import wait_for

SLOTS = 16384
#: The cluster bus is port + 10000; stay well under 65535 and the ephemeral range.
_PORT_RANGE = (21000, 44000)


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_ports(count: int) -> list[int]:
    """`count` ports whose bus ports (port + 10000) are free as well."""
    found: list[int] = []
    while len(found) < count:
        port = random.randrange(*_PORT_RANGE)
        if port not in found and _free(port) and _free(port + 10000):
            found.append(port)
    return found


def slot_ranges(masters: int) -> list[range]:
    """The 16384 hash slots split into `masters` contiguous ranges."""
    step = -(-SLOTS // masters)
    return [range(start, min(start + step, SLOTS)) for start in range(0, SLOTS, step)]


class OwnCluster:
    """Three (or `masters`) redis-server nodes in cluster mode, each in its own temp dir."""

    def __init__(self, masters: int = 3) -> None:
        self.executable = shutil.which("redis-server") or valkey_executable()
        self.ports = cluster_ports(masters)
        self.dir = tempfile.TemporaryDirectory(prefix="rolegate-cluster-")
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """A redis:// URL of one node: all rolegate is ever told about a cluster."""
        return f"redis://127.0.0.1:{self.ports[0]}"

    def node(self, index: int) -> redis.Redis:
        """A plain (non-cluster) client on one node, for setup and inspection."""
        return redis.Redis(port=self.ports[index], socket_connect_timeout=1.0)

    def _start_node(self, port: int) -> None:
        """Start one cluster-mode node on `port`, in a directory of its own."""
        node_dir = Path(self.dir.name) / str(port)
        node_dir.mkdir()
        self.procs.append(subprocess.Popen(
            [self.executable, "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no",
             "--dir", str(node_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))

    def start(self) -> None:
        """Start every node, assign the slots, introduce the nodes, wait for state ok."""
        for port in self.ports:
            self._start_node(port)
        clients = [self.node(i) for i in range(len(self.ports))]
        try:
            for port, client in zip(self.ports, clients):
                wait_for(partial(_pings, client), 10, f"cluster node on {port}")
            for client, slots in zip(clients, slot_ranges(len(self.ports))):
                client.execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER ADDSLOTS", *slots)
            for port in self.ports[1:]:
                clients[0].execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER MEET", "127.0.0.1", port)
            for port, client in zip(self.ports, clients):
                wait_for(partial(_cluster_ok, client, len(self.ports)), 20,
                         f"cluster state ok on node {port}", interval=0.05)
        finally:
            for client in clients:
                client.close()

    def add_replica(self, of: int) -> int:
        """Start one more node as a replica of master `of`, in sync; its index in `ports`."""
        port = cluster_ports(1)[0]
        self._start_node(port)
        self.ports.append(port)
        replica, master = self.node(len(self.ports) - 1), self.node(of)
        try:
            wait_for(partial(_pings, replica), 10, f"cluster node on {port}")
            replica.execute_command(  # type: ignore[no-untyped-call]
                "CLUSTER MEET", "127.0.0.1", self.ports[of])
            master_id = master.execute_command("CLUSTER MYID")  # type: ignore[no-untyped-call]
            master_id = master_id.decode() if isinstance(master_id, bytes) else master_id

            def replicating() -> bool | None:
                try:
                    replica.execute_command(  # type: ignore[no-untyped-call]
                        "CLUSTER REPLICATE", master_id)
                except redis.ResponseError:
                    return None  # the replica does not know the master yet
                return True

            wait_for(replicating, 20, f"node {port} to replicate master {of}", interval=0.05)
            wait_for(lambda: replica.info("replication").get("master_link_status") == "up"
                     or None, 20, f"replica {port} in sync", interval=0.05)
        finally:
            replica.close()
            master.close()
        return len(self.ports) - 1

    def flush(self) -> None:
        """Empty every master (a cluster we started ourselves, never someone else's)."""
        for index in range(len(self.ports)):
            client = self.node(index)
            try:
                client.flushdb()  # a cluster node has only database 0
                client.script_flush()
            finally:
                client.close()

    def keys_per_master(self) -> list[int]:
        """How many keys each master holds (DBSIZE on each)."""
        counts = []
        for index in range(len(self.ports)):
            client = self.node(index)
            try:
                counts.append(int(client.dbsize()))
            finally:
                client.close()
        return counts

    def close(self) -> None:
        """Stop every node and remove their directories."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs = []
        self.dir.cleanup()


def close_client(client: object) -> None:
    """Close a client; for a cluster client, every node's pool too.

    RedisCluster.close() leaves sockets open in its node pools (a ResourceWarning,
    an error under filterwarnings=error, whenever the garbage collector finds them).
    """
    if isinstance(client, RedisCluster):
        for node in client.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()
    close = getattr(client, "close", None)
    if close is not None:
        close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _cluster_ok(client: redis.Redis, masters: int) -> bool:
    info = client.cluster("INFO")
    if isinstance(info, (bytes, str)):  # pragma: no cover - depends on redis-py's parser
        text = info.decode() if isinstance(info, bytes) else info
        info = dict(line.split(":", 1) for line in text.split() if ":" in line)
    state = str(info.get("cluster_state", ""))
    known = int(info.get("cluster_known_nodes", 0))
    return state == "ok" and known == masters and _sees_all_slots(client, masters)


def _sees_all_slots(client: redis.Redis, masters: int) -> bool:
    # cluster_state ok only says this node's slots are covered as it sees them;
    # wait until it also knows who serves every range, or the first MOVED races.
    slots = client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
    return len(slots) == masters


def started_cluster() -> OwnCluster:
    """A started three-master cluster (closed by the caller)."""
    cluster = OwnCluster()
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster

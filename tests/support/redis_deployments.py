"""Real Redis deployments on loopback for the HA tests: a Sentinel group (1 master,
1 replica, 3 sentinels) and a 3-master Cluster.
Each process is a real `redis-server` with its own directory."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bot.ops.embedded_redis import find_server_binary, free_port

MASTER_NAME = "approvals-master"


def _wait_ping(port: int, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered PING on port {port}")


@dataclass
class SentinelGroup:
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sentinel-")))
    master_port: int = 0
    replica_port: int = 0
    sentinel_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, args: list[str]) -> None:
        self.procs.append(
            subprocess.Popen(
                [find_server_binary(), *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    def start(self) -> SentinelGroup:
        self.master_port, self.replica_port = free_port(), free_port()
        follow = ["--replicaof", "127.0.0.1", str(self.master_port)]
        for port, extra in ((self.master_port, []), (self.replica_port, follow)):
            d = self.directory / str(port)
            d.mkdir()
            self._spawn(
                ["--bind", "127.0.0.1", "--port", str(port), "--dir", str(d), "--save", "",
                 "--appendonly", "yes", "--protected-mode", "no", *extra]
            )  # fmt: skip
            _wait_ping(port)
        self.wait_replicated()
        for _ in range(3):
            port = free_port()
            conf = self.directory / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.directory}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 5000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self._spawn([str(conf), "--sentinel"])
            self.sentinel_ports.append(port)
            _wait_ping(port)
        self.wait_sentinels_agree()
        return self

    def wait_replicated(self, deadline: float = 10.0) -> None:
        end = time.monotonic() + deadline
        replica = redis.Redis(port=self.replica_port)
        try:
            while time.monotonic() < end:
                if replica.info("replication").get("master_link_status") == "up":
                    return
                time.sleep(0.05)
        finally:
            replica.close()
        raise RuntimeError("the replica never synced")

    def wait_sentinels_agree(self, deadline: float = 15.0) -> None:
        """Every sentinel knows the replica and the other sentinels."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            ready = 0
            for port in self.sentinel_ports:
                s = redis.Redis(port=port, decode_responses=True)
                try:
                    info = s.sentinel_master(MASTER_NAME)
                    if int(info["num-slaves"]) >= 1 and int(info["num-other-sentinels"]) >= 2:
                        ready += 1
                finally:
                    s.close()
            if ready == len(self.sentinel_ports):
                return
            time.sleep(0.1)
        raise RuntimeError("the sentinels never saw each other and the replica")

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def master(self) -> int:
        s = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        try:
            _, port = s.sentinel_get_master_addr_by_name(MASTER_NAME)
            return int(port)
        finally:
            s.close()

    def failover(self, deadline: float = 20.0) -> int:
        """`SENTINEL FAILOVER`: the replica becomes master; returns the new master's port
        once every sentinel names it and it accepts writes."""
        old = self.master()
        s = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        try:
            s.execute_command("SENTINEL", "FAILOVER", MASTER_NAME)
        finally:
            s.close()
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            ports = set()
            for port in self.sentinel_ports:
                c = redis.Redis(port=port, decode_responses=True)
                try:
                    ports.add(int(c.sentinel_get_master_addr_by_name(MASTER_NAME)[1]))
                finally:
                    c.close()
            if len(ports) == 1 and old not in ports:
                new = ports.pop()
                m = redis.Redis(port=new, decode_responses=True)
                try:
                    if m.info("replication")["role"] == "master":
                        return new
                finally:
                    m.close()
            time.sleep(0.1)
        raise RuntimeError("the failover did not complete")

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too and below 65536."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 55000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class Cluster:
    """Three masters, no replicas (`redis-cli --cluster create`)."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cluster-")))
    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> Cluster:
        for _ in range(3):
            port = cluster_port()
            d = self.directory / str(port)
            d.mkdir()
            self.procs.append(
                subprocess.Popen(
                    [find_server_binary(), "--bind", "127.0.0.1", "--port", str(port),
                     "--dir", str(d), "--save", "", "--appendonly", "no",
                     "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "2000", "--protected-mode", "no"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
            self.ports.append(port)
            _wait_ping(port)
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is needed to create the cluster")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        end = time.monotonic() + 20
        while time.monotonic() < end:
            states = []
            for port in self.ports:
                c = redis.Redis(port=port, decode_responses=True)
                try:
                    info = c.execute_command("CLUSTER", "INFO")
                    states.append("cluster_state:ok" in str(info))
                finally:
                    c.close()
            if all(states):
                return self
            time.sleep(0.1)
        raise RuntimeError("the cluster never reached state ok")

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

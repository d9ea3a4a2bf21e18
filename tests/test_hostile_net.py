"""Issue 13, defect 2: nothing of a `--nproc` run listens outside this host.

The workers of a real `launch` (what `fleetgnn train --nproc 2` calls) list, once the process
group is up, every listening TCP socket of the launcher (the elastic agent, which hosts the
rendezvous store) and of its children (the workers: rank 0's process-group store, gloo), read
from /proc: each must be bound to a loopback address. Ports are the OS's picks; no sleeps.
"""

from __future__ import annotations

import ipaddress
import os
import sys

import pytest

from fleetgnn.distributed import destroy, init, launch
from fleetgnn.distributed.context import is_loopback, loopback_tcp_store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads sockets from /proc"
)


def _decode(hex_addr: str) -> str:
    """``0100007F:1F90`` (tcp) or 32 hex digits + port (tcp6) -> the IP address."""
    host = hex_addr.split(":")[0]
    raw = bytes.fromhex(host)
    # the kernel prints each 32-bit word in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[len("socket:[") : -1])
    return out


def _children(pid: int) -> set[int]:
    kids: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids |= {int(c) for c in f.read().split()}
        except OSError:
            continue
    return kids


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every listening TCP socket of ``pids``."""
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in owner:  # state 0A = LISTEN
                port = int(fields[1].split(":")[1], 16)
                found.append((owner[fields[9]], _decode(fields[1]), port))
    return found


def _report_sockets() -> tuple[int, str, list[tuple[int, str, int]]]:
    ctx = init(timeout_s=60)
    comm = ctx.communicator()
    comm.barrier()  # the group is connected on every rank
    launcher = os.getppid()
    pids = {launcher, *_children(launcher)}
    found = listening(pids)
    comm.barrier()  # nobody leaves (closing its sockets) before every rank has looked
    addr = os.environ.get("MASTER_ADDR", "")
    destroy(ctx)
    return ctx.rank, addr, found


@pytest.mark.slow
def test_nproc_run_listens_on_loopback_only():
    out = launch(_report_sockets, nproc=2)
    assert sorted(out) == [0, 1]
    for rank, master_addr, found in out.values():
        assert master_addr == "127.0.0.1", f"rank {rank}: MASTER_ADDR={master_addr}"
        assert found, f"rank {rank} saw no listening socket at all: the probe is broken"
        outside = [s for s in found if not ipaddress.ip_address(s[1]).is_loopback]
        assert not outside, f"rank {rank}: sockets listening beyond loopback: {outside}"


def test_loopback_store_server_binds_loopback_only():
    store = loopback_tcp_store("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    found = [s for s in listening({os.getpid()}) if s[2] == store.port]
    assert found == [(os.getpid(), "127.0.0.1", store.port)]
    client = loopback_tcp_store("127.0.0.1", store.port, is_master=False)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("10.0.0.1") and not is_loopback("0.0.0.0") and not is_loopback("host")

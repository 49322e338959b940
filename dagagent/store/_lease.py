"""Who holds a running run: its process, named so that another process can tell whether it
still runs, even from another container sharing the store.

A run's row names its process by its pid, which says nothing outside the process's own PID
namespace: a run started in a container sharing the project's ``.dagagent/`` looked dead
from the host (no such pid), and a ``resume`` there ran its tasks beside it. So a running
run's row also says **where** its process runs (:func:`here`: the machine's boot and its PID
namespace) and holds a **lease** (``lease_until``) that the run's record writer renews every
:data:`HEARTBEAT_S` while the run lasts. Another process takes the run for dead
(``interrupted``, which a resume may claim) only when it can see that it is:

- from the same machine and PID namespace, when its pid no longer exists;
- from anywhere else, when its lease lapsed (not renewed for :data:`LEASE_S`).

A row recorded before leases existed (store schema 10 and older) has neither: its pid is all
there is, as before.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
import uuid

__all__ = ["HEARTBEAT_S", "LEASE_S", "effective_status", "here", "lease_note", "pid_alive"]

#: How often a running run's record writer renews its lease.
HEARTBEAT_S = 5.0
#: How long a lease lasts from its last renewal: six heartbeats missed in a row.
LEASE_S = 30.0


@functools.cache
def here() -> str:
    """Where this process runs, as far as a pid means anything: on Linux, the machine's boot
    id and this process's PID namespace (two containers of one machine differ in the
    latter); elsewhere, the host name (no PID namespaces there). When Linux does not say, a
    name of this process alone: its pid is then never trusted by another process."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                boot = f.read().strip()
            namespace = os.readlink("/proc/self/ns/pid")  # 'pid:[4026531836]'
        except OSError:
            return f"unknown:{uuid.uuid4().hex}"
        return f"{boot}/{namespace}"
    return f"host:{socket.gethostname()}"


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` of this PID namespace exists (``True`` when that cannot be
    told: no pid, or Windows, which has no cheap and safe check)."""
    if pid is None or os.name == "nt":
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


def effective_status(
    status: str,
    pid: int | None,
    owner: str | None = None,
    lease_until: float | None = None,
    *,
    now: float | None = None,
) -> str:
    """A recorded status (of a run or a solve) as it stands now: ``running`` whose process
    is known to be gone is ``interrupted`` (see the module's docstring); when that cannot be
    known, it is still ``running``."""
    if status != "running":
        return status
    if (owner is None and lease_until is None) or owner == here():
        return status if pid_alive(pid) else "interrupted"
    if lease_until is not None and lease_until > (time.time() if now is None else now):
        return status
    return "interrupted"


def lease_note(owner: str | None, lease_until: float | None) -> str:
    """How a running run's holder is known, for a message: ``''`` for this machine's own
    processes, else when its lease lapses unless renewed."""
    if owner is None or owner == here() or lease_until is None:
        return ""
    when = time.strftime("%H:%M:%S", time.localtime(lease_until))
    return (
        f", in another container or on another host: it renews its lease while it runs, and "
        f"is taken for interrupted only once that lapses (not renewed by {when})"
    )

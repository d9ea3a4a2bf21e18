"""Run a function on N local worker processes through torch's elastic launcher.

:func:`launch` is what ``fleetgnn train --nproc N`` calls: it starts ``torch.distributed``'s
elastic agent in this process (``torch.distributed.launcher.api.elastic_launch``, the machinery
behind ``torchrun``) with a c10d rendezvous on loopback, and the agent spawns the workers, sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (so
:func:`fleetgnn.distributed.init` works in them unchanged), restarts the whole group up to
``max_restarts`` times when a worker fails, and collects return values. The rendezvous endpoint is
``127.0.0.1:0``: the store binds a port the OS picks (what ``torchrun --standalone`` does), so
there is no fixed port and no race for a port found free earlier.

Nothing listens outside this host: the agent's rendezvous store and rank 0's process-group store
are bound to ``127.0.0.1`` (a plain ``TCPStore`` listens on every interface, and its clients are
unauthenticated and exchange pickled objects; see
:func:`~fleetgnn.distributed.context.loopback_tcp_store`), ``MASTER_ADDR`` is ``127.0.0.1``, and
gloo (and NCCL's bootstrap) use the loopback interface unless ``GLOO_SOCKET_IFNAME``
(``NCCL_SOCKET_IFNAME``) says otherwise.

Reporting: a worker's :class:`~fleetgnn.errors.FleetgnnError` comes back as its one-line message
(:class:`WorkerFailed`); Ctrl-C (SIGINT to the launcher, or to the whole process group from a
terminal) stops every worker quietly and raises :class:`KeyboardInterrupt` in the caller instead
of torch elastic's ``SignalException``; a restarted group learns which ranks failed and why from
:func:`restart_info`. A worker killed by SIGKILL (no error record) is said to be out of memory
only when the kernel counted an OOM kill during the launch (:func:`oom_kills`: this cgroup's
``oom_kill`` counter before and after the launch, else the machine's in ``/proc/vmstat``; never
the kernel log): ``killed by SIGKILL (exit -9): out of memory (the kernel's OOM killer killed 1
process in this cgroup during the run)``; with no OOM kill counted the line says it was not the
OOM killer, and with no readable count that it may have been either.

Start-up: a worker is *ready* once its process has started and loaded torch and the function it
runs (it marks a file in the launch's temporary directory, :data:`READY_DIR_ENV`). With
``on_progress``, a start that takes longer than :data:`PROGRESS_AFTER_S` reports ``12 of 16
workers ready (9 s)`` as workers become ready, and a start that has not finished within
``start_timeout`` seconds (:func:`start_timeout`: more when workers outnumber cores) stops
the workers and raises :class:`WorkerStartTimeout`, one line. :func:`oversubscription` is the
line a caller prints first when the workers outnumber the CPU cores (``cpu``) or GPUs (``cuda``).

Leftovers: the agent's files, the workers' error files (``pytorch-errorfile-*.pickle``, named
with ``tempfile`` in this process) included, go to one temporary directory removed when the
launch ends; multiprocessing's named semaphores carry the creating process's PID and host tag
(``/dev/shm/sem.mp-fleetgnn-sem-h<tag>-p<pid>-*``), so when a whole group is killed,
:func:`sweep_stale_launch_files` (``fleetgnn train`` calls it as it starts) removes them and
the directory once that process is gone, and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from fleetgnn.distributed.errors import DistError, WorkerFailed, WorkerUserError, error_summary
from fleetgnn.errors import FleetgnnError

_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")
#: Exit status of a worker stopped by SIGINT (128 + 2, what a shell reports for Ctrl-C).
EXIT_INTERRUPTED = 130
#: Environment variable through which the agent tells a restarted group which ranks failed.
RESTART_FAILURES_ENV = "FLEETGNN_RESTART_FAILURES"
#: Signals torch's agent handles (and leaves its handler installed for); restored after a launch.
_AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")

#: Seconds the agent waits for stopped workers to exit before it SIGKILLs them (torch: 30). A
#: worker blocked in a C++ call (a rendezvous or collective whose peer left) runs no Python
#: signal handler until the call returns, so without this a Ctrl-C could take half a minute.
SHUTDOWN_TIMEOUT_S = 5
#: Blocked from a worker's fork until :func:`_run_worker` has its handlers in place: a Ctrl-C
#: during the worker's start-up (its imports) waits for them instead of printing a traceback.
_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})

#: Environment variable naming the directory where a starting worker marks itself ready.
READY_DIR_ENV = "FLEETGNN_READY_DIR"
#: Seconds of start-up before :func:`launch` reports progress (a quick start says nothing).
PROGRESS_AFTER_S = 3.0
#: Seconds at least between two progress lines (the last one, all ready, is always said).
PROGRESS_EVERY_S = 3.0
#: Seconds :func:`start_timeout` allows for the workers to start, at the least.
START_TIMEOUT_S = 300
#: Seconds :func:`start_timeout` adds per worker beyond one per core: a worker's start loads torch
#: (a few CPU seconds), and workers that outnumber the cores take turns.
START_S_PER_EXTRA_WORKER = 10

_interrupted = False  # set in a worker by its SIGINT/SIGTERM handler
#: Where every socket of a :func:`launch` listens.
LOOPBACK = "127.0.0.1"


def _on_sigint(signum: int, frame: Any) -> None:
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def _exit_quietly(signum: int, frame: Any) -> None:
    """After the work: a stop signal (the agent tearing the group down) just ends the process.

    Raising there would print "Exception ignored in atexit callback" and a traceback when the
    signal lands in the interpreter's exit handlers.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


#: Where :func:`oom_kills` looks, relative to the file system root: cgroup v2 ``memory.events``
#: (``{path}`` is this process's cgroup), cgroup v1 ``memory.oom_control``, then ``/proc/vmstat``.
_OOM_SOURCES = (
    ("sys/fs/cgroup{path}/memory.events", "this cgroup"),
    ("sys/fs/cgroup/unified{path}/memory.events", "this cgroup"),
    ("sys/fs/cgroup/memory{path}/memory.oom_control", "this cgroup"),
    ("sys/fs/cgroup/memory/memory.oom_control", "this cgroup"),
    ("proc/vmstat", "this machine"),
)
#: What a SIGKILLed worker's line adds to ``killed by SIGKILL (exit -9): `` when the kernel's OOM
#: killer may have sent it (it counted a kill during the run, or its count is not readable).
OOM_HINT = "out of memory"


def _cgroup_paths(root: str) -> dict[str, str]:
    """This process's cgroup path per hierarchy: ``{"v2": path, "memory": path}`` (as found)."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                if parts[0] == "0" and parts[1] == "":
                    paths["v2"] = parts[2]
                elif "memory" in parts[1].split(","):
                    paths["memory"] = parts[2]
    return paths


def oom_kills(root: str = "/") -> tuple[str, int] | None:
    """``(scope, count)``: how many processes the kernel's OOM killer has killed, or ``None``.

    ``scope`` is ``"this cgroup"`` (the ``oom_kill`` line of the process's cgroup v2
    ``memory.events`` or v1 ``memory.oom_control``) or ``"this machine"`` (``/proc/vmstat``),
    whichever is readable first. Compare two readings to tell whether an OOM kill happened
    between them.

    Args:
        root: The file system root to read under (tests point it at a fake tree).
    """
    paths = _cgroup_paths(root)
    for pattern, scope in _OOM_SOURCES:
        if "{path}" in pattern:
            key = "memory" if "/memory{path}" in pattern else "v2"
            if key not in paths:
                continue
            rel = pattern.format(path=paths[key].rstrip("/"))
        else:
            rel = pattern
        with contextlib.suppress(OSError, UnicodeDecodeError, ValueError):
            with open(os.path.join(root, rel)) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return scope, int(value)
    return None


def _sigkill_cause(before: tuple[str, int] | None) -> str:
    """What follows ``killed by SIGKILL (exit -9)``: the OOM killer only if the kernel counted it.

    Compares :func:`oom_kills` now with ``before`` (read when the launch started):
    ``: out of memory (the kernel's OOM killer killed N processes in SCOPE during the run)``
    when it counted kills; ``, not by the kernel's OOM killer (...)`` when it counted none (a
    person, a job scheduler or another program sent it); ``: out of memory, or another process
    (...)`` when no count is readable here (no claim either way).
    """
    after = oom_kills()
    if before is None or after is None or before[0] != after[0]:
        unknown = "the kernel's OOM kill count is not readable here"
        return f": {OOM_HINT}, or another process ({unknown})"
    n = after[1] - before[1]
    if n <= 0:
        return (
            f", not by the kernel's OOM killer (it counted no OOM kill in {after[0]} during the "
            f"run): another process or a person sent it"
        )
    return (
        f": {OOM_HINT} (the kernel's OOM killer killed {n} process{'es' if n > 1 else ''} in "
        f"{after[0]} during the run)"
    )


class WorkerStartTimeout(DistError):
    """The workers were not all ready within the start-up time :func:`launch` allowed."""


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` without one).

    The launcher's and the training processes' thread counts
    (:func:`fleetgnn.train.resolve.resolve_threads`) both start from it.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def oversubscription(
    nproc: int, device: str, *, cores: int | None = None, gpus: int | None = None
) -> str | None:
    """The one line to print when ``nproc`` workers outnumber this host's cores or GPUs.

    Args:
        nproc: Worker processes to start on this host.
        device: The run's device: ``cpu`` compares with the CPU cores, ``cuda`` (or
            ``cuda:N``) with the GPUs.
        cores: CPU cores (default: :func:`usable_cores`).
        gpus: GPUs (default: ``torch.cuda.device_count()``).

    Returns:
        ``None`` when every worker has a core (a GPU) of its own; else what happens (the run
        goes on): workers take turns on the cores, or share GPUs over gloo collectives.
    """
    if str(device).split(":", 1)[0] == "cuda":
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        if nproc <= gpus or gpus < 1:
            return None
        share = -(-nproc // gpus)
        return (
            f"--nproc {nproc} starts {nproc} workers on {gpus} GPU{'s' * (gpus > 1)}: up to "
            f"{share} share each GPU, with gloo collectives instead of NCCL (slower, and each "
            f"holds its own CUDA context); going on (--nproc {gpus} gives each worker a GPU)"
        )
    cores = usable_cores() if cores is None else cores
    if nproc <= cores:
        return None
    return (
        f"--nproc {nproc} starts {nproc} worker processes on {cores} CPU "
        f"core{'s' * (cores > 1)}: they take turns on the cores, so each loads torch slowly "
        f"(start-up takes longer) and each epoch runs slower than with --nproc {cores}; going on"
    )


def start_timeout(nproc: int, cores: int | None = None) -> int:
    """Seconds :func:`launch` waits for ``nproc`` workers to be ready before it gives up.

    :data:`START_TIMEOUT_S`, plus :data:`START_S_PER_EXTRA_WORKER` for each worker beyond one
    per CPU core (:func:`usable_cores`).
    """
    cores = usable_cores() if cores is None else cores
    return START_TIMEOUT_S + START_S_PER_EXTRA_WORKER * max(0, nproc - cores)


def _ready_name(rank: int | str, attempt: int | str) -> str:
    return f"ready-{attempt}-{rank}"


def _mark_ready() -> None:
    """In a worker started by :func:`launch`: say that it is ready (see the module docstring)."""
    where = os.environ.get(READY_DIR_ENV)
    if not where:
        return
    name = _ready_name(
        os.environ.get("RANK", "0"), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    )
    with contextlib.suppress(OSError):  # a progress line less, never a failed worker
        os.close(os.open(os.path.join(where, name), os.O_CREAT | os.O_WRONLY, 0o644))


class _StartWatch:
    """Counts the ready workers of a launch's first attempt; reports them; gives up in time.

    A thread polls the ready files every ``poll_s``. Past :data:`PROGRESS_AFTER_S` it reports
    ``k of N workers ready (T s, giving up at L s)`` through ``report`` when ``k`` changed (at
    most every :data:`PROGRESS_EVERY_S`; the last, all ready, always, followed by ``then``: what
    the workers do next); past ``timeout_s`` with workers still starting
    it sends this process SIGTERM, which stops the elastic agent and its workers, and
    :attr:`timed_out` says why (only once the agent's SIGTERM handler is in place: before, the
    signal would end this process).
    """

    def __init__(
        self,
        where: str,
        nproc: int,
        timeout_s: float,
        report: Callable[[str], None] | None,
        then: str = "",
        poll_s: float = 0.2,
    ) -> None:
        self.where, self.nproc, self.timeout_s, self.then = where, nproc, timeout_s, then
        self.report, self.poll_s = report, poll_s
        self.ready = 0
        self.timed_out = False
        self._stop = threading.Event()
        self._sigterm: Any = None  # the handler before the agent's
        self._thread = threading.Thread(target=self._run, name="fleetgnn-start-watch", daemon=True)

    def _count(self) -> int:
        prefix = _ready_name("", 0)
        with contextlib.suppress(OSError):
            return sum(name.startswith(prefix) for name in os.listdir(self.where))
        return self.ready

    def _run(self) -> None:
        import time

        t0 = time.monotonic()
        said, said_at = -1, -math.inf
        while not self._stop.wait(self.poll_s):
            self.ready = self._count()
            elapsed = time.monotonic() - t0
            done = self.ready >= self.nproc
            due = elapsed >= PROGRESS_AFTER_S and self.ready != said
            if self.report is not None and due and (done or elapsed - said_at >= PROGRESS_EVERY_S):
                then = f"); {self.then}" if done else f", giving up at {self.timeout_s:.0f} s)"
                self.report(f"{self.ready} of {self.nproc} workers ready ({elapsed:.0f} s{then}")
                said, said_at = self.ready, elapsed
            if done:
                return
            if elapsed >= self.timeout_s and signal.getsignal(signal.SIGTERM) is not self._sigterm:
                self.timed_out = True
                os.kill(os.getpid(), signal.SIGTERM)  # the agent stops the workers
                return

    def __enter__(self) -> _StartWatch:
        self._sigterm = signal.getsignal(signal.SIGTERM)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _run_worker(fn: Callable[..., Any], *args: Any) -> Any:
    """Worker entry point: run ``fn``, report user errors by message, exit quietly on Ctrl-C.

    A :class:`~fleetgnn.errors.FleetgnnError` is re-raised as :class:`WorkerUserError` (so the
    launcher shows its message alone). After SIGINT or SIGTERM (what the agent sends to stop
    the workers) the worker exits with :data:`EXIT_INTERRUPTED` without a traceback, whatever
    the interruption broke on its way out (e.g. a collective whose peer already left); its
    ``finally`` blocks have run by then. A stop signal that arrived while the worker was still
    starting (blocked since its fork) is handled the same way once this function begins.
    """
    import torch.distributed as dist

    signal.signal(signal.SIGINT, _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigint)
    # semaphores this worker makes are named after it, as the launcher's are (_named_semaphores)
    _set_semaphore_prefix("/mp-" + _owned_name("sem"))
    _mark_ready()
    try:
        # started with the stop signals blocked (_Agent._start_workers): one that came during
        # start-up is delivered now, to the handler above
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        try:
            return fn(*args)
        finally:
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
            signal.signal(signal.SIGINT, _exit_quietly)
            signal.signal(signal.SIGTERM, _exit_quietly)
    except BaseException as e:
        if _interrupted or isinstance(e, KeyboardInterrupt):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)  # no interpreter teardown: nothing left to wait for
        if isinstance(e, FleetgnnError) and not isinstance(e, WorkerUserError):
            raise WorkerUserError(str(e)) from e
        raise


def restart_info() -> dict[str, Any] | None:
    """In a worker of a restarted group: which attempt this is and why the last one failed.

    Returns:
        ``None`` on the first attempt; else ``{"attempt": k, "failures": {rank: one-line error}}``
        (``failures`` is empty under a launcher other than :func:`launch`, e.g. ``torchrun``).
    """
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if attempt <= 0:
        return None
    failures: dict[int, str] = {}
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        raw = json.loads(os.environ.get(RESTART_FAILURES_ENV, "{}"))
        failures = {int(r): str(m) for r, m in raw.items()}
    return {"attempt": attempt, "failures": failures}


@contextlib.contextmanager
def _private_worker_store() -> Iterator[None]:
    """Give every attempt's workers a fresh store instead of the agent's shared one.

    With the shared store (torch's default for the c10d rendezvous), keys written by the workers
    of a failed attempt survive into the restarted attempt, and a restarted rank can read a dead
    peer's address (pytorch/pytorch#135712: "connection refused" or a hang after a restart).
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` makes rank 0 of each attempt host a new store; the
    agent reads it during rendezvous, so it is set for the duration of the launch only.
    """
    with _env("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"):
        yield


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Keep every listening socket of the launch on loopback while the block runs.

    The agent's c10d rendezvous store is created by torch's rendezvous backend; its ``TCPStore``
    is swapped for :func:`~fleetgnn.distributed.context.loopback_tcp_store` (which binds the
    server to the loopback endpoint instead of every interface). The workers inherit
    ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` naming the loopback interface (unless set), and
    their rank 0 binds its store to ``MASTER_ADDR`` = :data:`LOOPBACK` (see
    :func:`~fleetgnn.distributed.init`).
    """
    import socket

    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    from fleetgnn.distributed.context import is_loopback, loopback_tcp_store

    real = getattr(backend, "TCPStore", None)

    def store(host_name: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if args or not is_loopback(str(host_name)):
            return real(host_name, port, *args, **kwargs)  # type: ignore[misc]
        return loopback_tcp_store(str(host_name), int(port), **kwargs)

    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:  # pragma: no cover - platforms without interface listing
        names = set()
    lo = next((n for n in ("lo", "lo0") if n in names), None)
    with contextlib.ExitStack() as stack:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if lo is not None and var not in os.environ:
                stack.enter_context(_env(var, lo))
        if real is not None:
            backend.TCPStore = store  # type: ignore[assignment, misc]
        try:
            yield
        finally:
            if real is not None:
                backend.TCPStore = real  # type: ignore[misc]


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Mute the elastic agent's own logging (its failure dumps) unless ``verbose``.

    torch gives many of its module loggers their own level, so each one under the
    :data:`_LOGGERS` prefixes is muted, not only the parents.
    """
    if verbose:
        yield
        return
    import torch.distributed.launcher.api  # noqa: F401 - creates the loggers to mute

    names = [
        name
        for name in list(logging.root.manager.loggerDict)
        if any(name == p or name.startswith(p + ".") for p in _LOGGERS)
    ]
    saved = {}
    for name in {*names, *_LOGGERS}:
        lg = logging.getLogger(name)
        saved[name] = lg.level
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def _restore_signal_handlers() -> Iterator[None]:
    """Put back the signal handlers torch's agent replaces (it never restores them)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # the agent only installs handlers from the main thread
        return
    sigs = [getattr(signal, n) for n in _AGENT_SIGNALS if hasattr(signal, n)]
    saved = {s: signal.getsignal(s) for s in sigs}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


@contextlib.contextmanager
def _removed_after(path: str) -> Iterator[None]:
    """Remove the directory ``path`` (and what is in it) when the block ends, however it ends."""
    import shutil

    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _owned_name(kind: str) -> str:
    """``fleetgnn-KIND-h<host and PID namespace tag>-p<pid>``, how this process's leftovers start.

    A later sweep tells from it that they are fleetgnn's and whether their creator is gone.
    """
    from fleetgnn.graph.files import owner_tag

    return f"fleetgnn-{kind}-h{owner_tag()}-p{os.getpid()}"


@contextlib.contextmanager
def _temp_files_in(path: str) -> Iterator[None]:
    """Make ``tempfile``'s default directory ``path`` in this process while the block runs.

    The agent names every worker's error file (``pytorch-errorfile-*.pickle``, which a worker
    that raises writes and nobody removes) with ``tempfile`` in this process: they land in
    ``path``, which :func:`launch` removes when it ends.
    """
    import tempfile

    saved = tempfile.tempdir
    tempfile.tempdir = path
    try:
        yield
    finally:
        tempfile.tempdir = saved


@contextlib.contextmanager
def _named_semaphores() -> Iterator[None]:
    """Name this process's multiprocessing semaphores ``/mp-fleetgnn-sem-h<tag>-p<pid>-*``.

    Under the ``spawn`` start method every ``multiprocessing`` lock, queue and event is a named
    POSIX semaphore (``/dev/shm/sem.mp-*``; the agent makes 9 for two workers) that this process
    unlinks when it exits, or its resource tracker when this process dies alone. When the whole
    group is killed nobody does; the name then says whose it was, and
    :func:`sweep_stale_launch_files` removes it once that process is gone (an unnamed
    ``sem.mp-*`` could be any program's).
    """
    saved = _set_semaphore_prefix("/mp-" + _owned_name("sem"))
    try:
        yield
    finally:
        _set_semaphore_prefix(saved)


def _set_semaphore_prefix(prefix: str | None) -> str | None:
    """Set the name prefix of this process's new multiprocessing semaphores; return the old one.

    ``None`` restores multiprocessing's default. (CPython keeps it in the private
    ``current_process()._config["semprefix"]``.)
    """
    import multiprocessing

    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    saved = config.get("semprefix")
    if prefix is None:
        config.pop("semprefix", None)
    else:
        config["semprefix"] = prefix
    return saved


_LEFTOVER_RE = r"^{prefix}fleetgnn-{kind}-h(?P<tag>[0-9a-f]{{8}})-p(?P<pid>\d+)-[A-Za-z0-9_]+$"


def sweep_stale_launch_files(
    temp_dir: str | None = None, shm: str | None = None
) -> list[tuple[str, str]]:
    """Remove what :func:`launch` runs whose launching process is gone left behind.

    A launch killed as a whole (``kill -9`` of its process group) leaves its error-file
    directory (``fleetgnn-elastic-h<tag>-p<pid>-*`` in the temporary folder) and its named
    semaphores (``sem.mp-fleetgnn-sem-h<tag>-p<pid>-*`` in ``/dev/shm``). Only those named
    after a process of this host and PID namespace (``<tag>``, see
    :func:`~fleetgnn.graph.files.owner_tag`) that no longer exists are removed; another
    program's files, a live run's and another namespace's are left alone.

    Args:
        temp_dir: Where the error-file directories are (default: ``tempfile.gettempdir()``).
        shm: Where the semaphores are (default: :func:`~fleetgnn.distributed.shm.shm_dir`).

    Returns:
        ``(kind, path)`` per removed leftover, ``kind`` ``"directory"`` or ``"semaphore"``.
    """
    import re
    import shutil
    import tempfile

    from fleetgnn.distributed.shm import shm_dir
    from fleetgnn.graph.files import owner_tag, process_alive

    removed: list[tuple[str, str]] = []
    places = (
        (temp_dir or tempfile.gettempdir(), "", "elastic", "directory"),
        (shm or shm_dir(), "sem\\.mp-", "sem", "semaphore"),
    )
    for directory, prefix, kind, what in places:
        pattern = re.compile(_LEFTOVER_RE.format(prefix=prefix, kind=kind))
        with contextlib.suppress(OSError):
            names = sorted(os.listdir(directory))
            for name in names:
                m = pattern.match(name)
                if not m or m.group("tag") != owner_tag() or process_alive(int(m.group("pid"))):
                    continue
                path = os.path.join(directory, name)
                try:
                    if what == "directory":
                        if os.path.islink(path) or not os.path.isdir(path):
                            continue
                        shutil.rmtree(path)
                    else:
                        os.unlink(path)
                except OSError:
                    continue
                removed.append((what, path))
    return removed


@contextlib.contextmanager
def _env(key: str, value: str | None) -> Iterator[None]:
    """Set (or, with ``None``, remove) an environment variable for the duration of the block."""
    saved = os.environ.get(key)
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@contextlib.contextmanager
def _agent_reporting_restarts() -> Iterator[None]:
    """Make the elastic agent report restarts and start workers that no signal catches half-up.

    While the block runs, torch's launcher builds a subclass of its ``LocalElasticAgent`` that
    remembers the failures of the last monitoring round and, before restarting the group, puts
    them (rank -> one-line error, JSON) in :data:`RESTART_FAILURES_ENV`, which the new workers
    inherit (:func:`restart_info` reads it). It also starts the workers with SIGINT and SIGTERM
    blocked (a signal mask survives fork and exec; :func:`_run_worker` unblocks them once its
    handlers are in place), so a Ctrl-C during a worker's imports is not a ``spawn.py``
    traceback. Without these hooks (another torch) restarts still work and
    :func:`restart_info` reports no failures.
    """
    import torch.distributed.launcher.api as api

    base = getattr(api, "LocalElasticAgent", None)
    if not (
        isinstance(base, type)
        and hasattr(base, "_monitor_workers")
        and hasattr(base, "_restart_workers")
        and hasattr(base, "_start_workers")
    ):
        yield
        return

    class _Agent(base):  # type: ignore[misc, valid-type]
        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            with contextlib.suppress(Exception):  # reporting must never break the agent
                if result.is_failed():
                    self._fleetgnn_failures = {
                        int(r): _failure_message(f) for r, f in result.failures.items()
                    }
            return result

        def _start_workers(self, worker_group: Any) -> Any:
            from multiprocessing import resource_tracker

            # started first: starting it unblocks SIGINT and SIGTERM in this thread (CPython's
            # resource_tracker.ensure_running), which would undo the block below
            resource_tracker.ensure_running()
            saved = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                return super()._start_workers(worker_group)
            finally:  # a signal that came meanwhile reaches this process now
                signal.pthread_sigmask(signal.SIG_SETMASK, saved)

        def _restart_workers(self, worker_group: Any) -> None:
            failures = getattr(self, "_fleetgnn_failures", {})
            os.environ[RESTART_FAILURES_ENV] = json.dumps({str(r): m for r, m in failures.items()})
            super()._restart_workers(worker_group)

    api.LocalElasticAgent = _Agent
    try:
        yield
    finally:
        api.LocalElasticAgent = base


def _user_message(failure: Any) -> str | None:
    """The message of a worker's :class:`WorkerUserError`, or ``None`` for any other failure."""
    data = getattr(failure, "error_file_data", None)
    msg = data.get("message") if isinstance(data, dict) else None
    text = msg.get("message") if isinstance(msg, dict) else msg
    prefix = f"{WorkerUserError.__name__}: "
    if isinstance(text, str) and text.startswith(prefix):
        return text[len(prefix) :]
    return None


def _signal_name(failure: Any) -> str:
    code = getattr(failure, "exitcode", None)
    if not isinstance(code, int) or code >= 0:
        return ""
    name = ""
    if hasattr(failure, "signal_name"):
        with contextlib.suppress(Exception):
            name = str(failure.signal_name())
    if not name or name.upper() == "UNKNOWN SIGNAL":
        with contextlib.suppress(ValueError):
            name = signal.Signals(-code).name
    return name or f"signal {-code}"


def _failure_message(failure: Any, sigkill: str = "") -> str:
    """One line for one failed worker: a user error's message, else its exception or signal.

    A worker killed by a signal (no error record) is ``killed by SIGTERM (exit -15)``; by
    SIGKILL, ``killed by SIGKILL (exit -9)`` followed by ``sigkill`` (whether the kernel's OOM
    killer sent it, see :func:`_sigkill_cause`).
    """
    user = _user_message(failure)
    if user is not None:
        return " ".join(user.split())
    name = _signal_name(failure)
    if name and not _has_error_record(failure):
        line = f"killed by {name} (exit {failure.exitcode})"
        return f"{line}{sigkill}" if name == "SIGKILL" else line
    return error_summary(_failure_text(failure))


def _has_error_record(failure: Any) -> bool:
    """Whether the worker left an error record (an exception, not just a signal death)."""
    data = getattr(failure, "error_file_data", None)
    msg = data.get("message") if isinstance(data, dict) else None
    return bool(msg) and msg != "<NONE>"


def _worker_failed(failures: dict[int, str], messages: dict[int, str]) -> WorkerFailed:
    """A :class:`WorkerFailed` with a one-line message naming each rank's failure.

    ``rank 1 was killed by SIGTERM (exit -15)`` for ranks killed by a signal, ``worker failed on
    rank R: MESSAGE`` for the others, joined with ``; ``.
    """
    err = WorkerFailed(failures, messages=messages)
    by_message: dict[str, list[int]] = {}
    for rank, msg in err.messages.items():
        by_message.setdefault(msg, []).append(rank)
    parts = []
    for msg, ranks in by_message.items():
        who = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
        if msg.startswith("killed by "):
            parts.append(f"{who} {'was' if len(ranks) == 1 else 'were'} {msg}")
        else:
            parts.append(f"worker failed on {who}: {msg}")
    err.args = ("; ".join(parts),)
    return err


def _failure_text(failure: Any) -> str:
    """The error text of one ``ProcessFailure``: exception + traceback, or the signal/exit code."""
    data = getattr(failure, "error_file_data", None)
    if isinstance(data, dict):
        msg = data.get("message")
        if isinstance(msg, dict):
            stack = (msg.get("extraInfo") or {}).get("py_callstack")
            if stack:
                return str(stack)
            if msg.get("message"):
                return str(msg["message"])
        elif msg and msg != "<NONE>":  # torch's placeholder when the worker left no error file
            return str(msg)
    text = str(getattr(failure, "message", "") or "")
    code = getattr(failure, "exitcode", None)
    signal_name = ""
    if hasattr(failure, "signal_name"):
        with contextlib.suppress(Exception):
            signal_name = failure.signal_name()
    if code is not None and code < 0 and signal_name:
        return f"killed by {signal_name} (exit code {code}). {text}".strip()
    return text or f"exited with code {code}"


def launch(
    fn: Callable[..., Any],
    args: tuple = (),
    nproc: int = 2,
    max_restarts: int = 0,
    run_id: str | None = None,
    monitor_interval: float = 0.1,
    *,
    verbose: bool = False,
    on_progress: Callable[[str], None] | None = None,
    start_timeout_s: float | None = None,
    next_step: str = "each runs its function",
) -> dict[int, Any]:
    """Run ``fn(*args)`` on ``nproc`` local workers with torch's elastic launcher.

    Each worker is a fresh process (start method ``spawn``) with the launcher's environment; call
    :func:`fleetgnn.distributed.init` inside ``fn`` to join the group. If any worker fails, the
    agent stops the others and restarts all of them (up to ``max_restarts`` times; a worker can read
    ``TORCHELASTIC_RESTART_COUNT`` to know its attempt).

    Args:
        fn: A picklable, module-level function (not a lambda or closure).
        args: Arguments for ``fn`` (picklable).
        nproc: Number of workers (>= 1).
        max_restarts: Group restarts allowed after failures (>= 0).
        run_id: Rendezvous id (a fresh random one if None).
        monitor_interval: Seconds between the agent's health checks of the workers (> 0).
        verbose: Let the elastic agent log (its startup info and failure dumps); off by default
            since failures are raised as :class:`WorkerFailed`.
        on_progress: Called with a line (``12 of 16 workers ready (9 s, giving up at 460 s)``)
            as workers become ready, once the start has taken :data:`PROGRESS_AFTER_S`.
        start_timeout_s: Seconds the workers have to become ready (default
            :func:`start_timeout`).
        next_step: What the workers do once ready, for the last progress line.

    Returns:
        ``{rank: return value of fn on that rank}``.

    Raises:
        DistError: Invalid arguments or an unpicklable ``fn``.
        WorkerFailed: Workers still failed after the last restart: the failing rank(s), their
            one-line errors (``.messages``: a :class:`~fleetgnn.errors.FleetgnnError`'s message,
            else the exception line or the signal) and full error texts (``.failures``).
        WorkerStartTimeout: Workers were still starting after ``start_timeout_s``; all were
            stopped.
        KeyboardInterrupt: The launcher got SIGINT (Ctrl-C) or SIGTERM, or every failed worker
            was stopped by SIGINT; the workers were stopped (the same signal, then SIGKILL after
            :data:`SHUTDOWN_TIMEOUT_S`).
    """
    if not isinstance(nproc, int) or nproc < 1:
        raise DistError(f"launch(nproc={nproc!r}): need an integer >= 1 worker processes.")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise DistError(f"launch(max_restarts={max_restarts!r}): need an integer >= 0.")
    if not monitor_interval > 0:
        raise DistError(f"launch(monitor_interval={monitor_interval!r}): need seconds > 0.")
    try:
        pickle.dumps((fn, tuple(args)))
    except Exception as e:  # noqa: BLE001 - any pickling failure means the same thing here
        raise DistError(
            f"launch: fn={getattr(fn, '__qualname__', fn)!r} or its args cannot be pickled "
            f"({type(e).__name__}: {e}); workers are spawned, so pass a module-level function "
            "and picklable arguments (no lambdas, closures or open handles)."
        ) from e

    import dataclasses
    import tempfile

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    extra: dict[str, Any] = {}
    if "shutdown_timeout" in fields:  # torch >= 2.6 (older: its fixed 30 s)
        extra["shutdown_timeout"] = SHUTDOWN_TIMEOUT_S
    # the agent's per-worker error files, in a directory removed afterwards (torch's default is a
    # torchelastic_* directory in /tmp that nobody removes)
    log_dir = tempfile.mkdtemp(prefix=_owned_name("elastic") + "-")
    if "logs_specs" in fields:
        extra["logs_specs"] = DefaultLogsSpecs(log_dir=log_dir)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=run_id or f"fleetgnn-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint=f"{LOOPBACK}:0",
        local_addr=LOOPBACK,  # MASTER_ADDR of the workers
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method="spawn",
        **extra,
    )
    oom_before = oom_kills()  # a SIGKILLed worker's line says whether the OOM killer struck
    timeout_s = start_timeout(nproc) if start_timeout_s is None else start_timeout_s
    watch = _StartWatch(log_dir, nproc, timeout_s, on_progress, next_step)
    with (
        _quiet(verbose),
        _loopback_only(),
        _private_worker_store(),
        _restore_signal_handlers(),
        _env(RESTART_FAILURES_ENV, None),
        _agent_reporting_restarts(),
        _removed_after(log_dir),
        _temp_files_in(log_dir),
        _named_semaphores(),
        _env(READY_DIR_ENV, log_dir),
    ):
        try:
            with watch:
                return dict(elastic_launch(config, _run_worker)(fn, *args))
        except SignalException as e:
            if watch.timed_out:
                raise WorkerStartTimeout(
                    f"only {watch.ready} of {nproc} workers were ready after {timeout_s:.0f} s; "
                    f"gave up and stopped them ({usable_cores()} CPU cores here: start fewer "
                    f"with --nproc)"
                ) from None
            err = KeyboardInterrupt(f"launcher got {e.sigval.name}")
            err.signum = int(e.sigval)  # type: ignore[attr-defined]
            raise err from None
        except ChildFailedError as e:
            if all(getattr(f, "exitcode", None) == EXIT_INTERRUPTED for f in e.failures.values()):
                raise KeyboardInterrupt("workers were interrupted") from None
            failures = {int(rank): _failure_text(f) for rank, f in e.failures.items()}
            cause = _sigkill_cause(oom_before)
            messages = {int(rank): _failure_message(f, cause) for rank, f in e.failures.items()}
            raise _worker_failed(failures, messages) from None

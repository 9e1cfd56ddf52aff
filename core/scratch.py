"""Where a run's temporary files live, and how they are cleaned up.

Every temporary thing a GridGraph run makes carries the name of its owner
(host and process id), so the next run can tell the leftovers of a run that
was killed (SIGKILL, a power cut) from those of a run still going, and
remove only the former:

- scratch folders ``gridgraph-<kind>-<host>-<pid>-<random>`` in the scratch
  root: ``$GRIDGRAPH_SCRATCH_DIR`` when set, else the system temporary
  folder (``$TMPDIR``);
- hidden temporary outputs ``.gridgraph-tmp-<host>-<pid>-<random>-<name>``
  beside the final output, moved into place (with their sidecar files)
  only when every output of the run is complete.

It also holds the disk-space checks (a full disk becomes
:class:`~.errors.DiskFullError` naming the folder and the size) and the
SIGTERM guard that turns a termination request into a cancel.  Nothing
here imports qgis or GDAL.
"""

import errno
import glob
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import uuid
import zlib
from contextlib import contextmanager

from .errors import DiskFullError, InvalidInputError

# Environment variable naming the folder where scratch folders are created.
SCRATCH_ENV = "GRIDGRAPH_SCRATCH_DIR"
SCRATCH_PREFIX = "gridgraph-"
TEMPORARY_PREFIX = ".gridgraph-"
# host tag, pid, random token; the tag keeps a shared network folder's
# entries of other machines (whose pids mean nothing here) out of the sweep
_OWNED = re.compile(r"^\.?gridgraph-[a-z]+-([0-9a-f]{8})-(\d+)-[0-9a-f]{8}")


def host_tag():
    """Eight hex digits naming this machine (a CRC of its host name)."""
    return f"{zlib.crc32(socket.gethostname().encode()) & 0xffffffff:08x}"


def owner_tag():
    """``<host>-<pid>-<random>``: a unique, owner-naming piece of a name."""
    return f"{host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def scratch_root():
    """The folder scratch folders are made in (checked to exist)."""
    root = os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()
    if not os.path.isdir(root):
        raise InvalidInputError(
            f"the scratch folder {root!r} ({SCRATCH_ENV}) does not exist: "
            f"create it, or unset {SCRATCH_ENV} to use the temporary folder")
    if not os.access(root, os.W_OK):
        raise InvalidInputError(
            f"the scratch folder {root!r} is not writable: point "
            f"{SCRATCH_ENV} at a writable folder")
    return root


def make_run_folder(kind="scratch", parent=None):
    """A new empty folder ``gridgraph-<kind>-<owner>`` for one run's scratch
    (in ``parent``, default :func:`scratch_root`); stale folders of dead
    runs in the same place are removed first."""
    parent = parent or scratch_root()
    sweep_stale(parent)
    folder = os.path.join(parent, f"{SCRATCH_PREFIX}{kind}-{owner_tag()}")
    try:
        os.mkdir(folder, 0o700)
    except OSError as error:
        raise write_error(parent, error, 0, "the scratch folder") from None
    return folder


def temporary_path(path):
    """The hidden temporary name beside ``path`` its data is written to."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f"{TEMPORARY_PREFIX}tmp-{owner_tag()}-{name}")


def _companions(temporary):
    """The temporary file and its sidecars (``.aux.xml``, ``.prj``, a
    shapefile's ``.dbf``...): every file named like it up to its extension."""
    stem = os.path.splitext(temporary)[0]
    found = set(glob.glob(glob.escape(stem) + ".*"))
    found.update(glob.glob(glob.escape(temporary) + ".*"))
    if os.path.exists(temporary):
        found.add(temporary)
    return sorted(found)


def publish(temporary, path):
    """Move the finished ``temporary`` and its sidecars onto ``path``.

    A stale ``path.aux.xml`` (statistics of the file being replaced) is
    removed unless the new file brought its own.  The files get the mode
    a newly created file gets (0666 less the umask).
    """
    umask = os.umask(0)
    os.umask(umask)
    stem, final_stem = os.path.splitext(temporary)[0], os.path.splitext(path)[0]
    moved = set()
    for name in _companions(temporary):
        if name == temporary:
            target = path
        elif name.startswith(temporary):
            target = path + name[len(temporary):]
        else:
            target = final_stem + name[len(stem):]
        try:
            os.chmod(name, 0o666 & ~umask)
        except OSError:
            pass
        os.replace(name, target)
        moved.add(target)
    sidecar = path + ".aux.xml"
    if sidecar not in moved:
        remove_quietly(sidecar)


def discard(temporary):
    """Remove ``temporary`` and its sidecars (nothing if none exists)."""
    for name in _companions(temporary):
        if os.path.isdir(name):
            shutil.rmtree(name, ignore_errors=True)
        else:
            remove_quietly(name)


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def process_alive(pid):
    """True when a process with this pid exists on this machine."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(*folders):
    """Remove GridGraph scratch folders and hidden temporary outputs in
    ``folders`` whose owning process (on this host) no longer exists.
    Returns the names removed."""
    removed = []
    mine = host_tag()
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = _OWNED.match(name)
            if match is None or match.group(1) != mine:
                continue
            if process_alive(int(match.group(2))):
                continue
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                remove_quietly(path)
            removed.append(path)
    return removed


# --------------------------------------------------------------------------
# disk space


def free_bytes(folder):
    """Free bytes for this user on the file system holding ``folder``."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def is_disk_full(error):
    """True when ``error`` (OSError or a GDAL RuntimeError) says the disk
    (or the user's quota) is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC,
                                                      errno.EDQUOT):
        return True
    text = str(error).lower()
    return ("no space left" in text or "disk space" in text
            or "disk full" in text or "quota exceeded" in text)


def disk_full_error(folder, needed_bytes, what=None):
    """The :class:`DiskFullError` for ``folder`` (``needed_bytes`` known
    or an estimate; 0 when unknown)."""
    folder = os.path.abspath(folder)
    free = free_bytes(folder)
    need = f": {_mb(needed_bytes)} MB were needed" if needed_bytes else ""
    free_text = f" ({_mb(free)} MB free)" if free is not None else ""
    target = f" while writing {what}" if what else ""
    return DiskFullError(
        f"the disk holding {folder} is full{need}{free_text}{target}; free "
        f"space there, or choose another folder (for scratch: set "
        f"{SCRATCH_ENV} to a folder on a larger disk). Nothing was written")


def write_error(folder, error, needed_bytes=0, what=None):
    """A typed error for a failed write in ``folder``: DiskFullError when
    the disk is full, else InvalidInputError quoting the system's reason."""
    if is_disk_full(error) or _nearly_full(folder, needed_bytes):
        return disk_full_error(folder, needed_bytes, what)
    target = what or folder
    return InvalidInputError(
        f"cannot write {target} in {os.path.abspath(folder)}: {error}; check "
        "the folder's permissions and free space, or choose another folder")


def _nearly_full(folder, needed_bytes):
    """GDAL reports a full disk as a bare write error ("TIFFAppendToStrip:
    Write error"): a write that failed while the disk has under 1 MB (or
    less than the write needed) free is taken for a full disk."""
    free = free_bytes(folder)
    return free is not None and (free < 1 << 20 or free < needed_bytes)


def check_free_space(folder, needed_bytes, what):
    """Raise DiskFullError now when ``folder``'s disk has fewer than
    ``needed_bytes`` free (sizes known before a run: scratch, raw outputs)."""
    free = free_bytes(folder)
    if free is not None and needed_bytes > free:
        error = disk_full_error(folder, needed_bytes, what)
        raise DiskFullError(str(error).replace(" is full", " is too full",
                                               1)) from None


@contextmanager
def disk_errors(folder, needed_bytes=0, what=None):
    """Turn OSError / GDAL RuntimeError raised inside into typed errors."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        if isinstance(error, (DiskFullError, InvalidInputError)):
            raise
        raise write_error(folder, error, needed_bytes, what) from None


def _mb(size):
    return f"{size / 2**20:.1f}" if size < 10 * 2**20 else f"{size / 2**20:.0f}"


# --------------------------------------------------------------------------
# termination requests


class TerminationGuard:
    """While active, SIGTERM (and SIGHUP) only set :attr:`requested`; the
    progress callback checks it and cancels, so the run cleans up (scratch
    and partial outputs removed) instead of dying half-way.

    Signal handlers can only be installed from the main thread: elsewhere
    (the QGIS desktop's task threads) the guard does nothing.  The previous
    handlers are restored on exit.  ``on_request`` (e.g. a QGIS feedback's
    ``cancel``) is called from the handler, in the main thread.
    """

    SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None),
                                getattr(signal, "SIGHUP", None)) if s)

    def __init__(self, on_request=None):
        self.requested = None
        self.on_request = on_request
        self._previous = {}

    def _handler(self, signum, frame):
        self.requested = signum
        if self.on_request is not None:
            self.on_request()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                try:
                    self._previous[signum] = signal.signal(signum,
                                                           self._handler)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        return False

    @property
    def message(self):
        name = signal.Signals(self.requested).name if self.requested else ""
        return (f"interrupted by {name}: the run was stopped and its scratch "
                "and partial outputs removed; run it again to get the outputs")

"""Atomic version directories for TensorFlow Serving's ``<model_base_path>/<version>/`` layout.

A version is built in a temporary sibling ``<base>/.tmp-<version>-<pid>-<random>`` and renamed into
place in one ``rename(2)``, so a polling server (TF Serving, ``kerasplm serve``) never sees a
half-written version, even if the exporting process is killed: what is left is a ``.tmp-*`` directory,
which servers ignore (not an integer name) and the next export removes once its owner process is gone.

Replacing an existing version (``overwrite=True``) swaps the two directories with Linux's
``renameat2(RENAME_EXCHANGE)`` where available (one atomic step); elsewhere the old directory is renamed
aside first (``.old-*``), leaving a moment in which that version number is absent (never half-written).
"""
import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import shutil

_VERSION_RE = re.compile(r"[0-9]+")
_TMP_RE = re.compile(r"\.(?:tmp|old)-[0-9]+-(?P<pid>[0-9]+)-[0-9a-f]+")


SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_MAX_VERSION = 2**63 - 1  # TF Serving's versions are int64


def list_version_numbers(base, complete=False):
    """Integer-named version directories of ``base``, ascending (the one version listing of kerasplm).

    With ``complete=True`` only versions that hold a ``saved_model.pb`` (or ``.pbtxt``) count: what a
    server may load. Temporary siblings (``.tmp-3-xxxx``) never count; neither do numbers beyond int64.
    """
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return []
    versions = []
    for name in names:
        if not _VERSION_RE.fullmatch(name) or len(name) > 19 or int(name) > _MAX_VERSION:
            continue
        if complete and not any(os.path.isfile(os.path.join(base, name, f)) for f in SAVED_MODEL_FILES):
            continue
        versions.append(int(name))
    return sorted(versions)


def next_version(base):
    """The next free version number: 1 + the largest existing one (1 if none)."""
    versions = list_version_numbers(base)
    return versions[-1] + 1 if versions else 1


def _pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp_dirs(base):
    """Removes ``.tmp-*`` / ``.old-*`` leftovers of exports whose process no longer runs; returns them."""
    removed = []
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return removed
    for name in names:
        m = _TMP_RE.fullmatch(name)
        if m and not _pid_alive(int(m.group("pid"))):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            removed.append(name)
    return removed


def make_tmp_dir(base, version, kind="tmp"):
    """Creates and returns an empty ``base/.<kind>-<version>-<pid>-<random>`` directory."""
    path = os.path.join(base, f".{kind}-{version}-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(path)
    return path


def fsync_tree(path):
    """fsync every file and directory under ``path`` (so a rename publishes durable contents)."""
    for root, dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(root)


def fsync_dir(path):
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a, b):
    """Atomically swaps two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), f"{a} <-> {b}")


def publish(tmp, base, version, overwrite=False, auto_version=False):
    """Renames the finished directory ``tmp`` to ``base/<version>``; returns the final path.

    With ``auto_version`` a version taken meanwhile by a concurrent export moves on to the next free
    number. Without ``overwrite`` an existing version raises ``FileExistsError``.
    """
    while True:
        final = os.path.join(base, str(version))
        if os.path.exists(final):
            if auto_version:
                version = max(version + 1, next_version(base))
                continue
            if not overwrite:
                raise FileExistsError(f"{final}: version {version} exists; pass overwrite=True / --overwrite")
            if _exchange(tmp, final):       # tmp now holds the old version
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                old = os.path.join(base, f".old-{version}-{os.getpid()}-{secrets.token_hex(4)}")
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            fsync_dir(base)
            return final
        try:
            os.rename(tmp, final)
        except OSError as e:  # created meanwhile (a non-empty directory cannot be renamed over)
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and auto_version:
                continue
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and not overwrite:
                raise FileExistsError(f"{final}: version {version} exists; pass overwrite=True / --overwrite") \
                    from e
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                continue
            raise
        fsync_dir(base)
        return final

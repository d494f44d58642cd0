"""Where ``ektelo-ng run`` runs an analyst's plan: a sandbox that shows it no private file, no process of the
kernel and no network, and that ends with it; and the kernel's own process kept out of reach (non-dumpable).

The sandbox is made by bubblewrap (``bwrap``, Debian's ``bubblewrap`` package) and, when ``run`` is root, by
util-linux's ``setpriv``, which makes the plan the user nobody. Why these tools and not system calls made here:
bubblewrap is the small sandbox Flatpak runs every application in, packaged by every distribution; it builds the
namespaces and mounts from its command line (no ``unshare``/``mount``/``pivot_root`` code of ours to get right),
ties the sandbox to its parent (``--die-with-parent``) and puts its own init at PID 1, whose end makes the kernel
kill every process left in the namespace. util-linux's ``unshare`` makes the same namespaces, but a root holding
only chosen paths then takes a script of bind mounts and a ``pivot_root``: the hand-rolled part avoided here.
``setpriv`` changes the user, groups and capabilities in one exec, with no shell.

What the plan's process has (:func:`confined`):

- a mount namespace holding only the plan's files (read-only copies, at their own paths), the Python installation
  and the installed project (read-only), a private ``/tmp`` and ``/dev/shm``, a minimal ``/dev`` and a ``/proc``
  of its own: not the table, the service folder, the caller's home or working directory, ``/etc`` or ``/sys``;
- a PID namespace: it sees only its own processes, and when it ends every process it started (forked, double
  forked, in a session of its own) is killed before ``run`` sees the sandbox end;
- no network (an empty network namespace of its own) unless asked, its own IPC and host name;
- a new session (no terminal to type into), and no environment but PATH, HOME=/tmp and the locale;
- as root: the user nobody, no groups, no capabilities, no new privileges; otherwise the caller's own user, in a
  user namespace whose capabilities reach nothing outside it.

Every process that holds a kernel calls :func:`make_undumpable` (``run``, ``kernel serve``, ``protect``): another
process of the same user (without CAP_SYS_PTRACE) can then neither read nor write its memory (/proc/PID/mem,
ptrace) nor read its /proc/PID/environ, fd, cwd or maps.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

NOBODY = 65534
"""The uid and gid a plan runs as when ``run`` is root (nobody and nogroup on Debian)."""

LAYERS = ("ektelo_ng", "ektelo_ng.kernel", "ektelo_ng.gateway", "ektelo_ng.operators", "ektelo_ng.plans")
"""The installed project's packages: an editable install keeps the layers in folders of their own."""

KEPT_ENVIRONMENT = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""The only variables of the caller's environment the plan sees (a path or a secret may sit in any other)."""

NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl")
"""With the network: how names are resolved and which certificates are trusted."""

_PR_SET_DUMPABLE = 4

INSTALL = ("install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or "
           "give --unsandboxed to run the plan as yourself, able to read every file you can (the table included)")


class SandboxUnavailable(OSError):
    """No sandbox can be made here; the message says what is missing and how to get it."""


def make_undumpable() -> None:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its memory and /proc entries are refused
    to other processes of the same user, and it leaves no core dump. Nothing outside Linux."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) refused: the kernel's process stays readable")


def check(network: bool = False) -> None:
    """Refuse (:class:`SandboxUnavailable`, saying what is missing) where no sandbox can be made: tried once."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"no sandbox for the plan: it needs Linux (this is {sys.platform}); give "
                                 "--unsandboxed to run the plan as yourself, able to read every file you can")
    with confined([shutil.which("true") or "/bin/true"], [], network=network) as (command, descriptors):
        done = subprocess.run(command, pass_fds=descriptors, capture_output=True, text=True)
    if done.returncode != 0:
        needs = ("as root, the right to make namespaces (a container started without CAP_SYS_ADMIN has none)"
                 if os.geteuid() == 0 else "user namespaces for your user (sysctl user.max_user_namespaces, "
                 "kernel.apparmor_restrict_unprivileged_userns), or root")
        raise SandboxUnavailable(f"no sandbox for the plan: bwrap could not make one ({done.stderr.strip()}); it "
                                 f"needs {needs}; or give --unsandboxed to run the plan as yourself, able to read "
                                 "every file you can")


def check_hidden(private: dict[str, Path]) -> None:
    """Refuse a private path (the table, a credential, a socket: named by what it is) inside a folder the sandbox
    shows the plan."""
    for what, path in private.items():
        path = Path(os.path.abspath(path))
        for folder in shown_folders():
            if path.is_relative_to(folder):
                raise ValueError(f"{what} {path} is inside {folder}, which the plan's sandbox shows it (the Python "
                                 "installation or the project): move it elsewhere")


@contextlib.contextmanager
def confined(argv: Sequence[str], files: Sequence[Path], *, network: bool = False
             ) -> Iterator[tuple[list[str], list[int]]]:
    """The command that runs ``argv`` in the sandbox, showing read-only copies of ``files`` at their absolute
    paths, and the descriptors to pass it (the copies, closed on exit); ``network`` shares the host's network.

    Raises :class:`SandboxUnavailable` if bwrap (or, as root, setpriv) is not installed."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"no sandbox for the plan: bwrap is not installed; {INSTALL}")
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") if root else None
    if root and setpriv is None:
        raise SandboxUnavailable("no sandbox for the plan: as root it runs as nobody, through setpriv (util-linux), "
                                 "which is not installed; install util-linux, or run as another user")
    copies = [_copy(path) for path in files]
    try:
        command = [bwrap, *_namespaces(root, network), "--die-with-parent", "--new-session",
                   *_filesystem(network), *_environment(),
                   *(option for fd, path in zip(copies, files) for option in
                     (*_parents(Path(os.path.abspath(path))), "--perms", "0444", "--ro-bind-data", str(fd),
                      os.path.abspath(path)))]
        if root:  # bwrap keeps only what setpriv needs to become nobody; setpriv then drops everything
            command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--",
                        setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                        "--bounding-set=-all", "--no-new-privs"]
        yield [*command, "--", *argv], copies
    finally:
        for fd in copies:
            os.close(fd)


def _namespaces(root: bool, network: bool) -> list[str]:
    """As root: namespaces made with root's own rights (no user namespace, so setpriv can switch to nobody);
    otherwise all of them, in a user namespace. The network namespace is kept only if asked."""
    if root:
        return ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                *([] if network else ["--unshare-net"])]
    return ["--unshare-all", *(["--share-net"] if network else [])]


def _filesystem(network: bool) -> list[str]:
    """A private /tmp first (the plan's files may lie under the real one), then /proc, /dev, and read-only the
    Python installation, the project and, with the network, its configuration files."""
    options = ["--perms", "1777", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs",
               "/dev/shm"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr systems: links into /usr
        top = Path("/") / name
        if top.is_symlink():
            options += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            options += ["--ro-bind", str(top), str(top)]
    for folder in shown_folders():
        options += [*_parents(folder), "--ro-bind", str(folder), str(folder)]
    if network:
        options += [option for name in NETWORK_FILES for option in ("--ro-bind-try", name, name)]
    return options


def _parents(path: Path) -> list[str]:
    """Options making ``path``'s folders in the sandbox, each readable by all (bwrap makes a missing one mode 0700,
    which the user nobody could not enter); the private /tmp is already there."""
    return [option for parent in reversed(path.parents) if parent not in (Path("/"), Path("/tmp"))
            for option in ("--perms", "0755", "--dir", str(parent))]


def _environment() -> list[str]:
    path = os.pathsep.join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]))
    kept = [option for name in KEPT_ENVIRONMENT if name in os.environ
            for option in ("--setenv", name, os.environ[name])]
    return ["--clearenv", "--setenv", "PATH", path, "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
            *kept, "--chdir", "/tmp"]


def shown_folders() -> list[Path]:
    """The folders the sandbox shows, read-only: /usr, the interpreter's prefixes, its site-packages and the
    project's packages; outermost first, none inside another."""
    candidates = [Path("/usr"), Path(sys.base_prefix), Path(sys.base_exec_prefix), Path(sys.prefix),
                  Path(sys.exec_prefix), *map(Path, site.getsitepackages())]
    candidates += [Path(importlib.util.find_spec(name).origin).parent for name in LAYERS]  # not a checkout's root
    folders: list[Path] = []
    for folder in sorted({Path(os.path.abspath(c)) for c in candidates if c.is_dir()}, key=lambda p: len(p.parts)):
        if not any(folder.is_relative_to(outer) for outer in folders):
            folders.append(folder)
    return folders


def _copy(path: Path) -> int:
    """An anonymous in-memory copy of ``path``, rewound: reopening it leads nowhere near the original."""
    fd = os.memfd_create(f"ektelo-{Path(path).name}", 0)  # not inheritable: passed explicitly
    with open(fd, "wb", closefd=False) as copy:
        copy.write(Path(path).read_bytes())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd

"""OS isolation of the candidate's process: the kernel, not Python, draws the trust boundary.

The sandbox process runs under bubblewrap (``bwrap``, Debian's ``bubblewrap``): its own PID,
mount, network, IPC and UTS namespaces, an empty environment, a root filesystem that holds
only what Python, torch and Triton need read-only (the interpreter, its packages, the
``kernels`` package and, for a toy problem, its package), its sandbox directory and a
private Triton cache as the only writable places, a fresh ``/proc`` that shows only its own
processes, a minimal ``/dev`` (plus the NVIDIA device nodes on a GPU) and no network
interface but loopback. Third-party kernel libraries are hidden under empty directories.

Why bubblewrap: it is the maintained tool for exactly this (Flatpak's sandbox), does the
mount setup with ``pivot_root`` so nothing of the host's tree stays reachable, kills the
sandbox when its parent dies and starts it in a new session (no terminal injection). Plain
``unshare`` would leave us to build the root filesystem ourselves.

Who the candidate is:
- run as root (the usual GPU node or container): bubblewrap sets up the namespaces with
  root's privileges, then ``setpriv`` drops to uid/gid 65534 (nobody) with no capabilities,
  an empty bounding set and ``no_new_privs``. A user namespace is *not* used here on
  purpose: bubblewrap would map the sandbox's uid to root outside, while 65534 is an
  unprivileged uid on the host itself.
- run as another user: bubblewrap adds a user namespace (unprivileged user namespaces must
  be enabled); the sandbox keeps that user's uid outside but sees none of its files.

A machine where this cannot be set up makes the judge refuse (``IsolationUnavailable``) with
what is missing, unless the operator opts out with ``insecure_no_isolation`` (reported in
every report as ``isolation: "none"``).
"""

from __future__ import annotations

import atexit
import functools
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from kernels.judge import policy

SANDBOX_UID = SANDBOX_GID = 65534
NONE = "none"


class IsolationUnavailable(RuntimeError):
    """The candidate's process cannot be isolated here; the message says what is missing."""


@dataclass(frozen=True)
class Isolation:
    """How candidates are isolated on this machine.

    ``mode``: ``"bwrap+setpriv"`` (run as root), ``"bwrap+userns"`` (run as another user) or
    ``"none"`` (the operator opted out). ``description`` goes into every report.
    """

    mode: str
    bwrap: str | None = None
    setpriv: str | None = None

    @property
    def enabled(self) -> bool:
        return self.mode != NONE

    @property
    def description(self) -> str:
        if not self.enabled:
            return "none: the candidate ran WITHOUT OS isolation (--insecure-no-isolation)"
        who = f"uid {SANDBOX_UID} (setpriv, no capabilities)" if self.mode == "bwrap+setpriv" else \
            f"uid {os.getuid()} in a user namespace"
        return f"bubblewrap: {who}; pid, mount, network, ipc, uts namespaces; empty environment"


def resolve(insecure_no_isolation: bool = False) -> Isolation:
    """The isolation this machine gives candidates; raises ``IsolationUnavailable`` if none.

    ``insecure_no_isolation=True`` skips the probe and returns ``Isolation("none")``.
    """
    if insecure_no_isolation:
        return Isolation(NONE)
    return _probe()


@functools.lru_cache(maxsize=1)
def _probe() -> Isolation:
    if not sys.platform.startswith("linux"):
        raise IsolationUnavailable(f"candidate isolation needs Linux namespaces; this is {sys.platform}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable(
            "bubblewrap (bwrap) is not installed: install it (Debian/Ubuntu: apt-get install bubblewrap) "
            "or opt out explicitly with --insecure-no-isolation (MARATHON_INSECURE_NO_ISOLATION=1)")
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") if root else None
    if root and setpriv is None:
        raise IsolationUnavailable("setpriv (util-linux) is missing: the judge runs as root and needs it to "
                                   f"drop the candidate to uid {SANDBOX_UID}")
    isolation = Isolation("bwrap+setpriv" if root else "bwrap+userns", bwrap, setpriv)
    probe_dir = Path(sysconfig.get_paths()["purelib"])
    argv = isolation_argv(isolation, ["/bin/true"], workdir=None, writable=(), readable=(str(probe_dir),),
                          env={}, gpu=False)
    try:
        result = subprocess.run(argv, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise IsolationUnavailable(f"bubblewrap could not start a sandbox: {error}") from None
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip()[-500:]
        hint = ("user namespaces may be disabled (sysctl user.max_user_namespaces, "
                "kernel.apparmor_restrict_unprivileged_userns) or the container forbids them; "
                "run the worker as root or in a container that allows namespaces") if not root else \
            "the container may forbid mount namespaces (seccomp/AppArmor); allow CAP_SYS_ADMIN for the worker"
        raise IsolationUnavailable(f"bubblewrap could not set up the candidate's sandbox ({detail}): {hint}")
    return isolation


def _parents(path: str) -> list[str]:
    """Every ancestor of ``path`` below ``/``, outermost first."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _system_binds() -> list[str]:
    """The host's /usr with its /bin, /lib* links (merged-/usr or not), and the loader's config."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # The dynamic loader's cache and config, and the alternatives links /usr/bin points into
    # (cc, for Triton's driver helpers). Nothing else of /etc is visible.
    for path in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


_USER_FILES: list[str] = []


def _user_files() -> tuple[str, str]:
    """/etc/passwd and /etc/group for the sandbox, written once per process (world-readable),
    and again should something have removed them."""
    import tempfile

    if _USER_FILES and all(os.path.exists(path) for path in _USER_FILES):
        return _USER_FILES[0], _USER_FILES[1]
    uid = SANDBOX_UID if os.geteuid() == 0 else os.getuid()
    gid = SANDBOX_GID if os.geteuid() == 0 else os.getgid()
    folder = tempfile.mkdtemp(prefix="marathon-judge-etc-")
    os.chmod(folder, 0o755)
    atexit.register(shutil.rmtree, folder, True)
    passwd, group = os.path.join(folder, "passwd"), os.path.join(folder, "group")
    with open(passwd, "w") as handle:
        handle.write(f"root:x:0:0:root:/root:/usr/sbin/nologin\njudge:x:{uid}:{gid}:judge:/tmp:/usr/sbin/nologin\n")
    with open(group, "w") as handle:
        handle.write(f"root:x:0:\njudge:x:{gid}:\n")
    for path in (passwd, group):
        os.chmod(path, 0o644)
    _USER_FILES[:] = [passwd, group]
    return passwd, group


def _gpu_binds() -> list[str]:
    args = []
    for node in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/nvidia-caps/*")):
        if os.path.exists(node) and not os.path.isdir(node):
            args += ["--dev-bind", node, node]
    args += ["--ro-bind-try", "/sys", "/sys"]  # the CUDA driver reads PCI and NUMA topology
    return args


def _hidden_libraries(readable: tuple[str, ...]) -> list[str]:
    """Empty directories over third-party kernel libraries inside the readable trees."""
    args = []
    for root in readable:
        for name in sorted(policy.KERNEL_LIBRARIES):
            path = os.path.join(root, name)
            if os.path.isdir(path):
                args += ["--tmpfs", path]
    return args


def isolation_argv(isolation: Isolation, argv: list[str], *, workdir: str | None, writable: tuple[str, ...],
                   readable: tuple[str, ...], env: dict[str, str], gpu: bool,
                   scratch: dict[str, int] | None = None) -> list[str]:
    """``argv`` wrapped so it runs isolated; with ``Isolation("none")``, ``argv`` unchanged.

    ``readable``: directories bound read-only at their own paths; ``writable``: directories
    bound read-write; ``scratch``: path -> bytes, a fresh tmpfs of that size mounted at each
    path (world-writable, private to the sandbox's mount namespace: nothing outside sees it,
    and filling it fills only it); ``env``: the whole environment the process gets; ``gpu``:
    bind the NVIDIA device nodes.
    """
    if not isolation.enabled:
        return list(argv)
    args = [isolation.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "judge", "--clearenv"]
    if isolation.mode == "bwrap+userns":
        args += ["--unshare-user", "--disable-userns"]
    for name, value in sorted(env.items()):
        args += ["--setenv", name, value]
    args += _system_binds()
    # A user database that knows only the sandbox's user: Triton and torch look their user up
    # (getpwuid), and the host's /etc/passwd is none of the candidate's business.
    passwd, group = _user_files()
    args += ["--ro-bind", passwd, "/etc/passwd", "--ro-bind", group, "/etc/group"]
    scratch = dict(scratch or {})
    tmp_size = scratch.pop("/tmp", None)
    shm_size = scratch.pop("/dev/shm", None)
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += (["--size", str(tmp_size)] if tmp_size else []) + ["--tmpfs", "/tmp"]
    if shm_size:
        args += ["--perms", "01777", "--size", str(shm_size), "--tmpfs", "/dev/shm"]
    if gpu:
        args += _gpu_binds()
    else:
        args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    mounts = [p for p in (*readable, *writable, *scratch) if p]
    # bwrap creates missing parents of a mount point as 0700, which uid 65534 cannot cross.
    parents = sorted({parent for path in mounts for parent in _parents(path)}, key=len)
    for parent in parents:
        system = parent in ("/usr", "/tmp", "/proc", "/dev", "/sys") or parent.startswith(("/usr/", "/proc/", "/dev/"))
        if not system:
            args += ["--perms", "0755", "--dir", parent]
    for path in readable:
        if path != "/usr" and not path.startswith("/usr/"):  # /usr is bound already
            args += ["--ro-bind", path, path]
    args += _hidden_libraries(readable)
    for path in writable:
        args += ["--bind", path, path]
    for path, size in scratch.items():
        args += ["--perms", "01777", "--size", str(int(size)), "--tmpfs", path]
    if workdir:
        args += ["--chdir", workdir]
    if isolation.mode == "bwrap+setpriv":
        args += ["--", isolation.setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    else:
        args += ["--"]
    return args + list(argv)


def prepare_writable(isolation: Isolation, *paths: str) -> None:
    """Make the sandbox's writable directories its own (uid 65534 when run as root)."""
    if isolation.mode != "bwrap+setpriv":
        return
    for path in paths:
        for dirpath, dirnames, filenames in os.walk(path):
            os.chown(dirpath, SANDBOX_UID, SANDBOX_GID)
            for name in filenames:
                os.chown(os.path.join(dirpath, name), SANDBOX_UID, SANDBOX_GID)


def python_roots() -> tuple[str, ...]:
    """The directories the sandbox's Python needs to read: its installation and its packages."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    for path in sys.path:
        if path and os.path.isdir(path) and ("site-packages" in path or "dist-packages" in path):
            real = os.path.realpath(path)
            if not any(real == r or real.startswith(r + os.sep) for r in roots):
                roots.add(real)
    # The venv's python is a link into the base installation: bind both at their own paths.
    return tuple(sorted(roots))

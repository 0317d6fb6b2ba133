"""A real systemd for tests: PID 1 of its own PID, mount, cgroup, UTS and IPC namespaces.

Booting a system manager on a shared machine must change nothing outside it. Before systemd
starts, its mount namespace is made private and the whole root read-only in it; /tmp, /run,
/var/tmp, /var/cache, /var/lib/systemd, /var/log/journal and /etc/systemd/system get their own
tmpfs, so nothing systemd, journald or a unit writes reaches the machine. Only `rw` (the test's
folder) is writable. Units that act on the machine (tmpfiles' clean-up of /tmp, sysctl,
sysusers, udev, timers) are masked on top, and systemd starts an empty target: a unit starts
only when asked. /root is re-mounted as a 0755 view holding only the interpreters (.pyenv) and
the shared cache (.cache), so a service user can read them.

What the tests run from (`keep`: the checkout, its venv, the interpreter, the cache) may lie
anywhere, under /tmp or /root too: each kept path those mounts would hide is bound back,
read-only, at its own place (a clone under /tmp works as one under /work does).

Needs root with CAP_SYS_ADMIN (namespaces, mounts) and /lib/systemd/systemd; `why_not` says
exactly what is missing where it cannot run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

SYSTEMD = Path("/lib/systemd/systemd")
MASKED = ("systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service",
          "systemd-tmpfiles-setup-dev-early.service", "systemd-tmpfiles-clean.timer",
          "systemd-sysctl.service", "systemd-sysusers.service", "systemd-remount-fs.service",
          "systemd-modules-load.service", "systemd-update-utmp.service",
          "systemd-journal-flush.service", "systemd-random-seed.service",
          "systemd-machine-id-commit.service", "ldconfig.service", "systemd-hwdb-update.service",
          "systemd-firstboot.service", "systemd-udevd.service", "systemd-udev-trigger.service",
          "apt-daily.timer", "apt-daily-upgrade.timer", "man-db.timer", "e2scrub_all.timer",
          "fstrim.timer", "systemd-binfmt.service", "timers.target", "getty.target",
          "console-getty.service")
SHOWN = (".pyenv", ".cache")  # /root's folders a service user may read
PRIVATE = ("/tmp", "/run", "/var/tmp", "/var/cache", "/var/lib/systemd", "/var/log/journal",
           "/etc/systemd/system")


def hidden(keep: Sequence[Path]) -> list[Path]:
    """The kept paths the boot's own mounts would hide (under a private dir or /root), outside
    one another; /root's .pyenv and .cache stay visible anyway."""
    masked = [Path(d) for d in (*PRIVATE, "/root") if Path(d).is_dir()]
    shown = [Path("/root") / d for d in SHOWN]
    found = sorted({Path(os.path.abspath(p)) for p in keep if Path(p).exists()},
                   key=lambda p: len(p.parts))
    out: list[Path] = []
    for path in found:
        if (any(path.is_relative_to(m) and path != m for m in masked)
                and not any(path.is_relative_to(k) for k in (*out, *shown))):
            out.append(path)
    return out


def boot_script(rw: Path, keep: Sequence[Path] = ()) -> str:
    private = "\n".join(f"mount -n -t tmpfs tmpfs {d}" for d in PRIVATE if Path(d).is_dir())
    masks = "\n".join(f"ln -s /dev/null /etc/systemd/system/{u}" for u in MASKED)
    root = rw / ".root"
    kept = hidden(keep)
    # bound aside before the mounts hide them, then back at their own place on top
    aside = "\n".join(f"mkdir -p {rw}/.keep/{i}\nmount -n --bind {shlex.quote(str(p))} "
                      f"{rw}/.keep/{i}" for i, p in enumerate(kept))
    back = "\n".join(f"mkdir -p {shlex.quote(str(p))}\nmount -n --bind {rw}/.keep/{i} "
                     f"{shlex.quote(str(p))}\nmount -n -o remount,bind,ro {shlex.quote(str(p))}"
                     for i, p in enumerate(kept))
    return f"""#!/bin/sh
set -e
umask 022
mount -n --make-rprivate /
mount -n -o remount,bind,ro /
mount -n --bind {rw} {rw}
mount -n -o remount,bind,rw {rw}
{aside}
{private}
mount -n --bind /root {root}
mount -n -t tmpfs -o mode=0755 tmpfs /root
for d in {" ".join(SHOWN)}; do
  if [ -d {root}/$d ]; then mkdir /root/$d && mount -n --bind {root}/$d /root/$d; fi
done
{back}
mount -n -o remount,bind,ro /root
mount -n -t proc proc /proc
{masks}
printf '[Unit]\\nDescription=specctl test target\\n' > /etc/systemd/system/specctl-test.target
exec env container=specctl-test {SYSTEMD} --system --unit=specctl-test.target
"""


def why_not() -> str | None:
    """Why no manager can run here, or None."""
    if os.geteuid() != 0:
        return "not root: a system manager in its own namespaces needs root with CAP_SYS_ADMIN"
    if not SYSTEMD.is_file():
        return f"{SYSTEMD} is not installed (Debian's systemd package)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--cgroup", "true"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`unshare --pid --fork --mount --cgroup true` failed: {done.stderr.strip()}"
    return None


class Manager:
    """A running systemd; `run` executes a command inside its namespaces."""

    def __init__(self, rw: Path, keep: Sequence[Path] = ()) -> None:
        """`rw`: the one writable folder (not under a private dir); `keep`: what the tests
        read there, left visible wherever it is."""
        assert not any(rw.is_relative_to(d) for d in PRIVATE), f"{rw}: hidden by a tmpfs"
        self.rw = rw
        (rw / ".root").mkdir(parents=True, exist_ok=True)
        script = rw / "boot.sh"
        script.write_text(boot_script(rw, keep))
        script.chmod(0o755)
        self.log = rw / "boot.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount", "--cgroup", "--uts", "--ipc",
                 str(script)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self._init_pid()

    def _init_pid(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                                   text=True, check=False).stdout.split()
            if found and Path(f"/proc/{found[0]}/exe").resolve() == SYSTEMD.resolve():
                pid = int(found[0])
                if self.run(["systemctl", "is-system-running"], pid=pid).stdout.strip() in (
                        "running", "degraded"):
                    return pid
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"systemd did not come up: {self.log.read_text()[-2000:]}")

    def run(self, argv: list[str], env: dict[str, str] | None = None, pid: int | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        target = str(pid or self.pid)
        return subprocess.run(["nsenter", "-t", target, "-m", "-p", "-r", "-w", *argv],
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def stop(self) -> None:
        """Kill the namespace's PID 1: the kernel ends every process in it."""
        found = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                               text=True, check=False).stdout.split()
        for pid in found:
            os.kill(int(pid), signal.SIGKILL)
        self.proc.wait(timeout=30)

"""An emulated aarch64 device for validating cross-built libraries without a board: a Debian arm64 userland
with the aarch64 TVM runtime, run under qemu-user, serving TVM's RPC protocol to a tracker on this machine.

    python scripts/emulated_arm64.py prepare             # build the environment (about 200 MB, once)
    python scripts/emulated_arm64.py serve --key rpi4    # a device registered as rpi4 (and a tracker, if none)

then `MODELBUILD_RPC_TRACKER=127.0.0.1:9190 modelbuild` validates every target with rpc = { key = "rpi4" }
on it. Accuracy measured there is real (the same instructions, emulated); latency is not comparable with any
hardware, so the device says it is emulated and validation applies no latency gate to it.

Needs, on this (x86) machine: qemu-user-static (Debian: `apt-get install qemu-user-static`), apt-get and
dpkg for Debian's arm64 packages, and pip for the aarch64 wheels; no root, no binfmt registration, no board.
Run it with the Python that runs modelbuild: the device gets the same TVM and numpy versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

QEMU = "qemu-aarch64-static"
DEBIAN = "bookworm"  # its python3.11 matches the cp311 wheels below
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# python3.11's interpreter and standard library with what they link, and the C++ runtime TVM needs
PACKAGES = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "media-types",
    "libc6",
    "libstdc++6",
    "libgcc-s1",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libssl3",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
    "libncursesw6",
    "libtinfo6",
    "libsqlite3-0",
    "libcrypt1",
)
WHEEL_PLATFORM = (
    "--platform",
    "manylinux_2_28_aarch64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--only-binary=:all:",
)
DEFAULT_TRACKER = "127.0.0.1:9190"
COMPILER_LIBRARY = "site/tvm/lib/libtvm_compiler.so"
ENVIRONMENT_BROKEN = 4  # modelbuild's exit code for a broken environment


class Unavailable(Exception):
    """Something this machine lacks: one line with what to install."""


def default_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("MODELBUILD_ARM64_ROOT") or cache / "modelbuild" / "arm64-device")


def versions() -> dict[str, str]:
    """The device's TVM and numpy are this machine's, so a library means the same on both sides."""
    return {name: metadata.version(name) for name in ("apache-tvm", "apache-tvm-ffi", "numpy")}


def prepare(base: Path) -> Path:
    """The environment's folder under `base`, built once per set of versions: built in a temporary folder and
    renamed into place, so an interrupted or concurrent prepare never leaves a half-built one in use."""
    wanted = versions()
    root = base / "-".join(f"{k.removeprefix('apache-')}{v}" for k, v in wanted.items())
    if (root / "ready.json").exists():
        return root
    for tool in (QEMU, "apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise Unavailable(
                f"{tool} is not on the path (Debian: apt-get install qemu-user-static; apt-get and "
                "dpkg come with Debian and Ubuntu)"
            )
    if not Path(KEYRING).exists():
        raise Unavailable(f"{KEYRING} is missing (Debian: apt-get install debian-archive-keyring)")
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base, prefix=".building-") as work:
        staging = Path(work) / "root"
        for deb in _debian_packages(Path(work) / "apt"):
            _run(["dpkg", "-x", str(deb), str(staging)], "unpacking " + deb.name)
        _install_wheels(wanted, Path(work) / "wheels", staging / "site")
        # a board runs TVM's runtime only (serve sets TVM_USE_RUNTIME_LIB): the compiler is 240 of the
        # environment's 430 MB and took 4 of the 11 s an emulated import of TVM took
        (staging / COMPILER_LIBRARY).unlink()
        (staging / "ready.json").write_text(json.dumps({"versions": wanted, "debian": DEBIAN}))
        try:
            staging.rename(root)
        except OSError:  # another prepare finished first: its environment is the same
            if not (root / "ready.json").exists():
                raise
    return root


def _debian_packages(apt: Path) -> list[Path]:
    """Debian's arm64 .debs, fetched with a private apt configuration: nothing of the system's apt changes."""
    for sub in ("state/lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    mirror = f"[arch=arm64 signed-by={KEYRING}]"
    (apt / "etc/sources.list").write_text(
        f"deb {mirror} http://deb.debian.org/debian {DEBIAN} main\n"
        f"deb {mirror} http://deb.debian.org/debian-security {DEBIAN}-security main\n"
    )
    options = []
    for key, value in (
        ("APT::Architecture", "arm64"),
        ("APT::Architectures::", "arm64"),
        ("Dir::State", apt / "state"),
        ("Dir::State::status", "/dev/null"),
        ("Dir::Cache", apt / "cache"),
        ("Dir::Etc::sourcelist", apt / "etc/sources.list"),
        ("Dir::Etc::sourceparts", apt / "etc/sources.list.d"),
        ("Dir::Etc::preferencesparts", apt / "etc/preferences.d"),
        ("Debug::NoLocking", "1"),
    ):
        options += ["-o", f"{key}={value}"]
    if os.geteuid() == 0:  # root's apt downloads as _apt, who cannot write into this folder
        options += ["-o", "APT::Sandbox::User=root"]
    _run(["apt-get", "-q", *options, "update"], "apt-get update (Debian's arm64 package lists)")
    _run(
        ["apt-get", "-q", *options, "download", *PACKAGES],
        "apt-get download (Debian's arm64 packages)",
        cwd=apt / "debs",
    )
    return sorted((apt / "debs").glob("*.deb"))


def _install_wheels(wanted: dict[str, str], wheels: Path, site: Path) -> None:
    pip = [sys.executable, "-m", "pip"]
    # TVM's RPC server runs its sessions through popen_pool: the "rpc" extra brings cloudpickle and psutil
    requirements = [
        f"apache-tvm[rpc]=={wanted['apache-tvm']}",
        f"apache-tvm-ffi=={wanted['apache-tvm-ffi']}",
        f"numpy=={wanted['numpy']}",
    ]
    _run(
        [*pip, "download", "-q", "--dest", str(wheels), *WHEEL_PLATFORM, *requirements],
        "pip download (the aarch64 wheels)",
    )
    _run(
        [
            *pip,
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            *WHEEL_PLATFORM,
            *map(str, sorted(wheels.glob("*.whl"))),
        ],
        "pip install --target (the aarch64 wheels)",
    )


def _run(command: list[str], what: str, **kwargs) -> None:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise Unavailable(f"{what} failed: {last[-1] if last else f'exit {done.returncode}'}")


def serve(root: Path, key: str, tracker: str, port: int, cpu: str, threads: int = 1) -> int:
    """Run the device until interrupted; also a tracker at `tracker` when it is on this machine and none
    listens there. Returns the exit code."""
    host, _, tracker_port = tracker.rpartition(":")
    children = []
    if not _listening(host, int(tracker_port)):
        if host not in ("127.0.0.1", "localhost"):
            raise Unavailable(f"no RPC tracker answers at {tracker}; start it there, or serve with a local one")
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tvm.exec.rpc_tracker",
                    "--host",
                    host,
                    "--port",
                    tracker_port,
                    "--port-end",
                    str(int(tracker_port) + 1),
                ],
                start_new_session=True,
            )
        )
    emulator = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    environment = device_environment(dict(os.environ), root, f"{emulator} -cpu {cpu}", cpu, threads)
    children.append(
        subprocess.Popen(
            [
                QEMU,
                "-L",
                str(root),
                str(root / "usr/bin/python3.11"),
                __file__,
                "device",
                "--key",
                key,
                "--tracker",
                tracker,
                "--port",
                str(port),
            ],
            env=environment,
            start_new_session=True,
        )
    )
    print(
        f"emulated aarch64 device {key!r}: registering with the RPC tracker at {tracker} (TVM takes about "
        "10 s to import under emulation); Ctrl-C stops it",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        return next(child.returncode for child in children if child.poll() is not None) or 1
    except KeyboardInterrupt:
        return 130
    finally:
        # each child leads its own process group, and the whole group goes: the tracker serves from a TVM
        # popen_worker and the device forks a process per session, and those outlived a terminated parent
        for child in children:
            _end_group(child)


def device_environment(base: dict[str, str], root: Path, emulator: str, cpu: str, threads: int) -> dict[str, str]:
    """What the device's interpreter runs with. TVM's thread pool gets `threads` threads where it would take
    every core of this machine: a board served here is that many of this machine's cores, so several boards
    served from one machine (N devices tuning one target, bench/rpc_tuning.py) do not each spin a pool over
    all of them. One thread by default: an emulated board's latency is no hardware figure in any case, and
    one board timed its tuning candidates as fast with one thread as with two (2-core host)."""
    return {
        **base,
        "PYTHONPATH": str(root / "site"),
        "PYTHONNOUSERSITE": "1",
        "QEMU_CPU": cpu,
        "TVM_USE_RUNTIME_LIB": "1",
        "TVM_NUM_THREADS": str(threads),
        "MODELBUILD_EMULATOR": emulator,
    }


def _end_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def _listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


def device(key: str, tracker: str, port: int) -> None:
    """The device side, run under qemu: TVM's RPC server in this process. Its stock entry point serves
    through a popen_pool worker, which would exec the arm64 interpreter from inside the emulator, and that
    needs binfmt registered (root); the server's own start function needs only fork."""
    import tvm
    from tvm.base import _LOADED_LIBS
    from tvm.rpc import server
    from tvm_ffi.libinfo import load_lib_ctypes

    # TVM loads its runtime's extras (among them tvm.contrib.random, which MetaSchedule's RPC runner fills
    # a candidate's arguments with) only beside the compiler
    _LOADED_LIBS["tvm_runtime_extra"] = load_lib_ctypes(
        package="tvm",
        target_name="tvm_runtime_extra",
        extra_lib_paths=[Path(tvm.__file__).parent / "lib"],
        mode="RTLD_LOCAL",
    )

    info = {
        "machine": platform.machine(),
        "os": f"Debian {DEBIAN} userland",
        "emulated": os.environ.get("MODELBUILD_EMULATOR", "qemu-user"),
        "threads": int(os.environ.get("TVM_NUM_THREADS", os.cpu_count() or 1)),
    }

    @tvm.register_global_func("modelbuild.device_info")
    def _device_info() -> str:  # asked by modelbuild's validate (measurement/device.py) for its report
        return json.dumps(info)

    host, _, tracker_port = tracker.rpartition(":")
    server._popen_start_rpc_server(
        "127.0.0.1", port, port + 100, tracker_addr=(host, int(tracker_port)), key=key, silent=True
    )
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_parser = commands.add_parser("prepare", help="build the arm64 environment, once")
    prepare_parser.add_argument("--root", type=Path, default=default_root())
    serve_parser = commands.add_parser("serve", help="run an emulated device registered with a tracker")
    serve_parser.add_argument("--root", type=Path, default=default_root())
    serve_parser.add_argument("--key", required=True, help="the device key recipes name: rpc = { key = ... }")
    serve_parser.add_argument("--tracker", default=DEFAULT_TRACKER, help="host:port (default %(default)s)")
    serve_parser.add_argument("--port", type=int, default=9300, help="first port the device may listen on")
    serve_parser.add_argument(
        "--cpu",
        default="max",
        help="qemu's -cpu: max has every Armv8/9 extension; cortex-a72 refuses instructions a Raspberry Pi 4 lacks",
    )
    serve_parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the cores of this machine the device's "
        "kernels run on (default %(default)s: one per board, so several can serve from here)",
    )
    device_parser = commands.add_parser("device")  # internal: what serve runs under qemu
    device_parser.add_argument("--key", required=True)
    device_parser.add_argument("--tracker", required=True)
    device_parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "serve" and args.threads < 1:
        parser.error(f"--threads {args.threads}: a device runs on at least one thread")
    try:
        if args.command == "device":
            device(args.key, args.tracker, args.port)
        root = prepare(args.root)
        if args.command == "prepare":
            print(root)
            return 0
        return serve(root, args.key, args.tracker, args.port, args.cpu, args.threads)
    except Unavailable as err:
        print(f"emulated_arm64: {err}", file=sys.stderr)
        return ENVIRONMENT_BROKEN


if __name__ == "__main__":
    sys.exit(main())

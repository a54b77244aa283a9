"""Small models run through the CLI and the stages, and what the tests do to them."""

from __future__ import annotations

import os

from modelbuild.cli import main


def run_cli(capsys, root, *args) -> tuple[int, str, str]:
    code = main([*args, "-f", str(root / "deploy.toml")])
    out, err = capsys.readouterr()
    return code, out, err


def damage_keeping_mtime(path):
    """Flip one byte and put the old timestamps back, as bit rot leaves a file."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

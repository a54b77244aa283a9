"""The S3-compatible server the tests start (moto's server mode, on 127.0.0.1), as a client sees it."""

from __future__ import annotations

import fsspec


def s3():
    """A fresh client: fsspec would otherwise reuse one made under another test's environment."""
    return fsspec.filesystem("s3", skip_instance_cache=True)

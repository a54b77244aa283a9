"""Action entries that vouch for themselves: a digest of their content, and optionally a team's signature.

An entry names the objects a stage produced. Its digest catches an entry damaged or edited by hand (one
rewritten to point at another object); a signature (HMAC-SHA256 with a key from the environment) catches one
written by someone without the key, so a pull request that can write to a shared cache cannot plant a library
that trusted builds then load.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os

from modelbuild.hashing import canonical_json, sha256_text

SIGNING_KEY_ENV = "MODELBUILD_CACHE_SIGNING_KEY"
_SEALS = ("digest", "signature")


def signing_key() -> bytes | None:
    """The team's key, from the environment only: never in a recipe, a log or a report."""
    key = os.environ.get(SIGNING_KEY_ENV)
    return key.encode() if key else None


def seal(entry: dict, key: bytes | None) -> bytes:
    """The entry as stored: its fields, their digest and, with a key, their signature."""
    body = canonical_json(entry)
    sealed = {**entry, "digest": sha256_text(body)}
    if key is not None:
        sealed["signature"] = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    return canonical_json(sealed).encode()


def unseal(data: bytes, key: bytes | None) -> dict | None:
    """The entry's fields if its digest holds and, where a key is configured, its signature does; else None."""
    try:
        sealed = json.loads(data)
    except ValueError:
        return None
    if not isinstance(sealed, dict):
        return None
    entry = {k: v for k, v in sealed.items() if k not in _SEALS}
    body = canonical_json(entry)
    if sealed.get("digest") != sha256_text(body):
        return None
    if key is not None:
        expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(str(sealed.get("signature", "")), expected):
            return None
    return entry

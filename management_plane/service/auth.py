"""API keys: `kaas_<key id>_<secret>`, stored as the SHA-256 of the whole key.

The secret is 32 random bytes, so a fast hash is enough (there is nothing to brute-force
that a slow hash would protect); the key id finds the row without scanning.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from management_plane.service.db import Database

ADMIN_KEY_FILE = "admin-key"


@dataclass(frozen=True)
class Caller:
    key_id: str
    name: str
    role: str
    tenant: str | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    key_id = secrets.token_hex(8)
    return key_id, f"kaas_{key_id}_{secrets.token_urlsafe(32)}"


def authenticate(db: Database, key: str | None) -> Caller | None:
    if not key or not key.startswith("kaas_"):
        return None
    parts = key.split("_", 2)
    if len(parts) != 3:
        return None
    row = db.api_key(parts[1])
    if row is None or not hmac.compare_digest(row["key_hash"], hash_key(key)):
        return None
    return Caller(row["key_id"], row["name"], row["role"], row["tenant"])


def ensure_admin_key(db: Database, home: Path) -> str | None:
    """Make the admin key at the first start: stored hashed, written once to a 0600 file
    under the service home, and returned so that the caller prints it once. None when an
    admin key exists already."""
    if db.count_api_keys("admin") > 0:
        return None
    key_id, key = new_key()
    db.add_api_key(key_id, "admin", "admin", hash_key(key))
    home.mkdir(parents=True, exist_ok=True)
    path = home / ADMIN_KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    path.chmod(0o600)
    return key

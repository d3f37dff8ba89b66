"""API keys: `kaas_<key id>_<secret>`, stored as the SHA-256 of the whole key.

The secret is 32 random bytes, so a fast hash is enough (there is nothing to brute-force
that a slow hash would protect); the key id finds the row without scanning.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from management_plane.service.db import Database
from planner.private_files import private_dir, write_private

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
    """Make the admin key at the first start: written to a 0600 file under the (0700)
    service home, then stored hashed, and returned (the caller says where it is, never what
    it is). None when an admin key exists already. The file comes first: a start that stops
    between the two leaves no stored key that nobody holds, and the next start makes one."""
    if db.count_api_keys("admin") > 0:
        return None
    key_id, key = new_key()
    write_private(private_dir(home) / ADMIN_KEY_FILE, key + "\n")
    db.add_api_key(key_id, "admin", "admin", hash_key(key))
    return key

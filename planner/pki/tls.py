"""A TLS client context for an identity (planner.pki.files): it presents the identity's
certificate and trusts only the identity's bundle, the cluster's CA. Shared by every KaaS
client of a TLS server that requires a client certificate (ZooKeeper's four-letter words,
Jolokia)."""

from __future__ import annotations

import hashlib
import ssl
import threading
from pathlib import Path

from planner.pki.files import IdentityFiles

# Parsing the bundle, certificate and key into a context is a share of every probe's CPU
# beside the handshake (an agent probes every ZooKeeper server each cycle), so a context is
# kept while its three files hold the same bytes; a rotation rewrites them, and the next call
# makes a new one. The files' contents are the key, not their inode, mtime and size: a
# rewrite by rename can reuse a freed inode within one clock tick at the same size.
_CACHE_SIZE = 32
_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}
_lock = threading.Lock()


def _file_key(path: Path) -> tuple[str, bytes]:
    return (str(path), hashlib.sha256(path.read_bytes()).digest())


def _new_context(identity: IdentityFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(identity.trust_bundle))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(identity.certificate), str(identity.key))
    return context


def client_context(identity: IdentityFiles) -> ssl.SSLContext:
    try:
        key = tuple(
            _file_key(path) for path in (identity.trust_bundle, identity.certificate, identity.key)
        )
    except OSError:
        return _new_context(identity)  # raises the error that names the missing file
    with _lock:
        context = _contexts.get(key)
    if context is None:
        context = _new_context(identity)
        with _lock:
            if len(_contexts) >= _CACHE_SIZE:
                _contexts.pop(next(iter(_contexts)))
            _contexts[key] = context
    return context

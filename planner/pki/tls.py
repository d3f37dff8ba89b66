"""A TLS client context for an identity (planner.pki.files): it presents the identity's
certificate and trusts only the identity's bundle, the cluster's CA. Shared by every KaaS
client of a TLS server that requires a client certificate (ZooKeeper's four-letter words,
Jolokia)."""

from __future__ import annotations

import ssl

from planner.pki.files import IdentityFiles


def client_context(identity: IdentityFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(identity.trust_bundle))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(identity.certificate), str(identity.key))
    return context

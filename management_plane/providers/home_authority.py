"""The HoldsClusterAuthority capability of a provider that keeps each cluster's CA, staged CA
and the management plane's identity in a folder of the cluster's own (local clusters: their
home; aws clusters: a folder in the service's home)."""

from __future__ import annotations

from pathlib import Path

from management_plane.local import tls
from planner.pki.authority import Authority, IssuedCertificate
from planner.pki.files import load_authority


class HomeAuthorities:
    def cluster_home(self, cluster: str) -> Path:
        raise NotImplementedError

    def cluster_authority(self, cluster: str) -> Authority:
        return load_authority(tls.authority_dir_in(self.cluster_home(cluster)))

    def staged_authority(self, cluster: str) -> Authority | None:
        return tls.staged_authority(self.cluster_home(cluster))

    def stage_authority(self, cluster: str, authority: Authority) -> None:
        tls.stage_authority(self.cluster_home(cluster), authority)

    def promote_authority(self, cluster: str) -> None:
        tls.promote_authority(self.cluster_home(cluster))

    def install_admin_identity(
        self, cluster: str, issued: IssuedCertificate | None, trust_bundle_pem: bytes
    ) -> None:
        tls.install_admin_identity(self.cluster_home(cluster), issued, trust_bundle_pem)

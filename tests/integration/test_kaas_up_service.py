"""`kaas up` starts the management plane beside the local cluster, once: the service adopts
the cluster (the API lists it with its VMs and broker ids), `kaas status` shows its URL, a
second `kaas up` starts no second service, and `kaas down` stops it."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from management_plane.local.background_service import running_service
from management_plane.local.processes import is_alive
from management_plane.service.tls import api_client_context
from tests.harness import SCRATCH_BASE, kaas_cli
from tests.mp_service import free_port

pytestmark = pytest.mark.integration


def system_trust_store() -> str:
    """The system's trust store: what a client that does not know the service's CA uses."""
    return ssl.get_default_verify_paths().openssl_cafile


def call(url: str, method: str, path: str, key: str, trust: Path) -> tuple[int, Any]:
    request = urllib.request.Request(url + path, method=method, headers={"X-API-Key": key})
    try:
        context = api_client_context(trust)
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_kaas_up_starts_one_service_that_manages_the_cluster_and_down_stops_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "c"
    port = free_port()
    up = ("up", "--nodes", "1", "--name", "upsvc", "--address-base", SCRATCH_BASE)
    try:
        first = kaas_cli(*up, "--home", str(home), "--service-port", str(port))
        assert first.returncode == 0, first.stderr
        url = f"https://127.0.0.1:{port}"
        assert f"management plane started: {url}" in first.stdout
        key_file = home.resolve() / "service" / "admin-key"
        assert f"admin API key: in {key_file}" in first.stdout
        assert f"dashboard: {url}/dashboard" in first.stdout
        service = running_service(home)
        assert service is not None and service.url == url
        key = key_file.read_text().strip()
        trust = service.trust_bundle
        # The API speaks HTTPS only, with a certificate of the service's own CA.
        with pytest.raises(urllib.error.URLError):
            call(url, "GET", "/v1/clusters", key, Path(system_trust_store()))
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(url.replace("https://", "http://") + "/v1/health", timeout=10)

        status, clusters = call(url, "GET", "/v1/clusters", key, trust)
        assert status == 200, clusters
        assert [(c["name"], c["status"]) for c in clusters] == [("upsvc", "running")]
        assert [(vm["vm_id"], vm["broker_id"]) for vm in clusters[0]["vms"]] == [("upsvc/vm1", 0)]
        assert call(url, "GET", "/v1/clusters", "wrong", trust)[0] == 401
        status, refused = call(url, "DELETE", "/v1/clusters/upsvc", key, trust)
        assert status == 409 and "kaas down" in refused["message"], refused

        second = kaas_cli(*up, "--home", str(home))
        assert second.returncode == 0, second.stderr
        assert f"management plane already running: {url}" in second.stdout
        again = running_service(home)
        assert again is not None and again.record == service.record

        shown = kaas_cli("status", "--home", str(home))
        assert shown.returncode == 0, shown.stderr
        assert f"management plane: {url}" in shown.stdout

        down = kaas_cli("down", "--home", str(home))
        assert down.returncode == 0, down.stderr
        assert not is_alive(service.record)
        assert running_service(home) is None
    finally:
        kaas_cli("down", "--purge", "--home", str(home))

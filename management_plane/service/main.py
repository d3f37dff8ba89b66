"""`kaas serve`: open the database, make the admin key at first start, resume unfinished
operations, and serve the API with uvicorn."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import structlog
import uvicorn

from management_plane.local.image import find_java, load_image
from management_plane.providers.local import LocalProvider
from management_plane.service.api import create_app
from management_plane.service.auth import ADMIN_KEY_FILE, ensure_admin_key
from management_plane.service.db import Database
from management_plane.service.service import Service
from management_plane.service.tenant_service import TENANT_KINDS, TenantService
from management_plane.tenants.kafka import KafkaTenants
from management_plane.tenants.quotas import UserQuotaTool

log = structlog.get_logger("kaas.serve")

DEFAULT_LOCAL_ADDRESS_BASES = tuple(f"127.0.{n}" for n in range(2, 11))


@dataclass(frozen=True)
class ServeSettings:
    home: Path
    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str | None = None
    """default: SQLite (WAL) at HOME/kaas.db"""
    local_address_bases: tuple[str, ...] = DEFAULT_LOCAL_ADDRESS_BASES
    poll_interval_s: float = 2.0
    run_engine: bool = True
    """False: accept and store operations without running them (API tests, maintenance)"""


def kafka_tenants(internal_bootstrap: str, tenant_bootstrap: str) -> KafkaTenants:
    """The tenants adapter of one cluster; quotas go through ConfigCommand from the Kafka libs
    of the image on the service's host (docs/tenants.md)."""
    return KafkaTenants(
        admin_bootstrap=internal_bootstrap,
        tenant_bootstrap=tenant_bootstrap,
        quotas=UserQuotaTool(
            java=str(find_java()),
            kafka_libs=load_image(verify=False).kafka_libs(),
            bootstrap=internal_bootstrap,
        ),
    )


def build_service(settings: ServeSettings) -> tuple[Service, str | None]:
    home = settings.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    url = settings.database_url or f"sqlite:///{home / 'kaas.db'}"
    db = Database(url)
    provider = LocalProvider(home / "local", settings.local_address_bases)
    service = Service(home, db, provider)
    service.engine.poll_interval_s = settings.poll_interval_s
    service.tenants = TenantService(db, kafka_tenants)
    service.engine.inline_kinds = TENANT_KINDS
    service.engine.resume_inline = service.tenants.resume
    return service, ensure_admin_key(db, home)


def serve(settings: ServeSettings) -> int:
    service, admin_key = build_service(settings)
    if admin_key is not None:
        print(
            f"admin API key (shown once; also in {settings.home.resolve() / ADMIN_KEY_FILE}, mode 0600):\n"
            f"{admin_key}",
            flush=True,
        )
    unfinished = service.db.unfinished_operations()
    if unfinished:
        log.info("resuming_operations", ids=[op.op_id for op in unfinished])
    if settings.run_engine:
        service.engine.start()
    else:
        log.warning("engine_paused", note="operations are stored, not run")
    print(f"kaas serve: listening on http://{settings.host}:{settings.port}", flush=True)
    try:
        uvicorn.run(
            create_app(service),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
        )
    finally:
        service.engine.stop()
        service.db.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(ServeSettings(home=Path(sys.argv[1]))))

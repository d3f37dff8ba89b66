"""A real headless browser for the tests: Debian's chromium driven by selenium through
Debian's chromedriver (both installed by `make setup`), trusting exactly one server
certificate (its public key pinned), with the page's console collected."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def spki_pin(certificate_pem: bytes) -> str:
    """Chromium's pin of a certificate's public key: base64 of the SHA-256 of its SPKI."""
    key = x509.load_pem_x509_certificate(certificate_pem).public_key()
    der = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@contextmanager
def headless_chromium(profile: Path, server_certificate: Path) -> Iterator[webdriver.Chrome]:
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "make setup installs chromium"
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests may run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1700",
        f"--user-data-dir={profile}",
        "--ignore-certificate-errors-spki-list=" + spki_pin(server_certificate.read_bytes()),
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    log = profile.parent / "chromedriver.log"
    driver = webdriver.Chrome(
        options=options, service=Service(str(CHROMEDRIVER), log_output=str(log))
    )
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: webdriver.Chrome) -> list[str]:
    return [str(e["message"]) for e in driver.get_log("browser") if e["level"] == "SEVERE"]

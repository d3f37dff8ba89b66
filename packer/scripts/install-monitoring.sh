#!/usr/bin/env bash
# The monitoring host's daemons: Etsy statsd (npm) into DIR/statsd, and Debian's carbon,
# graphite-web (the render API) and gunicorn. Idempotent: installs only what is missing.
set -euo pipefail
DIR=${1:?usage: install-monitoring.sh DIR}
STATSD_VERSION=0.9.0
DEBIAN_PACKAGES=(graphite-carbon graphite-web gunicorn)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-monitoring: run as root, or install: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  # Debian's graphite-carbon ships its system service disabled; KaaS runs its own carbon.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi

command -v node >/dev/null || { echo "install-monitoring: node (Node.js) not found on PATH" >&2; exit 1; }
installed=$(node -p "require('$DIR/statsd/node_modules/statsd/package.json').version" 2>/dev/null || true)
if [[ $installed != "$STATSD_VERSION" ]]; then
  mkdir -p "$DIR/statsd"
  npm install --prefix "$DIR/statsd" --no-audit --no-fund --ignore-scripts --loglevel=error "statsd@$STATSD_VERSION" >/dev/null
fi
echo "monitoring: statsd $STATSD_VERSION, $(dpkg-query -W -f='${Package} ${Version} ' "${DEBIAN_PACKAGES[@]}")"

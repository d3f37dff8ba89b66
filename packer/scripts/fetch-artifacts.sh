#!/usr/bin/env bash
# Fetch every JVM artifact pinned in packer/pom.xml from Maven Central into the artifact
# cache, one folder per profile, each with a SHA256SUMS file written after Maven has checked
# the registry's checksums (-C). Idempotent: a folder whose pom hash matches and whose
# SHA256SUMS verifies is left alone; a corrupt or partial folder is fetched again.
#
#   fetch-artifacts.sh [CACHE_DIR]     (default: ${KAAS_CACHE:-$HOME/.cache/kaas}/jvm)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
pom="$here/pom.xml"
settings="$here/maven-settings.xml"
cache=${1:-${KAAS_CACHE:-$HOME/.cache/kaas}/jvm}
profiles=(kafka kafka-previous kafka-kraft mirror mirror-kraft zookeeper jolokia spark-kafka)

command -v mvn >/dev/null || { echo "fetch-artifacts: mvn not found on PATH (install Maven 3.8+)" >&2; exit 1; }
pom_hash=$(sha256sum "$pom" | cut -d' ' -f1)
mkdir -p "$cache"

fetch_profile() {
  local profile=$1 dest="$cache/$1"
  if [[ -f "$dest/.pom-sha256" && "$(cat "$dest/.pom-sha256")" == "$pom_hash" ]] \
     && (cd "$dest" && sha256sum --quiet --strict -c SHA256SUMS >/dev/null 2>&1); then
    return 0
  fi
  echo "fetch-artifacts: fetching profile $profile into $dest"
  local tmp
  tmp=$(mktemp -d "$cache/.$profile.XXXXXX")
  # A jar corrupted inside the local Maven repository would be copied again as it is:
  # drop this profile's stale copy first when the folder failed verification.
  if [[ -f "$dest/SHA256SUMS" ]]; then
    (cd "$dest" && sha256sum --quiet -c SHA256SUMS 2>/dev/null || true) | sed -n 's/: FAILED.*//p' \
      | while read -r jar; do
          find "${MAVEN_REPO:-$HOME/.m2/repository}" -name "$jar" -delete 2>/dev/null || true
        done
  fi
  mvn -B -q -C -Dstyle.color=never -gs "$settings" -f "$pom" -P "$profile" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
  (cd "$tmp" && sha256sum -- *.jar > SHA256SUMS)
  echo "$pom_hash" > "$tmp/.pom-sha256"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}

for profile in "${profiles[@]}"; do
  fetch_profile "$profile"
done
echo "fetch-artifacts: cache ready at $cache"

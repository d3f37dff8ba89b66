#!/usr/bin/env bash
# The provisioning steps of a KaaS VM image. Packer runs them on the EC2 builder with
# ROOT=/ and --system; `make setup` runs the same script into a local folder (the local
# provider's "image"), which skips only the steps that need a real machine (packages,
# users, enabling units). With --agent-wheel the agent goes into ROOT/opt/kaas/venv with
# the wheel's `agent` extra only (no Spark, no web stack), pinned by --constraints.
#
#   provision.sh --root ROOT --artifacts CACHE_DIR [--system] [--agent-wheel FILE --constraints FILE] [--python PY]
#
# --python: a Python with kaas installed, which renders the image's configuration files
# (default with --agent-wheel: the agent's virtual environment; without either: none written).
set -euo pipefail

root="" artifacts="" system=0 agent_wheel="" constraints="" python=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --root) root=$2; shift 2 ;;
    --artifacts) artifacts=$2; shift 2 ;;
    --system) system=1; shift ;;
    --agent-wheel) agent_wheel=$2; shift 2 ;;
    --constraints) constraints=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    *) echo "provision: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $root && -n $artifacts ]] || { echo "provision: --root and --artifacts are required" >&2; exit 2; }
if (( system )) && [[ -z $agent_wheel ]]; then
  echo "provision: --system needs --agent-wheel" >&2; exit 2
fi
if [[ -n $agent_wheel && -z $constraints ]]; then
  echo "provision: --agent-wheel needs --constraints (the pinned versions)" >&2; exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)

# Step 1 (system only): the Java runtime and the service account.
if (( system )); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q openjdk-17-jre-headless python3-venv
  id kafka >/dev/null 2>&1 || useradd --system --home-dir /var/lib/kaas --shell /usr/sbin/nologin kafka
  install -d -o kafka -g kafka /var/lib/kaas /var/log/kaas
fi

# Step 2: verify the artifact cache before anything is laid out from it.
for set in kafka kafka-previous kafka-kraft mirror mirror-kraft zookeeper jolokia spark-kafka; do
  [[ -f "$artifacts/$set/SHA256SUMS" ]] || { echo "provision: artifact set $set missing in $artifacts (run packer/scripts/fetch-artifacts.sh)" >&2; exit 1; }
  (cd "$artifacts/$set" && sha256sum --quiet --strict -c SHA256SUMS >/dev/null) \
    || { echo "provision: artifact set $set in $artifacts is corrupt (run packer/scripts/fetch-artifacts.sh)" >&2; exit 1; }
done

version_of() { # version_of DIR JAR_PREFIX -> the version in DIR/JAR_PREFIX-<version>.jar
  local jar
  jar=$(cd "$1" && ls "$2"-[0-9]*.jar | head -n 1)
  jar=${jar#"$2"-}
  echo "${jar%.jar}"
}
kafka_version=$(version_of "$artifacts/kafka" kafka_2.13)
kafka_previous_version=$(version_of "$artifacts/kafka-previous" kafka_2.13)
kafka_kraft_version=$(version_of "$artifacts/kafka-kraft" kafka_2.13)
zookeeper_version=$(version_of "$artifacts/zookeeper" zookeeper)
jolokia_version=$(version_of "$artifacts/jolokia" jolokia-agent-jvm)
jolokia_version=${jolokia_version%-javaagent}
spark_kafka_version=$(version_of "$artifacts/spark-kafka" spark-sql-kafka-0-10_2.13)

# Hard links where the cache shares the file system, copies elsewhere.
place() { # place SRC_DIR DEST_DIR
  rm -rf "$2"
  mkdir -p "$2"
  cp -l "$1"/*.jar "$2"/ 2>/dev/null || cp "$1"/*.jar "$2"/
}

# Step 3: the JVM artifacts.
opt="${root%/}/opt/kaas"
mkdir -p "$opt"
place "$artifacts/kafka" "$opt/kafka/$kafka_version/libs"
place "$artifacts/kafka-previous" "$opt/kafka/$kafka_previous_version/libs"
place "$artifacts/kafka-kraft" "$opt/kafka/$kafka_kraft_version/libs"
place "$artifacts/mirror" "$opt/mirror/$kafka_version/libs"
place "$artifacts/mirror-kraft" "$opt/mirror/$kafka_kraft_version/libs"
place "$artifacts/zookeeper" "$opt/zookeeper/lib"
place "$artifacts/spark-kafka" "$opt/spark/jars"
mkdir -p "$opt/jolokia"
cp "$artifacts/jolokia"/jolokia-agent-jvm-*-javaagent.jar "$opt/jolokia/jolokia-agent.jar"

# Step 4: the systemd units.
mkdir -p "$root/etc/systemd/system"
install -m 0644 "$repo"/systemd/*.service "$root/etc/systemd/system/"

# Step 5: the agent in its own virtual environment (its extra only); on a real machine,
# the units enabled.
if [[ -n $agent_wheel ]]; then
  python3 -m venv "$opt/venv"
  "$opt/venv/bin/pip" install --quiet --constraint "$constraints" "$(realpath "$agent_wheel")[agent]"
  python=${python:-$opt/venv/bin/python}
fi
if (( system )); then
  systemctl daemon-reload
  systemctl enable kaas-boot-identity.service kaas-agent.service
  # The VM's identity: the agent writes its key there at first start (from its boot ticket).
  install -d -m 0700 "$root/etc/kaas/tls"
fi

# Step 6: the configuration files every VM carries (Kafka's log4j, ZooKeeper's zoo.cfg and
# logback), from the renderer the agent and `kaas up` use; the VM renders the rest once it
# knows its identity.
if [[ -n $python ]]; then
  "$python" -m planner.contracts.vm_config image-files --root "$root"
fi

# Step 7: the image manifest, read by the agent and the local provider.
cat > "$opt/image.json" <<JSON
{
  "schema_version": 1,
  "kafka_versions": {
    "$kafka_version": "opt/kaas/kafka/$kafka_version/libs",
    "$kafka_previous_version": "opt/kaas/kafka/$kafka_previous_version/libs",
    "$kafka_kraft_version": "opt/kaas/kafka/$kafka_kraft_version/libs"
  },
  "mirror_versions": {
    "$kafka_version": "opt/kaas/mirror/$kafka_version/libs",
    "$kafka_kraft_version": "opt/kaas/mirror/$kafka_kraft_version/libs"
  },
  "default_kafka_version": "$kafka_version",
  "zookeeper_version": "$zookeeper_version",
  "zookeeper_lib": "opt/kaas/zookeeper/lib",
  "jolokia_version": "$jolokia_version",
  "jolokia_agent": "opt/kaas/jolokia/jolokia-agent.jar",
  "spark_kafka_version": "$spark_kafka_version",
  "spark_jars": "opt/kaas/spark/jars"
}
JSON
if [[ -n $python ]]; then
  # With the Java that runs them: each server started once, its classes archived for the
  # next starts (planner/contracts/vm_config/class_archive.py).
  # Only start-up time depends on them: without them every JVM still runs.
  "$python" -m planner.contracts.vm_config class-archives --root "$root" \
    || echo "provision: class archives not recorded: JVMs start without them (slower)" >&2
fi
(cd "$root" && find opt/kaas \( -name '*.jar' -o -name '*.jsa' \) -print0 | sort -z | xargs -0 sha256sum > opt/kaas/SHA256SUMS)
echo "provision: image ready at $root (kafka $kafka_version, $kafka_previous_version and $kafka_kraft_version, zookeeper $zookeeper_version, jolokia $jolokia_version)"

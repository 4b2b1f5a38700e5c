#!/usr/bin/env bash
# Installs the system packages LakeVilla for Jupyter needs, only when missing:
# Java 17+ (Spark Connect server), Graphviz (DAG rendering), Chromium (browser tests).
set -euo pipefail

missing=()
java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [ -n "$v" ] && [ "$v" -ge 17 ]
}
java_ok || missing+=(openjdk-17-jre-headless)
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
if [ -z "${LV_SKIP_CHROMIUM:-}" ]; then
  [ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ] || missing+=(chromium)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "sysdeps: Java 17+, Graphviz and Chromium present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sysdeps: missing system packages: ${missing[*]}" >&2
  echo "sysdeps: install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "sysdeps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

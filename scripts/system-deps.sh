#!/usr/bin/env bash
# System tools the test suite uses, from Debian's packages: kcat (client round trips),
# Java 17 (PySpark), Chromium (console tests), etcd (etcd-server: cluster metadata), nft
# (nftables: `yak chaos` network partitions), libfaketime (`yak chaos` clock jumps) and
# venv support for Python. Installs only what is missing; needs root (or sudo) on
# Debian/Ubuntu, otherwise says what to install.
set -euo pipefail
need=()
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || need+=(etcd-server)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(libfaketime)
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: please install ${need[*]} (no apt-get here)" >&2; exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q "${need[@]}"

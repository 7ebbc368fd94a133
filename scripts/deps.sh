#!/bin/sh
# Installs the Debian packages peerboot needs (the list comes from `peerboot doctor
# --packages`), only when some are missing.
set -eu
pkgs="$1"
# (The list includes what only the tests need: docker-registry, PostgreSQL, Chromium,
# the cross-checking tools; a test that misses one fails under CI=true.)
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing

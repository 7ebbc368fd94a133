#!/bin/sh
# Installs the Debian packages it is given (`make deps`: `peerboot doctor
# --packages`, what building needs; `make test-deps`: `--packages --all`, also
# signing, QEMU and the tests), only when some are missing.
set -eu
pkgs="$1"
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

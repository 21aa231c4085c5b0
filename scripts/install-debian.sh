#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install rsiw on Debian (trixie with its backports kernel) through DKMS, so that it is
# rebuilt for every kernel installed later.
#
#   sudo scripts/install-debian.sh               # for the running kernel
#   sudo KVER=7.3.4+deb13-amd64 scripts/install-debian.sh
#   sudo scripts/install-debian.sh --uninstall   # remove rsiw for every kernel
#
# Checks first that the kernel has Rust support and that the backports suite is
# configured; installs the toolchain, DKMS, the linux-source and linux-headers of the
# kernel's exact version and the RDMA user space (ibverbs-providers, rdmacm-utils,
# perftest); copies the sources to /usr/src/rsiw-VERSION and runs `dkms install`. DKMS
# rebuilds the Rust metadata Debian's headers lack (scripts/dkms-kbuild.sh, about 2
# minutes per kernel), builds, strips, signs (Secure Boot: see README.md) and installs
# rsiw.ko. The build does not turn warnings into errors (the project's CI does).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ver=$(cat "$top/VERSION")
log() { printf '[install-debian] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get, /usr/src, dkms)"

if [ "${1:-}" = --uninstall ]; then
	if command -v dkms >/dev/null && dkms status rsiw 2>/dev/null | grep -q .; then
		log "removing rsiw/$ver from every kernel (dkms remove)"
		dkms remove "rsiw/$ver" --all || true
	fi
	rm -rf "/usr/src/rsiw-$ver"
	log "rsiw uninstalled (the kernel build trees it made went with it)"
	exit 0
fi

KVER=${KVER:-$(uname -r)}
case "$KVER" in *+deb*-*) ;; *) die "kernel $KVER is not a Debian kernel; use 'make KDIR=...' instead" ;; esac
config=/boot/config-$KVER
[ -f "$config" ] || die "no $config: is linux-image-$KVER installed?"
grep -q '^CONFIG_RUST=y' "$config" ||
	die "kernel $KVER has no Rust support (CONFIG_RUST=y); Debian's trixie-backports kernels have it"
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
apt-cache policy 2>/dev/null | grep -q "a=$suite-backports\|n=$suite-backports" ||
	die "the $suite-backports suite is not configured: add it to /etc/apt/sources.list.d/ (see README.md)"

# linux-source of the image's exact Debian version: its tree must give the same
# kernel.release and match the image's symbols.
imgver=$(dpkg-query -W -f '${Version}' "linux-image-$KVER" 2>/dev/null) ||
	die "linux-image-$KVER is not installed as a package"
series=$(echo "${KVER%%+*}" | cut -d. -f1,2)
log "installing the toolchain, DKMS, linux-source-$series=$imgver and the RDMA user space"
apt-get update -qq
apt-get install -y --no-install-recommends build-essential bc bison flex libelf-dev libssl-dev \
	rustc rust-src bindgen clang libclang-dev llvm lld dwarves rsync kmod xz-utils dkms openssl \
	ibverbs-providers rdmacm-utils perftest
apt-get install -y --no-install-recommends -t "$suite-backports" \
	"linux-source-$series=$imgver" "linux-headers-$KVER"

src=/usr/src/rsiw-$ver
log "copying the sources to $src"
if dkms status "rsiw/$ver" 2>/dev/null | grep -q .; then
	dkms remove "rsiw/$ver" --all || true
fi
rm -rf "$src"
mkdir -p "$src"
cp -r "$top/Kbuild" "$top/Makefile" "$top/VERSION" "$top/LICENSE" "$top/dkms.conf" \
	"$top/rust" "$top/include" "$top/scripts" "$src/"
# The kernel tree DKMS builds against, prepared here so that a mismatch (rustc, source
# version) stops with its message before DKMS starts; DKMS's PRE_BUILD then reuses it.
"$src/scripts/dkms-kbuild.sh" "$KVER"
dkms add "rsiw/$ver"
log "dkms install rsiw/$ver for $KVER (the first build of a kernel takes a few minutes)"
dkms install "rsiw/$ver" -k "$KVER"
log "installed; try: rdma link add rsiw0 type rsiw netdev eth0"

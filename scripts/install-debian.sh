#!/usr/bin/env bash
# Build and install rsiw for the running Debian kernel (trixie with the backports kernel).
#
# Debian's kernel is built with CONFIG_RUST=y, but its linux-headers package lacks the Rust
# metadata (rust/*.rmeta, scripts/target.json) out-of-tree Rust modules need.  This script
# rebuilds that metadata from the matching linux-source package with Debian's own .config,
# builds rsiw against it, installs it under /lib/modules/$KVER/updates and runs depmod.
# With Secure Boot on, it signs the module with the DKMS MOK key (see README).
#
#   sudo scripts/install-debian.sh            # for the running kernel
#   sudo KVER=7.3.4+deb13-amd64 scripts/install-debian.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
KVER=${KVER:-$(uname -r)}
KBUILD=${KBUILD:-/usr/src/rsiw-kbuild-$KVER}
log() { printf '[install-debian] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get, /usr/src, /lib/modules)"
case "$KVER" in *+deb*-*) ;; *) die "kernel $KVER is not a Debian kernel; use 'make KDIR=...' instead" ;; esac
upstream=${KVER%%+*}                    # 7.3.4
series=$(echo "$upstream" | cut -d. -f1,2) # 7.3
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")

log "installing the toolchain and linux-source-$series ($suite-backports)"
apt-get update -qq
apt-get install -y --no-install-recommends build-essential bc bison flex libelf-dev libssl-dev \
	rustc rust-src rust-clippy bindgen clang libclang-dev llvm lld dwarves rsync kmod xz-utils
apt-get install -y --no-install-recommends -t "$suite-backports" "linux-source-$series" \
	"linux-headers-$KVER"

H=/usr/src/linux-headers-$KVER
if [ ! -f "$KBUILD/.rsiw-complete" ]; then
	log "rebuilding the Rust metadata in $KBUILD (about 2 minutes)"
	rm -rf "$KBUILD"
	mkdir -p "$KBUILD"
	tar -C "$KBUILD" --strip-components=1 -xf "/usr/src/linux-source-$series.tar.xz"
	cp "$H/.config" "$KBUILD/.config"
	cp "$H/.kernelvariables" "$KBUILD/.kernelvariables" 2>/dev/null || true
	make -C "$KBUILD" -j"$(nproc)" olddefconfig prepare modules_prepare
	cp "$H/Module.symvers" "$KBUILD/Module.symvers"
	rel=$(cat "$KBUILD/include/config/kernel.release")
	[ "$rel" = "$KVER" ] || die "linux-source-$series gives kernel.release $rel, not $KVER: install the matching linux-source version"
	touch "$KBUILD/.rsiw-complete"
fi

log "building rsiw.ko"
make -C "$top" KDIR="$KBUILD" CLIPPY=1
dest=/lib/modules/$KVER/updates
install -D -m 0644 "$top/rsiw.ko" "$dest/rsiw.ko"

if command -v mokutil >/dev/null 2>&1 && mokutil --sb-state 2>/dev/null | grep -q enabled; then
	key=${MOK_KEY:-/var/lib/dkms/mok.key}
	crt=${MOK_CERT:-/var/lib/dkms/mok.pub}
	[ -f "$key" ] && [ -f "$crt" ] ||
		die "Secure Boot is on: create and enroll a MOK first (dkms generate_mok; mokutil --import $crt; reboot)"
	log "Secure Boot: signing with $crt"
	"$KBUILD/scripts/sign-file" sha256 "$key" "$crt" "$dest/rsiw.ko"
fi
depmod -a "$KVER"
log "installed $dest/rsiw.ko; try: rdma link add rsiw0 type rsiw netdev eth0"

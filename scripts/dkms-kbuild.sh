#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# DKMS PRE_BUILD and POST_REMOVE step of rsiw (dkms.conf): the kernel build tree rsiw is
# compiled against.
#
# Debian builds its kernel with CONFIG_RUST=y, but its linux-headers package lacks the Rust
# metadata (rust/*.rmeta, scripts/target.json) an out-of-tree Rust module needs. This
# rebuilds it in /usr/src/rsiw-kbuild-KVER from the matching linux-source package with
# Debian's own .config and Module.symvers (about 2 minutes), once per kernel version.
#
#   scripts/dkms-kbuild.sh KVER            prepare (or reuse) /usr/src/rsiw-kbuild-KVER
#   scripts/dkms-kbuild.sh --remove KVER   delete it (rsiw removed for KVER)
#
# RSIW_KBUILD=DIR uses an already prepared tree instead (the project's tests do).
# Stops with a message, and DKMS with it, when the tree cannot match the kernel: no
# CONFIG_RUST, no linux-source of the kernel's version, or a rustc other than the one that
# built the kernel (Rust metadata only links with the same compiler).
set -euo pipefail

log() { printf 'rsiw dkms: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ "${1:-}" = --remove ]; then
	kver=${2:?usage: $0 --remove KVER}
	# Only what this script made: a tree with its completion mark.
	if [ -z "${RSIW_KBUILD:-}" ] && [ -f "/usr/src/rsiw-kbuild-$kver/.rsiw-complete" ]; then
		log "removing /usr/src/rsiw-kbuild-$kver"
		rm -rf "/usr/src/rsiw-kbuild-$kver"
	fi
	exit 0
fi

kver=${1:?usage: $0 KVER | --remove KVER}
headers=/usr/src/linux-headers-$kver
kbuild=${RSIW_KBUILD:-/usr/src/rsiw-kbuild-$kver}

config=$headers/.config
[ -f "$config" ] || config=$kbuild/.config
[ -f "$config" ] || die "no .config for $kver: install linux-headers-$kver"
grep -q '^CONFIG_RUST=y' "$config" ||
	die "kernel $kver is built without Rust support (CONFIG_RUST=y): rsiw cannot be built for it"

# The rustc that built the kernel, as Kconfig recorded it (major*100000 + minor*100 + patch,
# scripts/rustc-version.sh).
want=$(sed -n 's/^CONFIG_RUSTC_VERSION=//p' "$config")
have=$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\1 \2 \3/p' |
	awk '{ print $1 * 100000 + $2 * 100 + $3 }')
[ -n "$have" ] || die "no rustc: install Debian's rustc, rust-src, bindgen and clang"
[ "$want" = "$have" ] || die "kernel $kver was built with rustc $want (Kconfig's numbering) \
but rustc here is $have ($(rustc --version)): install the rustc the kernel was built with"

if [ -n "${RSIW_KBUILD:-}" ]; then
	[ -f "$kbuild/Module.symvers" ] || die "RSIW_KBUILD=$kbuild is not a prepared kernel tree"
	exit 0
fi
[ -f "$kbuild/.rsiw-complete" ] && exit 0

series=$(echo "${kver%%+*}" | cut -d. -f1,2)
src=/usr/src/linux-source-$series.tar.xz
[ -f "$src" ] || die "no $src: install linux-source-$series (the version of $kver)"
log "rebuilding the Rust metadata for $kver in $kbuild (about 2 minutes)"
rm -rf "$kbuild"
mkdir -p "$kbuild"
tar -C "$kbuild" --strip-components=1 -xf "$src"
cp "$headers/.config" "$kbuild/.config"
# Debian's headers name the compiler the kernel was built with (CC=gcc-14, ...).
cp "$headers/.kernelvariables" "$kbuild/.kernelvariables" 2>/dev/null || true
make -C "$kbuild" -s -j"$(nproc)" olddefconfig prepare modules_prepare >&2
cp "$headers/Module.symvers" "$kbuild/Module.symvers"
rel=$(cat "$kbuild/include/config/kernel.release")
if [ "$rel" != "$kver" ]; then
	rm -rf "$kbuild"
	die "linux-source-$series gives kernel.release $rel, not $kver: install the linux-source of $kver's version"
fi
touch "$kbuild/.rsiw-complete"

#!/usr/bin/env bash
# Build (or reuse) the Debian trixie build root: the kernel toolchain Debian uses for its
# Rust-enabled 7.3 kernel, the linux-source and linux-image/headers packages, the guest
# user space (rdma-core, perftest, pytest, tshark ...) and virtme-ng.  The same tree is the
# VM's root filesystem.  Prints the root's path on stdout.
#
# The root is cached in $RSIW_CACHE/root-<hash of versions.env, this script and the
# package list>; a finished root has a .rsiw-complete stamp.
. "$(dirname "$0")/lib.sh"

root=$(root_dir)
if [ -f "$root/.rsiw-complete" ]; then
	echo "$root"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "building the root needs root (debootstrap, chroot)"

log "build root: creating $root (cold: about 3 minutes)"
tmp="$root.tmp"
rm -rf "$tmp"
mkdir -p "$RSIW_CACHE/debs" "$RSIW_CACHE/apt-archives"

# debootstrap itself: from the host's package if installed, else unpacked from its .deb.
if command -v debootstrap >/dev/null 2>&1; then
	DEBOOTSTRAP=debootstrap
else
	dbs="$RSIW_CACHE/debootstrap"
	if [ ! -x "$dbs/usr/sbin/debootstrap" ]; then
		log "fetching debootstrap (.deb, unpacked into the cache)"
		(cd "$RSIW_CACHE" && rm -f debootstrap_*.deb &&
			{ apt-get download debootstrap >/dev/null 2>&1 ||
				{ apt-get update -qq && apt-get download debootstrap; }; } &&
			rm -rf "$dbs" && dpkg-deb -x debootstrap_*.deb "$dbs" && rm -f debootstrap_*.deb) ||
			die "cannot fetch debootstrap (apt-get download debootstrap failed)"
	fi
	export DEBOOTSTRAP_DIR="$dbs/usr/share/debootstrap"
	DEBOOTSTRAP="$dbs/usr/sbin/debootstrap"
fi

log "debootstrap --variant=minbase $DEBIAN_SUITE"
run_logged "$RSIW_CACHE/debootstrap.log" "$DEBOOTSTRAP" --variant=minbase \
	--cache-dir="$RSIW_CACHE/debs" "$DEBIAN_SUITE" "$tmp" "$DEBIAN_MIRROR" ||
	die "debootstrap failed"

cat >"$tmp/etc/apt/sources.list" <<SRC
deb $DEBIAN_MIRROR $DEBIAN_SUITE main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-backports main
deb http://deb.debian.org/debian-security $DEBIAN_SUITE-security main
SRC
cat >"$tmp/etc/apt/apt.conf.d/90rsiw" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Dpkg::Options { "--force-confdef"; "--force-confold"; };
APT
# Keep downloaded packages in the cache across root rebuilds.
mkdir -p "$tmp/var/cache/apt/archives"
echo "$RSIW_CACHE/apt-archives" >"$tmp/.rsiw-apt-archives"

# All package work runs in the root, with the archive cache bind-mounted.
root_apt() {
	in_root "$tmp" /bin/bash -c "mount --bind $RSIW_CACHE/apt-archives /var/cache/apt/archives 2>/dev/null || true; export DEBIAN_FRONTEND=noninteractive; $*"
}

log "apt-get update (trixie, -updates, -backports, -security)"
run_logged "$RSIW_CACHE/apt-update.log" root_apt "apt-get update" || die "apt-get update failed in the root"

# Resolve the pinned kernel versions, falling back loudly if they left the archive.
pick() { # pick PKG PINNED-VERSION -> version to install
	local pkg=$1 want=$2 have
	have=$(root_apt "apt-cache madison $pkg" | awk '{print $3}')
	if printf '%s\n' "$have" | grep -qxF "$want"; then
		echo "$want"
		return
	fi
	have=$(printf '%s\n' "$have" | grep . | sort -V | tail -n 1)
	[ -n "$have" ] || return 1
	log "WARNING: pinned $pkg=$want is no longer in the archive; using $have instead" >&2
	echo "$have"
}
src_pkg=$LINUX_SOURCE_PKG
src_ver=$(pick "$src_pkg" "$LINUX_SOURCE_VERSION") || {
	src_pkg=$(root_apt "apt-cache pkgnames linux-source-" | grep -E '^linux-source-[0-9]+\.[0-9]+$' | sort -V | tail -n 1)
	[ -n "$src_pkg" ] || die "no linux-source package in $DEBIAN_SUITE(-backports)"
	log "WARNING: $LINUX_SOURCE_PKG is gone from the archive; using $src_pkg"
	src_ver=$(pick "$src_pkg" none)
}
abi=$LINUX_ABI
if ! root_apt "apt-cache show linux-image-$abi" >/dev/null 2>&1; then
	upstream=${src_ver%%-*}
	abi=$(root_apt "apt-cache pkgnames linux-image-" |
		grep -E "^linux-image-${upstream//./\\.}\+deb[0-9]+-amd64$" | sed 's/^linux-image-//' | sort -V | tail -n 1)
	[ -n "$abi" ] || die "linux-image-$LINUX_ABI is gone and no image matches linux-source $src_ver"
	log "WARNING: linux-image-$LINUX_ABI is no longer in the archive; using linux-image-$abi"
fi

pkgs=$(grep -v '^#' "$RSIW_TOP/tests/root-packages.txt" | tr '\n' ' ')
log "installing the toolchain and guest packages (cold: about 2 minutes)"
run_logged "$RSIW_CACHE/apt-install.log" root_apt "apt-get install -y $pkgs" ||
	die "package installation failed"
log "installing $src_pkg=$src_ver, Debian's kernel $abi and its perf from $DEBIAN_SUITE-backports"
# linux-base first: the image's PreDepends are not met from stable alone. linux-perf comes
# from the same source package as linux-source (make bench's profiles).
run_logged "$RSIW_CACHE/apt-kernel.log" root_apt "apt-get install -y -t $DEBIAN_SUITE-backports linux-base && \
	apt-get install -y -t $DEBIAN_SUITE-backports $src_pkg=$src_ver linux-image-$abi linux-headers-$abi \
	linux-perf=$src_ver" ||
	die "kernel package installation failed"

log "installing virtme-ng $VIRTME_NG_VERSION from PyPI into /opt/vng"
# The wheel is fetched by the host's pip (which carries the host's proxy and CA settings)
# and installed offline in the root; its dependencies come from Debian packages.
whl="$RSIW_CACHE/wheels/virtme_ng-$VIRTME_NG_VERSION-py3-none-any.whl"
if [ ! -f "$whl" ]; then
	mkdir -p "$RSIW_CACHE/wheels"
	python3 -m pip download -q --no-deps -d "$RSIW_CACHE/wheels" "virtme-ng==$VIRTME_NG_VERSION" ||
		die "cannot download virtme-ng $VIRTME_NG_VERSION from PyPI (python3 -m pip download)"
fi
run_logged "$RSIW_CACHE/vng-install.log" root_apt "python3 -m venv --system-site-packages /opt/vng && \
	/opt/vng/bin/pip install -q --no-index --no-deps --disable-pip-version-check $whl" ||
	die "virtme-ng installation failed"
root_apt "apt-get clean" >/dev/null 2>&1 || true

{
	echo "# Versions installed in this build root (written by tests/root.sh)."
	echo "LINUX_SOURCE_PKG=$src_pkg"
	echo "LINUX_SOURCE_VERSION=$src_ver"
	echo "LINUX_ABI=$abi"
	for p in rustc rust-src bindgen clang lld gcc rdma-core perftest qemu-system-x86 tshark; do
		printf 'PKG_%s=%s\n' "${p//-/_}" "$(chroot "$tmp" dpkg-query -W -f '${Version}' "$p" 2>/dev/null || echo none)"
	done
	echo "VIRTME_NG=$(chroot "$tmp" /opt/vng/bin/vng --version 2>/dev/null | awk '{print $NF}')"
} >"$tmp/rsiw-versions.env"
sed 's/^/    /' "$tmp/rsiw-versions.env" >&2
rm -f "$tmp/.rsiw-apt-archives"
touch "$tmp/.rsiw-complete"
rm -rf "$root"
mv "$tmp" "$root"
log "build root ready: $root"
echo "$root"

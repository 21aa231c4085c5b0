#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The DKMS install path, as a user of Debian's kernel takes it (make check, stock leg):
# in the build root, the sources go to /usr/src/rsiw-VERSION and `dkms install` builds,
# strips, signs and installs rsiw.ko for Debian's kernel (dkms.conf, its PRE_BUILD
# scripts/dkms-kbuild.sh pointed at the prepared stock tree through RSIW_KBUILD, which
# skips the 2-minute metadata rebuild only); then that kernel boots and
# tests/guest/dkms_smoke.sh loads the installed module by name and runs a verified rping.
# `dkms remove` and the removal of the sources leave the build root as they found it.
. "$(dirname "$0")/lib.sh"

root=$("$RSIW_TOP/tests/root.sh")
tree=$("$RSIW_TOP/tests/kernel.sh" stock)
# shellcheck disable=SC1091
. "$root/rsiw-versions.env"
ver=$(cat "$RSIW_TOP/VERSION")
grep -qx "PACKAGE_VERSION=\"$ver\"" "$RSIW_TOP/dkms.conf" ||
	die "dkms.conf's PACKAGE_VERSION is not $ver, the release in VERSION"

# The build root is shared by every run: never leave an installed rsiw behind (a later
# `rdma link add` would autoload it instead of the module under test).
undo() {
	in_root "$root" /bin/bash -c "dkms remove rsiw/$ver --all >/dev/null 2>&1 || true
		rm -rf /usr/src/rsiw-$ver /var/lib/dkms/rsiw /var/lib/dkms/mok.key /var/lib/dkms/mok.pub
		depmod -a $LINUX_ABI" || log "dkms: WARNING: could not undo the install in $root"
}
trap undo EXIT
undo

log "dkms: dkms add + install rsiw/$ver for $LINUX_ABI in the build root"
if ! in_root "$root" /bin/bash -c "set -e
	mkdir -p /usr/src/rsiw-$ver
	cd '$RSIW_TOP'
	cp -r Kbuild Makefile VERSION LICENSE dkms.conf rust include scripts /usr/src/rsiw-$ver/
	dkms add rsiw/$ver
	RSIW_KBUILD='$tree' dkms install rsiw/$ver -k $LINUX_ABI" >"$RSIW_TOP/build/dkms.log" 2>&1; then
	cat "$RSIW_TOP/build/dkms.log" >&2
	in_root "$root" /bin/bash -c "cat /var/lib/dkms/rsiw/$ver/build/make.log" >&2 2>/dev/null || true
	die "dkms install failed (build/dkms.log)"
fi
log "dkms: installed; booting $LINUX_ABI to load it"
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --timeout 600 -- \
	env RSIW_VERSION="$ver" bash tests/guest/dkms_smoke.sh

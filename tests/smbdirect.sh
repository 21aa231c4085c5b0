#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build (or reuse) SMB Direct for Debian's kernel: Debian builds ksmbd and cifs without it
# (CONFIG_SMB_SERVER_SMBDIRECT and CONFIG_CIFS_SMB_DIRECT are off), so, as for the C siw,
# this builds the same source of the stock tree (tests/kernel.sh stock) as external
# modules with it on: smbdirect.ko (the shared SMB Direct transport), ksmbd.ko and cifs.ko.
# Prints the directory holding the three .ko files.
#
# Cached in $RSIW_CACHE/smbdirect-<hash of the stock tree's path and this script>;
# complete once stamped. Cold: about 2 minutes on 2 cores.
. "$(dirname "$0")/lib.sh"

root=$("$RSIW_TOP/tests/root.sh")
tree=$("$RSIW_TOP/tests/kernel.sh" stock)
key=$(hash_of "$tree" "$RSIW_TOP/tests/smbdirect.sh")
out="$RSIW_CACHE/smbdirect-$key"
if [ -f "$out/.rsiw-complete" ]; then
	echo "$out"
	exit 0
fi
for old in "$RSIW_CACHE"/smbdirect-*; do
	[ -e "$old" ] && [ "$old" != "$out" ] && rm -rf "$old"
done
rm -rf "$out"
mkdir -p "$out/src/fs"
# fs/smb includes fs/nls by relative path.
cp -r "$tree/fs/smb" "$tree/fs/nls" "$out/src/fs/"
smb="$out/src/fs/smb"

kmake() { # kmake NAME DIR ARGS...: an external module build in the stock tree, logged
	local name=$1 dir=$2
	shift 2
	run_logged "$out/$name.log" in_root "$root" make -C "$tree" -j"$(nproc)" M="$dir" "$@" modules ||
		die "building $name.ko with SMB Direct for the stock kernel failed ($out/$name.log)"
}
log "smbdirect (stock): building smbdirect.ko, ksmbd.ko and cifs.ko with SMB Direct"
kmake smbdirect "$smb/smbdirect" CONFIG_SMBDIRECT=m
extra="KBUILD_EXTRA_SYMBOLS=$smb/smbdirect/Module.symvers"
# The Makefiles select the RDMA objects from the make variable, the C code from the macro.
kmake ksmbd "$smb/server" CONFIG_SMB_SERVER=m CONFIG_SMB_SERVER_SMBDIRECT=y \
	KCFLAGS=-DCONFIG_SMB_SERVER_SMBDIRECT=1 "$extra"
kmake cifs "$smb/client" CONFIG_CIFS=m CONFIG_CIFS_SMB_DIRECT=y \
	KCFLAGS=-DCONFIG_CIFS_SMB_DIRECT=1 "$extra"
cp "$smb/smbdirect/smbdirect.ko" "$smb/server/ksmbd.ko" "$smb/client/cifs.ko" "$out/"
for m in ksmbd cifs; do
	# (grep reads everything: with -q, nm could die of SIGPIPE under pipefail)
	in_root "$root" nm "$out/$m.ko" | grep ' smbdirect_' >/dev/null ||
		die "$m.ko was built without SMB Direct"
done
rm -rf "$out/src"
touch "$out/.rsiw-complete"
echo "$out"

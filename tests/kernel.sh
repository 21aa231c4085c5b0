#!/usr/bin/env bash
# Build (or reuse) a kernel tree rsiw is built against and booted on.  Prints its path.
#
#   tests/kernel.sh debug   the project's debug kernel: allnoconfig + tests/kconfig/debug.config
#                           (KASAN, kmemleak, lockdep, ...), LLVM=1, with the C siw as a module
#   tests/kernel.sh stock   Debian's own kernel (linux-image-$LINUX_ABI): a tree rebuilt from
#                           the matching linux-source with Debian's .config, holding the Rust
#                           metadata Debian's headers package lacks; plus the C siw built from
#                           the same source as an external module
#
# Trees live in $RSIW_CACHE/kernel-<flavour>-<hash of their inputs>, stamped when complete.
. "$(dirname "$0")/lib.sh"

flavour=${1:?usage: tests/kernel.sh debug|stock}
root=$("$RSIW_TOP/tests/root.sh")
# shellcheck disable=SC1091
. "$root/rsiw-versions.env"
jobs=$(nproc)

# A tree depends on the kernel source, the toolchain that builds it, this recipe and (debug)
# the config fragment; not on the rest of the build root's packages.
toolchain=$(grep -E '^(LINUX_|PKG_(rustc|rust_src|bindgen|clang|lld|gcc)=)' "$root/rsiw-versions.env")
case "$flavour" in
debug)
	key=$(hash_of "$toolchain" "$RSIW_TOP/tests/kernel.sh" "$RSIW_TOP/tests/kconfig/debug.config")
	;;
stock)
	key=$(hash_of "$toolchain" "$RSIW_TOP/tests/kernel.sh")
	;;
*)
	die "unknown kernel flavour '$flavour' (debug or stock)"
	;;
esac
tree="$RSIW_CACHE/kernel-$flavour-$key"
if [ -f "$tree/.rsiw-complete" ]; then
	echo "$tree"
	exit 0
fi

# Drop stale trees of this flavour (other keys): they are large.
for old in "$RSIW_CACHE"/kernel-"$flavour"-*; do
	[ -e "$old" ] && [ "$old" != "$tree" ] && rm -rf "$old"
done

# Built in place (kernel trees record their own path), complete only once stamped.
tmp="$tree"
rm -rf "$tmp"
mkdir -p "$tmp"
log "kernel ($flavour): unpacking $LINUX_SOURCE_PKG $LINUX_SOURCE_VERSION into $tmp"
in_root "$root" tar -C "$tmp" --strip-components=1 -xf "/usr/src/$LINUX_SOURCE_PKG.tar.xz" ||
	die "cannot unpack /usr/src/$LINUX_SOURCE_PKG.tar.xz"

kmake() { # kmake LOGNAME ARGS...: make in the tree, inside the root, logged with heartbeats
	local name=$1
	shift
	run_logged "$tmp/rsiw-$name.log" in_root "$root" make -C "$tmp" -j"$jobs" "$@"
}

case "$flavour" in
debug)
	kmake rustavailable LLVM=1 rustavailable || die "the root's Rust toolchain is not usable for this kernel"
	log "kernel (debug): allnoconfig + tests/kconfig/debug.config"
	kmake config LLVM=1 allnoconfig || die "allnoconfig failed"
	run_logged "$tmp/rsiw-merge.log" in_root "$root" /bin/bash -c \
		"cd $tmp && scripts/kconfig/merge_config.sh -m .config $RSIW_TOP/tests/kconfig/debug.config && make LLVM=1 olddefconfig" ||
		die "merging the config fragment failed"
	# Every option of the fragment must have survived olddefconfig (a dropped dependency
	# would silently build a kernel without, say, KASAN).
	missing=0
	while IFS= read -r line; do
		case "$line" in CONFIG_*) ;; *) continue ;; esac
		opt=${line%%=*} val=${line#*=}
		if [ "$val" = n ]; then
			grep -qx "$opt=y\|$opt=m" "$tmp/.config" && { log "config: $opt should be off"; missing=1; }
		else
			grep -qx "$line" "$tmp/.config" || { log "config: $line did not survive olddefconfig"; missing=1; }
		fi
	done <"$RSIW_TOP/tests/kconfig/debug.config"
	[ "$missing" = 0 ] || die "tests/kconfig/debug.config does not apply cleanly (see above)"
	log "kernel (debug): building bzImage and modules with LLVM=1 (cold: about 20-25 minutes on 2 cores)"
	kmake build LLVM=1 bzImage modules || die "debug kernel build failed"
	;;
stock)
	h="/usr/src/linux-headers-$LINUX_ABI"
	[ -f "$root$h/.config" ] || die "$h/.config missing in the build root"
	cp "$root$h/.config" "$tmp/.config"
	cp "$root$h/.kernelvariables" "$tmp/.kernelvariables" 2>/dev/null || true
	log "kernel (stock): olddefconfig + prepare + modules_prepare with Debian's .config (about 2 minutes)"
	kmake prepare olddefconfig prepare modules_prepare || die "stock kernel prepare failed"
	cp "$root$h/Module.symvers" "$tmp/Module.symvers"
	rel=$(cat "$tmp/include/config/kernel.release")
	[ "$rel" = "$LINUX_ABI" ] || die "rebuilt tree says kernel.release '$rel', Debian's image is '$LINUX_ABI'"
	log "kernel (stock): building the C siw from the same source as an external module"
	mkdir -p "$tmp/rsiw-siw"
	cp "$tmp"/drivers/infiniband/sw/siw/* "$tmp/rsiw-siw/"
	kmake siw M="$tmp/rsiw-siw" CONFIG_RDMA_SIW=m modules || die "building the C siw for the stock kernel failed"
	;;
esac

touch "$tree/.rsiw-complete"
log "kernel ($flavour) ready: $tree"
echo "$tree"

#!/usr/bin/env bash
# Build rsiw.ko for a kernel flavour (debug|stock) inside the build root, with CLIPPY=1 and
# warnings as errors.  The sources are mirrored into build/<flavour>/ so that both
# flavours keep their own objects; prints the path of rsiw.ko.
. "$(dirname "$0")/lib.sh"

flavour=${1:-debug}
cache_lock
root=$("$RSIW_TOP/tests/root.sh")
tree=$("$RSIW_TOP/tests/kernel.sh" "$flavour")
out="$RSIW_TOP/build/$flavour"
mkdir -p "$out"

# Mirror only the module's sources; --checksum keeps timestamps of unchanged files, so
# Kbuild rebuilds only what changed.
in_root "$root" rsync -a --checksum --delete --exclude '*.o' --exclude '.*.cmd' --exclude '*.ko' \
	--exclude 'bindings_generated.rs' --exclude '*.mod*' --exclude 'modules.order' \
	--exclude 'Module.symvers' --exclude '*.rmeta' --exclude '*.d' \
	--include 'Kbuild' --include 'rust/***' --include 'include/***' --exclude '*' \
	"$RSIW_TOP/" "$out/"

llvm=
[ "$flavour" = debug ] && llvm=LLVM=1
log "module ($flavour): make -C $(basename "$tree") M=build/$flavour $llvm CLIPPY=1"
if ! in_root "$root" make -C "$tree" M="$out" $llvm CLIPPY=1 -j"$(nproc)" modules \
	>"$out/build.log" 2>&1; then
	cat "$out/build.log" >&2
	die "module build failed ($flavour)"
fi
grep -E 'warning|error' "$out/build.log" >&2 && die "module build printed warnings ($flavour)"
log "module ($flavour): $out/rsiw.ko"
echo "$out/rsiw.ko"

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
	--include 'Kbuild' --include 'VERSION' --include 'rust/***' --include 'include/***' --exclude '*' \
	"$RSIW_TOP/" "$out/"

llvm=
[ "$flavour" = debug ] && llvm=LLVM=1
log "module ($flavour): make -C $(basename "$tree") M=build/$flavour $llvm CLIPPY=1 RSIW_WERROR=1"
if ! in_root "$root" make -C "$tree" M="$out" $llvm CLIPPY=1 RSIW_WERROR=1 -j"$(nproc)" modules \
	>"$out/build.log" 2>&1; then
	cat "$out/build.log" >&2
	die "module build failed ($flavour)"
fi
grep -E 'warning|error' "$out/build.log" >&2 && die "module build printed warnings ($flavour)"

# Stack frames: rustc has no -Wframe-larger-than. Objects built on the stack and moved
# into the heap (protocol engines in a connection) show up as large frames; a chain of
# them overruns the 16 KiB stack of Debian's kernel (the debug kernel's KASAN doubles it,
# so the guest tests there would not see it). Fail on any function that reserves more
# than RSIW_MAX_FRAME octets (x86-64: `sub $N,%rsp` in its prologue).
max_frame=${RSIW_MAX_FRAME:-6144}
in_root "$root" objdump -d --no-show-raw-insn "$out/rsiw.ko" >"$out/rsiw.dis"
big=$(awk -v max="$max_frame" '
	/^[0-9a-f]+ <.*>:$/ { fn = $2 }
	/sub +\$0x[0-9a-f]+,%rsp/ {
		match($0, /\$0x[0-9a-f]+/)
		n = 0; h = tolower(substr($0, RSTART + 3, RLENGTH - 3))
		for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
		if (n > max) print n, fn
	}' "$out/rsiw.dis")
[ -z "$big" ] || { echo "$big" >&2; die "stack frames above $max_frame octets ($flavour): see above"; }
log "module ($flavour): $out/rsiw.ko"
echo "$out/rsiw.ko"

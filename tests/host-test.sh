#!/usr/bin/env bash
# Host tests of the shared protocol core (rust/wire, rust/engine through userspace/):
# rustfmt, clippy with warnings as errors, and cargo test; rustfmt of the kernel shell.
. "$(dirname "$0")/lib.sh"
cd "$RSIW_TOP/userspace"
log "host: cargo fmt --check"
cargo fmt --all -- --check
log "host: rustfmt --check of the kernel shell (rust/ outside wire/ and engine/)"
(cd "$RSIW_TOP" && find rust -name '*.rs' ! -name bindings_generated.rs ! -path 'rust/wire/*' \
	! -path 'rust/engine/*' -print0 | sort -z | xargs -0 rustfmt --edition 2021 --check)
log "host: unsafe only in the FFI layer (rust/sys/)"
# A word `unsafe` outside comments, in any kernel-shell file but rust/sys/ (wire/ and
# engine/ are also built by the host crate, which has #![forbid(unsafe_code)]).
if (cd "$RSIW_TOP" && grep -rnw --include='*.rs' unsafe rust | grep -v '^rust/sys/' \
	| grep -Ev '^[^:]+:[0-9]+:\s*//'); then
	die "unsafe outside rust/sys/ (the lines above)"
fi
log "host: cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "host: cargo test"
cargo test --workspace --locked

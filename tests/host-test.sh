#!/usr/bin/env bash
# Host tests of the shared protocol core (rust/wire, rust/engine through userspace/):
# rustfmt, clippy with warnings as errors, and cargo test.
. "$(dirname "$0")/lib.sh"
cd "$RSIW_TOP/userspace"
log "host: cargo fmt --check"
cargo fmt --all -- --check
log "host: cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "host: cargo test"
cargo test --workspace --locked

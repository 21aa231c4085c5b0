#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make demo`: boot Debian's own trixie-backports kernel (unmodified) in a VM, load rsiw and
# tell what it does in about twenty lines (tests/guest/demo.py): the device and the stock
# provider library driving it, a verified rping and what tshark saw on the wire, rsiw
# against the C siw in the same boot, rsiw <-> siw interoperation, rsiw's counters, and
# PASS when everything was removed again without a kernel warning. Everything the
# programs printed goes to build/demo.log.
. "$(dirname "$0")/lib.sh"

mkdir -p "$RSIW_TOP/build"
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --timeout 2100 -- \
	env RSIW_DEMO_LOG=build/demo.log python3 tests/guest/demo.py

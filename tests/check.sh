#!/usr/bin/env bash
# `make check`: every test rsiw has.
#   1. host: rustfmt, clippy and cargo test of the shared protocol core (userspace/)
#   2. build root and debug kernel (cached), rsiw.ko with CLIPPY=1 and warnings as errors,
#      for the debug kernel and for Debian's stock kernel (its objtool sees other code)
#   3. guest: the pytest suite in tests/guest/ on the debug kernel (KASAN, lockdep, kmemleak),
#      with one of the netem-impaired link's twelve cases (the stock leg runs them all)
#      the MPA revision 2 cases against siw without CRC with rsiw as the client (the stock
#      leg runs the rest), and one of the two NVMe-oF port teardown cases (rmdir)
#   4. guest: transfer tests on Debian's stock kernel, where they run faster: the
#      netem-impaired link (rping -V and perftest at 64 KiB and 1 MiB, every impairment),
#      NVMe-oF with fio (the hostile peer against its kernel QPs runs on the debug kernel,
#      where KASAN watches), the cases that trip lockdep inside the C siw (P2P RTR against siw), and
#      the interop cases the debug kernel leaves out (CRC on, MPA revision 1, rsiw as
#      the server), which complete the revision x CRC x role matrix against siw, the
#      NVMe-oF port teardown by unlinking the subsystem,
#      rdma-core's own pyverbs suite on rsiw and on siw (tests/guest/test_rdma_core.py),
#      a link type the debug kernel lacks (GRE), dynamic debug, NFS over RDMA (the
#      debug kernel has no nfsd) and SMB Direct (ksmbd and cifs built with it from the
#      same source, tests/smbdirect.sh), and the connection-cycle load test with its
#      slab and vmalloc figures (KASAN's quarantine blurs them on the debug kernel)
#   5. the DKMS install path in the build root, then its module loaded in Debian's kernel
# The long forms (rping -C 1000 and perftest at 2 B ... 1 MiB on Debian's kernel, minutes of
# netem, fault-injection sweeps) run in `make soak` (tests/soak.sh).
. "$(dirname "$0")/lib.sh"

log "check: host tests"
"$RSIW_TOP/tests/host-test.sh"

log "check: build root, kernels and module (cached after the first run)"
"$RSIW_TOP/tests/build-module.sh" debug >/dev/null
"$RSIW_TOP/tests/build-module.sh" stock >/dev/null
"$RSIW_TOP/tests/pcap-check.sh"

log "check: guest tests on the debug kernel"
"$RSIW_TOP/tests/vm-run.sh" --kernel debug --timeout "${RSIW_GUEST_TIMEOUT:-4800}" -- \
	python3 -m pytest -v -p no:cacheprovider --durations=10 tests/guest \
	-k "(not impaired_link or loss5-crc1-markers) \
	and not (interop_siw and (rev1 or crc1 or rsiw_server)) \
	and not connection_cycles and not (port_cycles and unlink)"
log "check: guest tests on Debian's stock kernel (the users' kernel; siw's RTR path there)"
"$RSIW_TOP/tests/vm-run.sh" --kernel stock --timeout "${RSIW_STOCK_TIMEOUT:-1200}" -- \
	env RSIW_INTEROP_FULL=1 \
	python3 -m pytest -v -p no:cacheprovider --durations=10 tests/guest/test_transport.py \
	tests/guest/test_rdma_core.py tests/guest/test_device.py tests/guest/test_nvmeof.py \
	tests/guest/test_cm.py tests/guest/test_nfs.py tests/guest/test_smb.py \
	tests/guest/test_reliability.py \
	-k "p2p_siw or nvme_rdma_fio or connection_cycles \
	or (interop_siw and (rev1 or crc1 or rsiw_server)) or (port_cycles and unlink) \
	or rdma_core_suite \
	or unsupported_link_type or dynamic_debug or nfs_over_rdma or nfs_with_siw \
	or impaired_link or smb_direct"
log "check: the DKMS install path on Debian's kernel (tests/dkms-test.sh)"
"$RSIW_TOP/tests/dkms-test.sh"
log "check: all passed"

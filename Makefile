# SPDX-License-Identifier: GPL-2.0
#
# rsiw: user entry points.  See README.md.
#
#   make                 build rsiw.ko for the running kernel if its build tree has Rust
#                        support, else for the project's debug kernel
#   make KERNEL=debug|stock  build rsiw.ko for the project's debug kernel or Debian's kernel
#   make KDIR=/path      build rsiw.ko against your own Rust-enabled kernel build tree
#   make demo            boot Debian's kernel in a VM, load rsiw, show the device
#   make check           all tests: host (cargo) and guest (pytest in the debug kernel)
#   make bench           rsiw vs siw (bandwidth, latency, kernel memory) as ratios
#   make bench-profile   instructions per latency iteration or connection, rsiw vs siw
#   make bench-lat       rsiw's 8-octet ib_send_lat and ib_read_lat, one run each
#   make vm-run CMD=...  run CMD as root in a VM (KERNEL=debug|stock)
#   make host-test       only the host tests of the protocol core
#
# Everything built outside the repository lives in $(RSIW_CACHE) (default /var/cache/rsiw).

SHELL := /bin/bash
# Plain `make` follows the out-of-tree convention: it builds against the running kernel's
# build tree when that tree can build Rust modules (CONFIG_RUST=y and its Rust metadata,
# rust/libkernel.rmeta; Debian's headers lack the latter, see scripts/dkms-kbuild.sh).
# Otherwise, and whenever KERNEL=debug|stock is given, it builds for the project's own
# kernels in the build root.
ifeq ($(origin KERNEL)$(KDIR),undefined)
RUNNING_KDIR := /lib/modules/$(shell uname -r)/build
ifneq ($(and $(wildcard $(RUNNING_KDIR)/rust/libkernel.rmeta),$(shell grep -s '^CONFIG_RUST=y' $(RUNNING_KDIR)/.config)),)
KDIR := $(RUNNING_KDIR)
endif
endif
KERNEL ?= debug
CMD ?= true

ifneq ($(KDIR),)
# Building against a user-supplied kernel tree with the host's own toolchain.
LLVM_FLAG := $(if $(shell grep -s '^CONFIG_CC_IS_CLANG=y' $(KDIR)/.config),LLVM=1)
all module:
	$(MAKE) -C $(KDIR) M=$(CURDIR) $(LLVM_FLAG) modules
clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) clean
install:
	$(MAKE) -C $(KDIR) M=$(CURDIR) $(LLVM_FLAG) modules_install
	depmod -a $(shell cat $(KDIR)/include/config/kernel.release)
else
all module:
	tests/build-module.sh $(KERNEL)
clean:
	rm -rf build
endif

host-test:
	tests/host-test.sh

vm-run:
	KERNEL=$(KERNEL) tests/vm-run.sh -- bash -c '$(CMD)'

check:
	tests/check.sh

demo:
	tests/demo.sh

bench:
	tests/bench.sh

bench-profile:
	tests/bench-profile.sh

bench-lat:
	tests/bench-lat.sh

soak:
	tests/soak.sh

.PHONY: all module clean install host-test vm-run check demo bench bench-profile bench-lat soak

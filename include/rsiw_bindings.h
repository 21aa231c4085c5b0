/* SPDX-License-Identifier: GPL-2.0 */
/*
 * bindgen input for rsiw: the kernel APIs rsiw's Rust code calls.  The generated file is
 * rust/sys/bindings_generated.rs (see Kbuild); only rust/sys may use it.
 */
#include <linux/errno.h>
#include <linux/if_arp.h>
#include <linux/netdevice.h>
#include <linux/notifier.h>
#include <linux/crc32.h>
#include <linux/mm_types.h>
#include <linux/random.h>
#include <linux/scatterlist.h>
#include <linux/vmalloc.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/iw_cm.h>
#include <rdma/rdma_cm.h>
#include <rdma/rdma_netlink.h>
#include <rdma/siw-abi.h>

#include <linux/net.h>
#include <linux/socket.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/fcntl.h>

#include "rsiw_helpers.h"
#include "rsiw_sock.h"

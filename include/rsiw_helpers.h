/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rsiw C shim: out-of-line versions of the static inline functions and macros rsiw's Rust
 * code needs from the networking and RDMA headers.  Nothing here holds logic of its own.
 */
#ifndef RSIW_HELPERS_H
#define RSIW_HELPERS_H

#include <linux/types.h>

struct ib_device;
struct ib_udata;
struct module;
struct net;
struct net_device;

/* THIS_MODULE of rsiw.ko (the C object and the Rust crate are one module). */
struct module *rsiw_this_module(void);

/* netdev_notifier_info_to_dev() */
struct net_device *rsiw_notifier_info_to_dev(void *info);

/* dev_net() */
struct net *rsiw_dev_net(const struct net_device *ndev);

/* ib_get_curr_port_state() as an int (enum ib_port_state). */
int rsiw_netdev_port_state(struct net_device *ndev);

/* READ_ONCE(ndev->mtu), ndev->max_mtu */
unsigned int rsiw_netdev_mtu(const struct net_device *ndev);
unsigned int rsiw_netdev_max_mtu(const struct net_device *ndev);

/* dev_put() */
void rsiw_dev_put(struct net_device *ndev);

/* ndev->dev_addr (ETH_ALEN octets when addr_len is ETH_ALEN), ndev->addr_len, ndev->type */
const u8 *rsiw_netdev_addr(const struct net_device *ndev);
unsigned int rsiw_netdev_addr_len(const struct net_device *ndev);
unsigned short rsiw_netdev_type(const struct net_device *ndev);

/* ib_copy_to_udata(): 0 or -EFAULT. */
int rsiw_copy_to_udata(struct ib_udata *udata, const void *src, size_t len);

/* udata->outlen, udata->inlen */
size_t rsiw_udata_outlen(const struct ib_udata *udata);
size_t rsiw_udata_inlen(const struct ib_udata *udata);

/* ib_mark_name_assigned_by_user() */
void rsiw_mark_name_assigned_by_user(struct ib_device *ibdev);

/* __ratelimit() over one rsiw-wide state (DEFAULT_RATELIMIT_INTERVAL/BURST). */
bool rsiw_ratelimit(void);

#endif /* RSIW_HELPERS_H */

// SPDX-License-Identifier: GPL-2.0
/*
 * rsiw C shim: see rsiw_helpers.h.  Each function is the out-of-line form of one inline
 * function or macro, so Rust can call it through bindgen.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/ratelimit.h>
#include <rdma/ib_verbs.h>

#include "rsiw_helpers.h"

struct module *rsiw_this_module(void)
{
	return THIS_MODULE;
}

struct net_device *rsiw_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

struct net *rsiw_dev_net(const struct net_device *ndev)
{
	return dev_net(ndev);
}

int rsiw_netdev_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

unsigned int rsiw_netdev_mtu(const struct net_device *ndev)
{
	return READ_ONCE(ndev->mtu);
}

unsigned int rsiw_netdev_max_mtu(const struct net_device *ndev)
{
	return ndev->max_mtu;
}

void rsiw_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

const u8 *rsiw_netdev_addr(const struct net_device *ndev)
{
	return ndev->dev_addr;
}

unsigned int rsiw_netdev_addr_len(const struct net_device *ndev)
{
	return ndev->addr_len;
}

unsigned short rsiw_netdev_type(const struct net_device *ndev)
{
	return ndev->type;
}

int rsiw_copy_to_udata(struct ib_udata *udata, const void *src, size_t len)
{
	return copy_to_user(udata->outbuf, src, len) ? -EFAULT : 0;
}

size_t rsiw_udata_outlen(const struct ib_udata *udata)
{
	return udata->outlen;
}

size_t rsiw_udata_inlen(const struct ib_udata *udata)
{
	return udata->inlen;
}

void rsiw_mark_name_assigned_by_user(struct ib_device *ibdev)
{
	ib_mark_name_assigned_by_user(ibdev);
}

static DEFINE_RATELIMIT_STATE(rsiw_rs, DEFAULT_RATELIMIT_INTERVAL, DEFAULT_RATELIMIT_BURST);

bool rsiw_ratelimit(void)
{
	return __ratelimit(&rsiw_rs);
}

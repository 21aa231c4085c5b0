// SPDX-License-Identifier: GPL-2.0
/*
 * rsiw C shim: see rsiw_helpers.h.  Each function is the out-of-line form of one inline
 * function or macro, so Rust can call it through bindgen.
 */
#include <linux/bottom_half.h>
#include <linux/cpumask.h>
#include <linux/dynamic_debug.h>
#include <linux/etherdevice.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/pid.h>
#include <linux/ratelimit.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/vmalloc.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_netlink.h>
#include <net/netlink.h>
#include <rdma/uverbs_ioctl.h>

#include "rsiw_helpers.h"

MODULE_VERSION(RSIW_VERSION);

static struct workqueue_struct *rsiw_wq;
static struct workqueue_struct *rsiw_cm_wq;
static atomic_t rsiw_live = ATOMIC_INIT(0);

struct module *rsiw_this_module(void)
{
	return THIS_MODULE;
}

#if defined(CONFIG_DYNAMIC_DEBUG) || \
	(defined(CONFIG_DYNAMIC_DEBUG_CORE) && defined(DYNAMIC_DEBUG_MODULE))
bool rsiw_pr_debug(const char *msg)
{
	/* One dynamic debug site: what turns it on is what prints. */
	DEFINE_DYNAMIC_DEBUG_METADATA(desc, "rsiw: %s\n");

	if (!DYNAMIC_DEBUG_BRANCH(desc))
		return false;
	if (msg)
		__dynamic_pr_debug(&desc, "rsiw: %s\n", msg);
	return true;
}
#elif defined(DEBUG)
bool rsiw_pr_debug(const char *msg)
{
	if (msg)
		pr_debug("rsiw: %s\n", msg);
	return true;
}
#else
bool rsiw_pr_debug(const char *msg)
{
	return false;
}
#endif

int rsiw_ibdev_name(struct ib_device *dev, char *buf, int len)
{
	ssize_t n = strscpy(buf, dev_name(&dev->dev), len);

	return n < 0 ? len - 1 : n;
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

static struct ratelimit_state rsiw_rs[RSIW_RATELIMIT_SITES] = {
	[0 ... RSIW_RATELIMIT_SITES - 1] = RATELIMIT_STATE_INIT(rsiw_rs, DEFAULT_RATELIMIT_INTERVAL,
								DEFAULT_RATELIMIT_BURST),
};

bool rsiw_ratelimit(unsigned int site)
{
	return __ratelimit(&rsiw_rs[site % RSIW_RATELIMIT_SITES]);
}

int rsiw_copy_from_udata(void *dst, struct ib_udata *udata, size_t len)
{
	return ib_copy_from_udata(dst, udata, len);
}

struct ib_udata *rsiw_bundle_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}

struct ib_ucontext *rsiw_udata_ucontext(struct ib_udata *udata)
{
	return rdma_udata_to_uverbs_attr_bundle(udata)->context;
}

/*
 * Ring memory a process maps (its SQ, RQ, SRQ and CQ rings): charged to the caller's
 * memory cgroup, as io_uring's rings are, and refused with NULL (ENOMEM) rather than
 * invoking the cgroup's OOM killer when the cgroup has no room. vmalloc_user() charges
 * nobody, and the allocator that adds VM_USERMAP with other flags is not exported, so
 * rsiw_remap_vmalloc() maps these areas.
 */
void *rsiw_vmalloc_user(unsigned long size)
{
	return __vmalloc(size, GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN |
			 __GFP_RETRY_MAYFAIL);
}

/*
 * Maps the whole of @vma onto the rsiw_vmalloc_user() area @kaddr of @len octets, page by
 * page, as remap_vmalloc_range() does for a VM_USERMAP area: each user page holds its own
 * page reference, so vfree() never leaves the mapping dangling. -EINVAL if @vma is longer
 * than the area.
 */
int rsiw_remap_vmalloc(struct vm_area_struct *vma, void *kaddr, unsigned long len)
{
	unsigned long uaddr = vma->vm_start;
	unsigned long size = vma->vm_end - vma->vm_start;
	int ret;

	if (!PAGE_ALIGNED(kaddr) || size > PAGE_ALIGN(len))
		return -EINVAL;
	for (; size; size -= PAGE_SIZE, uaddr += PAGE_SIZE, kaddr += PAGE_SIZE) {
		ret = vm_insert_page(vma, uaddr, vmalloc_to_page(kaddr));
		if (ret)
			return ret;
	}
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return 0;
}

void *rsiw_vzalloc(unsigned long size)
{
	return vzalloc(size);
}

u64 rsiw_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

struct ib_umem *rsiw_umem_get_va(struct ib_device *dev, unsigned long addr, size_t size,
				 int access)
{
	return ib_umem_get_va(dev, addr, size, access);
}

struct rsiw_umem_release {
	struct work_struct work;
	struct ib_umem *umem;
	struct device *dev;
};

static void rsiw_umem_release_fn(struct work_struct *work)
{
	struct rsiw_umem_release *r = container_of(work, struct rsiw_umem_release, work);

	ib_umem_release(r->umem);
	put_device(r->dev);
	kfree(r);
}

struct rsiw_umem_release *rsiw_umem_release_prepare(struct ib_umem *umem)
{
	struct rsiw_umem_release *r = kmalloc(sizeof(*r), GFP_KERNEL);

	if (!r)
		return NULL;
	INIT_WORK(&r->work, rsiw_umem_release_fn);
	r->umem = umem;
	r->dev = get_device(&umem->ibdev->dev);
	return r;
}

void rsiw_umem_release_async(struct rsiw_umem_release *r)
{
	queue_work(rsiw_wq, &r->work);
}

void rsiw_copy_kva(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}

u64 rsiw_sg_dma_address(const struct scatterlist *sg)
{
	return sg_dma_address(sg);
}

unsigned int rsiw_sg_dma_len(const struct scatterlist *sg)
{
	return sg_dma_len(sg);
}

struct scatterlist *rsiw_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

void rsiw_xa_init_alloc(struct xarray *xa)
{
	xa_init_flags(xa, XA_FLAGS_ALLOC | XA_FLAGS_LOCK_IRQ);
}

int rsiw_xa_reserve_cyclic(struct xarray *xa, u32 *id, u32 min, u32 max, u32 *next)
{
	int ret = xa_alloc_cyclic_irq(xa, id, NULL, XA_LIMIT(min, max), next, GFP_KERNEL);

	return ret < 0 ? ret : 0;
}

int rsiw_xa_store(struct xarray *xa, unsigned long index, void *entry)
{
	return xa_err(xa_store_irq(xa, index, entry, GFP_KERNEL));
}

void *rsiw_xa_erase(struct xarray *xa, unsigned long index)
{
	return xa_erase_irq(xa, index);
}

unsigned long rsiw_xa_lock(struct xarray *xa)
{
	unsigned long flags;

	xa_lock_irqsave(xa, flags);
	return flags;
}

void rsiw_xa_unlock(struct xarray *xa, unsigned long flags)
{
	xa_unlock_irqrestore(xa, flags);
}

bool rsiw_xa_empty(const struct xarray *xa)
{
	return xa_empty(xa);
}

void rsiw_live_get(void)
{
	atomic_inc(&rsiw_live);
}

void rsiw_live_put(void)
{
	if (atomic_dec_and_test(&rsiw_live))
		wake_up_var(&rsiw_live);
}

int rsiw_live_wait(unsigned int timeout_ms)
{
	wait_var_event_timeout(&rsiw_live, atomic_read(&rsiw_live) == 0,
			       msecs_to_jiffies(timeout_ms));
	return atomic_read(&rsiw_live);
}

void rsiw_refcount_put(refcount_t *r)
{
	if (refcount_dec_and_test(r)) {
		/* The zero is visible before wake_up_var() looks for a waiter. */
		smp_mb();
		wake_up_var(r);
	}
}

void rsiw_refcount_wait_zero(refcount_t *r)
{
	wait_var_event(r, refcount_read(r) == 0);
}

static void rsiw_delayed_fn(struct work_struct *work)
{
	struct rsiw_delayed *d = container_of(to_delayed_work(work), struct rsiw_delayed, dw);

	d->fn(d->arg);
}

void rsiw_delayed_init(struct rsiw_delayed *d, void (*fn)(void *arg), void *arg)
{
	INIT_DELAYED_WORK(&d->dw, rsiw_delayed_fn);
	d->fn = fn;
	d->arg = arg;
}

void rsiw_delayed_queue(struct rsiw_delayed *d, unsigned int ms)
{
	queue_delayed_work(rsiw_wq, &d->dw, msecs_to_jiffies(ms));
}

void rsiw_delayed_cancel_sync(struct rsiw_delayed *d)
{
	cancel_delayed_work_sync(&d->dw);
}

int rsiw_wq_init(void)
{
	rsiw_wq = alloc_workqueue("rsiw", WQ_HIGHPRI | WQ_PERCPU | WQ_MEM_RECLAIM, 0);
	if (!rsiw_wq)
		return -ENOMEM;
	rsiw_cm_wq = alloc_workqueue("rsiw_cm", WQ_PERCPU | WQ_MEM_RECLAIM, 0);
	if (!rsiw_cm_wq) {
		destroy_workqueue(rsiw_wq);
		rsiw_wq = NULL;
		return -ENOMEM;
	}
	return 0;
}

struct workqueue_struct *rsiw_wq_get(void)
{
	return rsiw_wq;
}

void rsiw_work_init(struct work_struct *work, void (*fn)(struct work_struct *work))
{
	INIT_WORK(work, fn);
}

bool rsiw_queue_work_on(unsigned int cpu, struct work_struct *work)
{
	return queue_work_on(cpu, rsiw_wq, work);
}

bool rsiw_cancel_work_sync(struct work_struct *work)
{
	return cancel_work_sync(work);
}

unsigned int rsiw_get_cpu(void)
{
	return get_cpu();
}

void rsiw_put_cpu(void)
{
	put_cpu();
}

bool rsiw_cpu_online(unsigned int cpu)
{
	return cpu < nr_cpu_ids && cpu_online(cpu);
}

void rsiw_local_bh_disable(void)
{
	local_bh_disable();
}

void rsiw_local_bh_enable(void)
{
	local_bh_enable();
}

u64 rsiw_jiffies_ms(void)
{
	return jiffies64_to_msecs(get_jiffies_64());
}

unsigned int rsiw_jiffy_ms(void)
{
	return max(jiffies_to_msecs(1), 1U);
}

void rsiw_wq_flush(void)
{
	flush_workqueue(rsiw_wq);
}

void rsiw_eth_random_addr(u8 *addr)
{
	eth_random_addr(addr);
}

struct workqueue_struct *rsiw_cm_wq_get(void)
{
	return rsiw_cm_wq;
}

void rsiw_wq_exit(void)
{
	destroy_workqueue(rsiw_cm_wq);
	rsiw_cm_wq = NULL;
	destroy_workqueue(rsiw_wq);
	rsiw_wq = NULL;
}

bool rsiw_in_serving_softirq(void)
{
	return in_serving_softirq();
}

static ssize_t rsiw_attr_show(struct device *dev, struct device_attribute *dattr, char *buf)
{
	struct rsiw_attr *a = container_of(dattr, struct rsiw_attr, dattr);

	return a->show(rdma_device_to_ibdev(dev), a->index, buf);
}

static ssize_t rsiw_attr_store(struct device *dev, struct device_attribute *dattr,
			       const char *buf, size_t count)
{
	struct rsiw_attr *a = container_of(dattr, struct rsiw_attr, dattr);

	return a->store(rdma_device_to_ibdev(dev), a->index, buf, count);
}

void rsiw_attr_group_init(struct ib_device *ibdev, struct rsiw_attr_group *g)
{
	memset(g, 0, sizeof(*g));
	g->group.attrs = g->list;
	ibdev->ops.device_group = &g->group;
}

int rsiw_attr_group_add(struct rsiw_attr_group *g, const char *name, rsiw_attr_show_t show,
			rsiw_attr_store_t store)
{
	unsigned int i;
	struct rsiw_attr *a;

	for (i = 0; i < RSIW_MAX_ATTRS && g->list[i]; i++)
		;
	if (i == RSIW_MAX_ATTRS)
		return -ENOSPC;
	a = &g->attrs[i];
	sysfs_attr_init(&a->dattr.attr);
	a->dattr.attr.name = name;
	a->dattr.attr.mode = 0644;
	a->dattr.show = rsiw_attr_show;
	a->dattr.store = rsiw_attr_store;
	a->index = i;
	a->show = show;
	a->store = store;
	g->list[i] = &a->dattr.attr;
	return 0;
}

struct nlattr *rsiw_res_driver_begin(struct sk_buff *msg)
{
	return nla_nest_start_noflag(msg, RDMA_NLDEV_ATTR_DRIVER);
}

void rsiw_res_driver_end(struct sk_buff *msg, struct nlattr *table, bool ok)
{
	if (ok)
		nla_nest_end(msg, table);
	else
		nla_nest_cancel(msg, table);
}

void *rsiw_owner_get(void)
{
	return get_task_pid(current, PIDTYPE_TGID);
}

void rsiw_owner_put(void *owner)
{
	put_pid(owner);
}

bool rsiw_owner_is_current(const void *owner)
{
	return task_tgid(current) == owner;
}

bool rsiw_qp_is_user(const struct ib_qp *qp)
{
	return qp->uobject;
}

struct ib_ucontext *rsiw_qp_ucontext(const struct ib_qp *qp)
{
	/* A user QP's PD is one of its context (uverbs looks it up in the caller's file). */
	return qp->pd && qp->pd->uobject ? qp->pd->uobject->context : NULL;
}

/* cond_resched() (a macro): a point where a long-running work item lets others run. */
void rsiw_cond_resched(void)
{
	cond_resched();
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rsiw C shim: out-of-line versions of the static inline functions and macros rsiw's Rust
 * code needs from the networking and RDMA headers.  Nothing here holds logic of its own.
 */
#ifndef RSIW_HELPERS_H
#define RSIW_HELPERS_H

#include <linux/device.h>
#include <linux/refcount_types.h>
#include <linux/sysfs.h>
#include <linux/types.h>
#include <linux/workqueue.h>

struct ib_device;
struct ib_mr;
struct ib_ucontext;
struct ib_udata;
struct ib_umem;
struct module;
struct net;
struct net_device;
struct nlattr;
struct sk_buff;
struct rdma_user_mmap_entry;
struct scatterlist;
struct uverbs_attr_bundle;
struct xarray;

/* THIS_MODULE of rsiw.ko (the C object and the Rust crate are one module). */
struct module *rsiw_this_module(void);

/* pr_debug() of the line @msg ("rsiw: " is put in front): off unless dynamic debug turns
 * it on, e.g. echo 'module rsiw +p' > /proc/dynamic_debug/control.  Returns whether it is
 * on; a NULL @msg only asks, so that a caller formats its line only when it is printed. */
bool rsiw_pr_debug(const char *msg);

/* The device's name (dev_name()) copied into @buf of @len octets, NUL-terminated, cut to
 * fit; returns the length copied without the NUL. */
int rsiw_ibdev_name(struct ib_device *dev, char *buf, int len);

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

/*
 * __ratelimit() over one of RSIW_RATELIMIT_SITES states (DEFAULT_RATELIMIT_INTERVAL/BURST)
 * chosen by site % RSIW_RATELIMIT_SITES: each message site gets its own budget, as with
 * pr_err_ratelimited(), up to collisions.
 */
#define RSIW_RATELIMIT_SITES 64
bool rsiw_ratelimit(unsigned int site);

struct workqueue_struct;
/*
 * rsiw's own work queues, both per-CPU and WQ_MEM_RECLAIM (storage ULPs reconnect under
 * memory pressure): "rsiw" (high priority) for the connections' data path, "rsiw_cm"
 * (normal priority) for listeners and connection endpoints.  Created at module init,
 * destroyed (after draining, "rsiw_cm" first, since its work may queue data-path work) at
 * module exit, so no work item of rsiw can outlive the module's code.
 */
/* eth_random_addr() (inline): a random locally administered unicast MAC in @addr[6]. */
void rsiw_eth_random_addr(u8 *addr);

int rsiw_wq_init(void);
struct workqueue_struct *rsiw_wq_get(void);
struct workqueue_struct *rsiw_cm_wq_get(void);
void rsiw_wq_exit(void);

/*
 * The count of live listeners, connection endpoints and connections: each takes one at
 * creation and gives it back when freed; rsiw_live_wait() waits (wait_var_event) up to
 * @timeout_ms for the count to reach zero and returns how many are left.  Module exit
 * waits for them: their socket callbacks and timers are module code.
 */
void rsiw_live_get(void);
void rsiw_live_put(void);
int rsiw_live_wait(unsigned int timeout_ms);

/*
 * A reference count whose holders' last put wakes one waiter (the object's destroy):
 * rsiw_refcount_put() drops a reference and, at zero, wakes rsiw_refcount_wait_zero(),
 * which sleeps (wait_var_event) until @r is zero.  The wake only hashes @r's address, so
 * the waiter may free the object as soon as it sees zero.
 */
void rsiw_refcount_put(refcount_t *r);
void rsiw_refcount_wait_zero(refcount_t *r);

/*
 * A delayed call of @fn(@arg) on rsiw's workqueue: rsiw_delayed_queue() arms it to run in
 * @ms milliseconds unless it is pending already; rsiw_delayed_cancel_sync() cancels it
 * and waits for a run in progress, also one that queues itself again.
 */
struct rsiw_delayed {
	struct delayed_work dw;
	void (*fn)(void *arg);
	void *arg;
};
void rsiw_delayed_init(struct rsiw_delayed *d, void (*fn)(void *arg), void *arg);
void rsiw_delayed_queue(struct rsiw_delayed *d, unsigned int ms);
void rsiw_delayed_cancel_sync(struct rsiw_delayed *d);

/* ib_copy_from_udata(): 0 or -EFAULT. */
int rsiw_copy_from_udata(void *dst, struct ib_udata *udata, size_t len);

/* &attrs->driver_udata, or NULL for a NULL bundle (kernel caller). */
struct ib_udata *rsiw_bundle_udata(struct uverbs_attr_bundle *attrs);

/* The ucontext of a user verb (rdma_udata_to_uverbs_attr_bundle(udata)->context). */
struct ib_ucontext *rsiw_udata_ucontext(struct ib_udata *udata);

/*
 * Ring memory: user rings charged to the caller's memory cgroup and mapped page by page,
 * kernel rings with vzalloc() (the allocation hooks are macros).
 */
void *rsiw_vmalloc_user(unsigned long size);
int rsiw_remap_vmalloc(struct vm_area_struct *vma, void *kaddr, unsigned long len);
void *rsiw_vzalloc(unsigned long size);

/* rdma_user_mmap_get_offset() */
u64 rsiw_mmap_get_offset(const struct rdma_user_mmap_entry *entry);

/* ib_umem_get_va(): an ib_umem or an ERR_PTR. */
struct ib_umem *rsiw_umem_get_va(struct ib_device *dev, unsigned long addr, size_t size,
				 int access);

/*
 * Releasing a umem may sleep (it unpins and dirties pages), but the last reference to a
 * user memory region can go in the receive path, in softirq.  rsiw_umem_release_prepare()
 * allocates (GFP_KERNEL) what a later rsiw_umem_release_async() needs to release @umem
 * from rsiw's workqueue, and holds the umem's device until then; NULL without memory.
 * Module exit drains the workqueue.
 */
struct rsiw_umem_release;
struct rsiw_umem_release *rsiw_umem_release_prepare(struct ib_umem *umem);
void rsiw_umem_release_async(struct rsiw_umem_release *r);

/* memcpy() of @len octets from @src, a kernel mapping of registered memory (which user
 * space may change meanwhile), to @dst. */
void rsiw_copy_kva(void *dst, const void *src, size_t len);

/* sg_dma_address(), sg_dma_len(), sg_next() */
u64 rsiw_sg_dma_address(const struct scatterlist *sg);
unsigned int rsiw_sg_dma_len(const struct scatterlist *sg);
struct scatterlist *rsiw_sg_next(struct scatterlist *sg);

/*
 * xarrays with ID allocation whose lock is taken with interrupts disabled (the lookups
 * will come from softirq context): xa_init_flags(XA_FLAGS_ALLOC | XA_FLAGS_LOCK_IRQ),
 * xa_alloc_cyclic_irq() with GFP_KERNEL and a NULL (reserved) entry, xa_store_irq() with
 * GFP_KERNEL, xa_erase_irq(), xa_lock_irqsave()/xa_unlock_irqrestore(), xa_empty().
 */
void rsiw_xa_init_alloc(struct xarray *xa);
int rsiw_xa_reserve_cyclic(struct xarray *xa, u32 *id, u32 min, u32 max, u32 *next);
int rsiw_xa_store(struct xarray *xa, unsigned long index, void *entry);
void *rsiw_xa_erase(struct xarray *xa, unsigned long index);
unsigned long rsiw_xa_lock(struct xarray *xa);
void rsiw_xa_unlock(struct xarray *xa, unsigned long flags);
bool rsiw_xa_empty(const struct xarray *xa);

/*
 * A device's read-write sysfs attributes (the RDMA core's ops.device_group): one file per
 * name in /sys/class/infiniband/<dev>/, mode 0644.  Reads and writes go to @show and
 * @store with the device and the attribute's index into the name list; @show writes at
 * most PAGE_SIZE octets into @buf, @store gets the octets written and returns @count or a
 * negative errno.
 */
#define RSIW_MAX_ATTRS 16

typedef ssize_t (*rsiw_attr_show_t)(struct ib_device *ibdev, unsigned int index, char *buf);
typedef ssize_t (*rsiw_attr_store_t)(struct ib_device *ibdev, unsigned int index,
				     const char *buf, size_t count);

struct rsiw_attr {
	struct device_attribute dattr;
	unsigned int index;
	rsiw_attr_show_t show;
	rsiw_attr_store_t store;
};

struct rsiw_attr_group {
	struct rsiw_attr attrs[RSIW_MAX_ATTRS];
	struct attribute *list[RSIW_MAX_ATTRS + 1];
	struct attribute_group group;
};

/* Empties @g and makes it @ibdev's device group.  Call before ib_register_device(); @g
 * must live until the device is freed. */
void rsiw_attr_group_init(struct ib_device *ibdev, struct rsiw_attr_group *g);

/* Adds the attribute @name (which must outlive the device) to @g; it is the next index,
 * counting from 0.  Returns 0, or -ENOSPC when @g holds RSIW_MAX_ATTRS already. */
int rsiw_attr_group_add(struct rsiw_attr_group *g, const char *name, rsiw_attr_show_t show,
			rsiw_attr_store_t store);

/*
 * The table of driver attributes in a resource's netlink entry (fill_res_*_entry):
 * nla_nest_start_noflag(@msg, RDMA_NLDEV_ATTR_DRIVER), NULL when the message is full;
 * and its end, nla_nest_end() when @ok, else nla_nest_cancel() (drops what was added).
 */
struct nlattr *rsiw_res_driver_begin(struct sk_buff *msg);
void rsiw_res_driver_end(struct sk_buff *msg, struct nlattr *table, bool ok);

/*
 * A CQ's completion vector: the handler call deferred to the vector's CPU.
 * rsiw_work_init() is INIT_WORK() (one lockdep class for all of rsiw's CQs);
 * rsiw_queue_work_on() is queue_work_on(@cpu, "rsiw", @work), false if @work was pending
 * already; rsiw_cancel_work_sync() is cancel_work_sync().  rsiw_get_cpu()/rsiw_put_cpu()
 * are get_cpu()/put_cpu(), rsiw_cpu_online() is cpu_online() for any @cpu (false beyond
 * nr_cpu_ids), rsiw_local_bh_disable()/rsiw_local_bh_enable() are local_bh_disable() and
 * local_bh_enable().
 */
struct work_struct;
void rsiw_work_init(struct work_struct *work, void (*fn)(struct work_struct *work));
bool rsiw_queue_work_on(unsigned int cpu, struct work_struct *work);
bool rsiw_cancel_work_sync(struct work_struct *work);
unsigned int rsiw_get_cpu(void);
void rsiw_put_cpu(void);
bool rsiw_cpu_online(unsigned int cpu);
void rsiw_local_bh_disable(void);
void rsiw_local_bh_enable(void);
/*
 * The jiffies clock in milliseconds (jiffies64_to_msecs(get_jiffies_64())): one load and
 * a multiplication, where ktime_get() reads the clocksource.  It lags the monotonic clock
 * by up to a tick (rsiw_jiffy_ms() milliseconds, at least 1).
 */
u64 rsiw_jiffies_ms(void);
unsigned int rsiw_jiffy_ms(void);
/* flush_workqueue() of "rsiw": every handler call queued before it has run (KUnit). */
void rsiw_wq_flush(void);

/* in_serving_softirq(): the caller runs a softirq handler (KUnit checks of the context). */
bool rsiw_in_serving_softirq(void);

/*
 * The owner of a user object: rsiw_owner_get() is get_task_pid(current, PIDTYPE_TGID), a
 * counted reference to the calling task's thread group (NULL if the task is exiting),
 * rsiw_owner_put() is put_pid(), and rsiw_owner_is_current() says whether the calling task
 * belongs to thread group @owner.  The pointer stays opaque (void *) to the bindings.
 */
void *rsiw_owner_get(void);
/*
 * rsiw_qp_is_user(): whether @qp was created through uverbs (qp->uobject set);
 * rsiw_qp_ucontext(): the user context of its PD, one of the QP's own (uverbs looks the PD
 * up in the caller's file), or NULL.
 */
bool rsiw_qp_is_user(const struct ib_qp *qp);
struct ib_ucontext *rsiw_qp_ucontext(const struct ib_qp *qp);
void rsiw_owner_put(void *owner);
bool rsiw_owner_is_current(const void *owner);

void rsiw_cond_resched(void);

#endif /* RSIW_HELPERS_H */

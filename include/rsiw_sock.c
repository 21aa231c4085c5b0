// SPDX-License-Identifier: GPL-2.0
/*
 * rsiw C shim for kernel TCP sockets: see rsiw_sock.h.
 */
#include <linux/crc32.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/net.h>
#include <linux/vmalloc.h>
#include <linux/skbuff.h>
#include <linux/socket.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/sockptr.h>
#include <net/ip.h>
#include <linux/uio.h>
#include <net/sock.h>
#include <net/tcp.h>

#include <rdma/iw_cm.h>

#include "rsiw_sock.h"

/*
 * The callbacks below run in softirq (TCP's receive path) and in process context (the
 * backlog that release_sock() processes, inet_shutdown() calling sk_state_change), so they
 * take sk_callback_lock with softirqs off: a reader holding it with softirqs on could be
 * interrupted by a softirq spinning on a socket spinlock whose holder waits to write-lock
 * sk_callback_lock (inet_csk_listen_stop() -> inet_child_forget() -> sock_orphan() for a
 * child of an rsiw listener, which inherited these callbacks): a SOFTIRQ-safe ->
 * SOFTIRQ-unsafe lock order.
 */

/* The attachment of a socket, or NULL (also for a socket accepted from an rsiw listener). */
static struct rsiw_sk_cb *rsiw_sk_cb_of(struct sock *sk)
{
	return __locked_read_sk_user_data_with_flags(sk, SK_USER_DATA_NOCOPY);
}

static void rsiw_sk_data_ready(struct sock *sk)
{
	struct rsiw_sk_cb *cb;

	read_lock_bh(&sk->sk_callback_lock);
	cb = rsiw_sk_cb_of(sk);
	if (cb)
		cb->event(cb->ctx, sk->sk_socket, RSIW_SK_DATA_READY);
	read_unlock_bh(&sk->sk_callback_lock);
}

static void rsiw_sk_write_space(struct sock *sk)
{
	struct rsiw_sk_cb *cb;

	read_lock_bh(&sk->sk_callback_lock);
	cb = rsiw_sk_cb_of(sk);
	if (cb) {
		/*
		 * TCP calls this on every ACK that frees memory while SOCK_NOSPACE is set;
		 * sk_stream_write_space() clears the flag once a third of the send buffer is
		 * free. Sending resumes then, not per ACK (the C siw does the same).
		 */
		cb->orig_write_space(sk);
		if (sk->sk_socket && !test_bit(SOCK_NOSPACE, &sk->sk_socket->flags))
			cb->event(cb->ctx, sk->sk_socket, RSIW_SK_WRITE_SPACE);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

static void rsiw_sk_state_change(struct sock *sk)
{
	struct rsiw_sk_cb *cb;

	read_lock_bh(&sk->sk_callback_lock);
	cb = rsiw_sk_cb_of(sk);
	if (cb) {
		cb->orig_state_change(sk);
		cb->event(cb->ctx, sk->sk_socket, RSIW_SK_STATE_CHANGE);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

void rsiw_sk_attach(struct socket *sock, struct rsiw_sk_cb *cb, const struct rsiw_sk_cb *inherit)
{
	struct sock *sk = sock->sk;

	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_data_ready == rsiw_sk_data_ready && inherit) {
		cb->orig_data_ready = inherit->orig_data_ready;
		cb->orig_write_space = inherit->orig_write_space;
		cb->orig_state_change = inherit->orig_state_change;
	} else {
		cb->orig_data_ready = sk->sk_data_ready;
		cb->orig_write_space = sk->sk_write_space;
		cb->orig_state_change = sk->sk_state_change;
	}
	__rcu_assign_sk_user_data_with_flags(sk, cb, SK_USER_DATA_NOCOPY);
	sk->sk_data_ready = rsiw_sk_data_ready;
	sk->sk_write_space = rsiw_sk_write_space;
	sk->sk_state_change = rsiw_sk_state_change;
	write_unlock_bh(&sk->sk_callback_lock);
}

void rsiw_sk_detach(struct socket *sock)
{
	struct sock *sk = sock->sk;
	struct rsiw_sk_cb *cb;

	write_lock_bh(&sk->sk_callback_lock);
	cb = rsiw_sk_cb_of(sk);
	if (cb) {
		sk->sk_data_ready = cb->orig_data_ready;
		sk->sk_write_space = cb->orig_write_space;
		sk->sk_state_change = cb->orig_state_change;
		rcu_assign_sk_user_data(sk, NULL);
	}
	write_unlock_bh(&sk->sk_callback_lock);
}

struct rsiw_read_ctx {
	rsiw_read_actor_t actor;
	void *ctx;
};

static int rsiw_read_actor(read_descriptor_t *desc, struct sk_buff *skb, unsigned int off,
			   size_t len)
{
	struct rsiw_read_ctx *rc = desc->arg.data;
	size_t used = rc->actor(rc->ctx, skb, off, len);

	/* tcp_read_sock() goes on while count is non-zero; stop at a short read. */
	if (used < len)
		desc->count = 0;
	return used;
}

int rsiw_tcp_read(struct socket *sock, rsiw_read_actor_t actor, void *ctx, bool locked)
{
	struct rsiw_read_ctx rc = { .actor = actor, .ctx = ctx };
	read_descriptor_t desc = { .arg.data = &rc, .count = 1 };
	int rv;

	if (!locked)
		lock_sock(sock->sk);
	rv = tcp_read_sock(sock->sk, &desc, rsiw_read_actor);
	if (!locked)
		release_sock(sock->sk);
	return rv;
}

int rsiw_skb_copy_bits(const struct sk_buff *skb, unsigned int offset, void *to, size_t len)
{
	return skb_copy_bits(skb, offset, to, len) ? -EFAULT : 0;
}

u32 rsiw_skb_crc32c(const struct sk_buff *skb, unsigned int offset, size_t len, u32 crc)
{
#if IS_ENABLED(CONFIG_NET_CRC32C)
	return skb_crc32c(skb, offset, len, crc);
#else
	/* skb_crc32c() is built only with NET_CRC32C, which nothing may have selected. */
	u8 buf[256];

	while (len) {
		size_t n = min(len, sizeof(buf));

		if (skb_copy_bits(skb, offset, buf, n))
			break;
		crc = crc32c(crc, buf, n);
		offset += n;
		len -= n;
	}
	return crc;
#endif
}

void rsiw_sk_lock(struct socket *sock)
{
	lock_sock(sock->sk);
}

void rsiw_sk_unlock(struct socket *sock)
{
	release_sock(sock->sk);
}

/* sendmsg on a socket the caller owns (@locked) or not. */
static int rsiw_sendmsg(struct socket *sock, struct msghdr *msg, size_t len, bool locked)
{
	if (locked)
		return tcp_sendmsg_locked(sock->sk, msg, len);
	return sock_sendmsg(sock, msg);
}

int rsiw_send_kvec(struct socket *sock, struct kvec *vec, size_t nvec, size_t len, bool more,
		   bool locked)
{
	struct msghdr msg = { .msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL | (more ? MSG_MORE : 0) };

	iov_iter_kvec(&msg.msg_iter, ITER_SOURCE, vec, nvec, len);
	return rsiw_sendmsg(sock, &msg, len, locked);
}

/* The page holding kernel address @p (linear map or vmalloc), or NULL. */
static struct page *rsiw_kva_page(const void *p)
{
	if (is_vmalloc_or_module_addr(p))
		return vmalloc_to_page(p);
	if (virt_addr_valid(p))
		return virt_to_page(p);
	return NULL;
}

/*
 * Pages per sendmsg call of rsiw_send_kvas(): a whole FPDU of up to 64768 octets (17
 * pages of 4 KiB when it does not start on a page boundary) in one call.
 */
#define RSIW_SEND_BVECS 32

int rsiw_send_kvas(struct socket *sock, const struct kvec *ranges, size_t nr, size_t len,
		   bool more, bool locked)
{
	struct bio_vec bvec[RSIW_SEND_BVECS];
	size_t done = 0, r = 0, roff = 0;

	while (done < len && r < nr) {
		struct msghdr msg = { .msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL };
		size_t chunk = 0, cr = r, croff = roff;
		unsigned int n = 0;
		bool splice = false;
		int rv;

		/* A run of pages that are all spliced or all copied, across the ranges. */
		while (n < RSIW_SEND_BVECS && cr < nr) {
			const void *p = ranges[cr].iov_base + croff;
			size_t l = min_t(size_t, PAGE_SIZE - offset_in_page(p),
					 ranges[cr].iov_len - croff);
			struct page *page;
			bool ok;

			if (!l) {
				cr++;
				croff = 0;
				continue;
			}
			page = rsiw_kva_page(p);
			if (!page) {
				if (n)
					break;
				return done ? done : -EFAULT;
			}
			ok = sendpage_ok(page);
			if (n == 0)
				splice = ok;
			else if (ok != splice)
				break;
			bvec_set_page(&bvec[n++], page, l, offset_in_page(p));
			chunk += l;
			croff += l;
			if (croff == ranges[cr].iov_len) {
				cr++;
				croff = 0;
			}
		}
		if (!n)
			break;
		if (splice)
			msg.msg_flags |= MSG_SPLICE_PAGES;
		if (more || done + chunk < len)
			msg.msg_flags |= MSG_MORE;
		iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, bvec, n, chunk);
		rv = rsiw_sendmsg(sock, &msg, chunk, locked);
		if (rv < 0)
			return done ? done : rv;
		done += rv;
		if (rv < chunk)
			break;
		r = cr;
		roff = croff;
	}
	return done;
}

struct page *rsiw_copy_page_alloc(void)
{
	return alloc_page(GFP_KERNEL | __GFP_NOWARN);
}

void rsiw_copy_page_put(struct page *page)
{
	put_page(page);
}

bool rsiw_copy_page_idle(struct page *page)
{
	/* Pairs with the fully ordered decrement of put_page() by the last other holder. */
	return atomic_read_acquire(&page->_refcount) == 1;
}

void *rsiw_copy_page_address(struct page *page)
{
	return page_address(page);
}

void rsiw_copy_page_get(struct page *page)
{
	get_page(page);
}

int rsiw_sk_state(const struct socket *sock)
{
	return READ_ONCE(sock->sk->sk_state);
}

bool rsiw_sk_rx_queued(const struct socket *sock)
{
	return !skb_queue_empty_lockless(&sock->sk->sk_receive_queue);
}

unsigned int rsiw_tcp_mss(const struct socket *sock)
{
	return READ_ONCE(tcp_sk(sock->sk)->mss_cache);
}

void rsiw_sk_tune(struct socket *sock, bool listener)
{
	if (listener)
		sock_set_reuseaddr(sock->sk);
	else
		tcp_sock_set_nodelay(sock->sk);
}

int rsiw_sockaddr_fmt(const struct sockaddr *addr, char *buf, int len)
{
	return scnprintf(buf, len, "%pISpc", addr);
}

int rsiw_sockaddr_len(const struct sockaddr *addr)
{
	switch (addr->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

int rsiw_sk_family(const struct socket *sock)
{
	return sock->sk->sk_family;
}

void rsiw_sk_hold_net(struct socket *sock)
{
	sk_net_refcnt_upgrade(sock->sk);
}

void rsiw_sk_bind_dev(struct socket *sock, int ifindex)
{
	WRITE_ONCE(sock->sk->sk_bound_dev_if, ifindex);
}

void rsiw_sk_set_v6only(struct socket *sock, bool on)
{
	if (sock->sk->sk_family == AF_INET6)
		sock->sk->sk_ipv6only = on;
}

bool rsiw_iw_cm_id_afonly(const struct iw_cm_id *cm_id)
{
	return cm_id->afonly;
}

int rsiw_iw_cm_id_tos(const struct iw_cm_id *cm_id)
{
	return cm_id->tos_set ? cm_id->tos : -1;
}

int rsiw_sk_set_tos(struct socket *sock, u8 tos)
{
	int val = tos;

	/* IPv4, and IPv4-mapped traffic of an IPv6 socket. */
	ip_sock_set_tos(sock->sk, tos);
	if (sock->sk->sk_family != AF_INET6)
		return 0;
	return sock->ops->setsockopt(sock, SOL_IPV6, IPV6_TCLASS, KERNEL_SOCKPTR(&val),
				     sizeof(val));
}

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rsiw C shim for kernel TCP sockets: socket callbacks and tcp_read_sock().
 *
 * The socket callbacks (sk_data_ready, sk_write_space, sk_state_change) must read
 * sk_user_data under sk_callback_lock and chain to the callbacks they replaced; that
 * bookkeeping lives here so the Rust side sees one event function with a context
 * pointer.  Nothing here decides anything.
 */
#ifndef RSIW_SOCK_H
#define RSIW_SOCK_H

#include <linux/types.h>

struct sock;
struct socket;
struct sk_buff;
struct page;
struct sockaddr;
struct kvec;

/* What happened on a socket (the argument of rsiw_sk_cb.event). */
enum rsiw_sk_event {
	RSIW_SK_DATA_READY = 1,
	RSIW_SK_WRITE_SPACE = 2,
	RSIW_SK_STATE_CHANGE = 3,
};

/*
 * The attachment of an rsiw object to a socket.  Owned by the Rust object; it must stay
 * valid from rsiw_sk_attach() until rsiw_sk_detach() has returned.  event() gets
 * sk->sk_socket (NULL after sock_orphan()) and runs with
 * sk_callback_lock held for reading, in softirq or process context: it must not sleep.
 */
struct rsiw_sk_cb {
	void *ctx;
	void (*event)(void *ctx, struct socket *sock, enum rsiw_sk_event ev);
	void (*orig_data_ready)(struct sock *sk);
	void (*orig_write_space)(struct sock *sk);
	void (*orig_state_change)(struct sock *sk);
};

/*
 * Routes the socket's callbacks to cb->event (after the original callbacks ran).  A socket
 * accepted from an rsiw listener carries the listener's callback pointers but no
 * sk_user_data (SK_USER_DATA_NOCOPY); pass the listener's attachment as @inherit so its
 * saved originals are used, else NULL.
 */
void rsiw_sk_attach(struct socket *sock, struct rsiw_sk_cb *cb, const struct rsiw_sk_cb *inherit);

/* Undoes rsiw_sk_attach(); on return no event() call is running or will start. */
void rsiw_sk_detach(struct socket *sock);

/*
 * tcp_read_sock() with an actor that gets (ctx, skb, offset, len) and returns how many
 * octets it consumed; reading stops at the first short count.  @locked: the caller runs
 * in the socket's softirq receive path or already owns the socket; otherwise the socket
 * is locked around the read.  Returns the octets consumed or a negative errno.
 */
typedef size_t (*rsiw_read_actor_t)(void *ctx, const struct sk_buff *skb, unsigned int offset,
				    size_t len);
int rsiw_tcp_read(struct socket *sock, rsiw_read_actor_t actor, void *ctx, bool locked);

/* skb_copy_bits(): 0 or -EFAULT. */
int rsiw_skb_copy_bits(const struct sk_buff *skb, unsigned int offset, void *to, size_t len);

/*
 * skb_crc32c(): @crc extended over @len octets at @offset of @skb (which holds them);
 * through a copy where the kernel has no skb_crc32c() (CONFIG_NET_CRC32C unset).
 */
u32 rsiw_skb_crc32c(const struct sk_buff *skb, unsigned int offset, size_t len, u32 crc);

/*
 * lock_sock() / release_sock(): the caller owns the socket in between (process context;
 * may sleep).  Segments and ACKs arriving meanwhile wait in the socket's backlog, which
 * release_sock() processes, running the socket's callbacks in the caller's context.
 */
void rsiw_sk_lock(struct socket *sock);
void rsiw_sk_unlock(struct socket *sock);

/*
 * Non-blocking sends.  Return the octets queued (possibly fewer than asked) or a negative
 * errno (-EAGAIN when the send buffer is full).  @more: more data follows (MSG_MORE).
 * @locked: the caller owns the socket (rsiw_sk_lock()), else it is locked per call.
 */
int rsiw_send_kvec(struct socket *sock, struct kvec *vec, size_t nvec, size_t len, bool more,
		   bool locked);

/*
 * Queues the @len octets of the @nr ranges of kernel memory @ranges (linear map or
 * vmalloc), in order, without copying where TCP may take a page reference
 * (MSG_SPLICE_PAGES on pages that are sendpage_ok(); slab pages are copied).  The pages
 * of consecutive ranges go in one sendmsg call (up to RSIW_SEND_BVECS pages) whether or
 * not they are contiguous, so TCP sizes its packets by the whole run, not by each
 * range.  TCP reads spliced pages when it (re)transmits, so their contents go on the wire
 * as they are then: rsiw hands it only pages of its own (a connection's copy pages),
 * never a consumer's.  Returns the octets queued or a negative errno (-EAGAIN when the
 * send buffer is full, -EFAULT for an address with no struct page).  @locked as for
 * rsiw_send_kvec().
 */
int rsiw_send_kvas(struct socket *sock, const struct kvec *ranges, size_t nr, size_t len,
		   bool more, bool locked);

/*
 * Pages rsiw copies outgoing payload into before TCP takes them by reference (a
 * connection's copy pages, rust/sys/mem/copy_pages.rs).  rsiw_copy_page_alloc() returns
 * an order-0 page of the linear map with one reference, the caller's, or NULL;
 * rsiw_copy_page_put() drops that reference.  TCP holds references of its own to the
 * pages of its socket buffers (MSG_SPLICE_PAGES), and drops them once it no longer reads
 * them.  rsiw_copy_page_idle() tells whether the caller's is the only reference left,
 * with acquire order: TCP's reads of the page happen before the caller's next writes.
 * rsiw_copy_page_address() is the page's kernel address (page_address()).
 */
struct page *rsiw_copy_page_alloc(void);
void rsiw_copy_page_put(struct page *page);
bool rsiw_copy_page_idle(struct page *page);
void *rsiw_copy_page_address(struct page *page);
/* get_page(): a reference as TCP takes one (the KUnit suite rsiw_copy_pages). */
void rsiw_copy_page_get(struct page *page);

/* sk->sk_state (TCP_*), tcp_sk(sk)->mss_cache. */
int rsiw_sk_state(const struct socket *sock);
/* Whether sk->sk_receive_queue holds a buffer (read without the queue's lock). */
bool rsiw_sk_rx_queued(const struct socket *sock);
unsigned int rsiw_tcp_mss(const struct socket *sock);

/* TCP_NODELAY on, SO_REUSEADDR on (listeners); keepalive left as configured. */
void rsiw_sk_tune(struct socket *sock, bool listener);

/* sizeof(struct sockaddr_in) / sizeof(struct sockaddr_in6) for family, else 0. */
/* Formats @addr as the kernel's %pISpc does ("10.0.0.2:4791", "[fe80::1%2]:4791") into
 * @buf of @len octets, NUL-terminated; returns the length written without the NUL. */
int rsiw_sockaddr_fmt(const struct sockaddr *addr, char *buf, int len);
int rsiw_sockaddr_len(const struct sockaddr *addr);

/* sock->sk->sk_family */
int rsiw_sk_family(const struct socket *sock);

/* sk->sk_bound_dev_if = ifindex (a listener on a wildcard address serves one netdev). */
/*
 * sk_net_refcnt_upgrade(): the kernel socket holds a reference to its network namespace,
 * as user sockets do, so the namespace outlives it (nvme-tcp, cifs).  Children accepted
 * from a listener inherit the reference.  Call it right after sock_create_kern().
 */
void rsiw_sk_hold_net(struct socket *sock);
void rsiw_sk_bind_dev(struct socket *sock, int ifindex);

/* IPV6_V6ONLY for an AF_INET6 socket. */
void rsiw_sk_set_v6only(struct socket *sock, bool on);

struct iw_cm_id;
/* cm_id->afonly (a bit field). */
bool rsiw_iw_cm_id_afonly(const struct iw_cm_id *cm_id);
/* The type of service the consumer set on @cm_id (rdma_set_service_type(), rdma_set_option
 * RDMA_OPTION_ID_TOS), or -1 if it set none. */
int rsiw_iw_cm_id_tos(const struct iw_cm_id *cm_id);
/* Sets IP_TOS to @tos (and IPV6_TCLASS on an IPv6 socket); 0 or a negative errno. Process
 * context. */
int rsiw_sk_set_tos(struct socket *sock, u8 tos);

#endif /* RSIW_SOCK_H */

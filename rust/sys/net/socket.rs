// SPDX-License-Identifier: GPL-2.0

//! Kernel TCP sockets: creation, bind/listen/accept/connect, non-blocking sends (with page
//! splicing), reads through `tcp_read_sock()`, and socket callbacks routed to a Rust object.
//!
//! The socket-callback bookkeeping (`sk_callback_lock`, the replaced callbacks) is in the C
//! shim `include/rsiw_sock.c`; here it becomes [`SockEvents`], a trait whose single method
//! runs in softirq or process context and must not sleep.

use crate::sys::bindings as b;
use crate::sys::{to_result, Pod};
use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::{ForeignOwnable, Opaque};

/// A socket event, as [`SockEvents::event`] receives it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SockEvent {
    /// Data arrived (`sk_data_ready`); on a listener: a connection waits in the accept queue.
    DataReady,
    /// Send buffer space became available (`sk_write_space`).
    WriteSpace,
    /// The TCP state changed (`sk_state_change`): see [`Socket::state`].
    StateChange,
}

/// A Rust object that receives the events of the sockets it is attached to.
pub(crate) trait SockEvents: Send + Sync + 'static {
    /// Called with `sk_callback_lock` held for reading, in softirq or process context: must
    /// not sleep or take the socket lock; may read the socket with [`Socket::read`] with
    /// `locked == true` when `ev` is [`SockEvent::DataReady`].
    fn event(this: ArcBorrow<'_, Self>, sock: SockRef<'_>, ev: SockEvent);
}

/// TCP states of [`Socket::state`] (`TCP_*` in `include/net/tcp_states.h`).
pub(crate) mod tcp_state {
    /// Connection established.
    pub(crate) const ESTABLISHED: i32 = 1;
    /// Closed.
    pub(crate) const CLOSE: i32 = 7;
    /// The peer closed its side (FIN received).
    pub(crate) const CLOSE_WAIT: i32 = 8;
}

/// An IPv4 or IPv6 socket address, addresses and ports in network order as the kernel
/// keeps them: a `struct sockaddr_in6`, or a `struct sockaddr_in` in its first octets
/// (28 octets instead of a `struct sockaddr_storage`'s 128; every connection endpoint
/// holds two).
///
/// # Invariants
///
/// The family field (the first two octets of both layouts) says which layout the octets
/// hold; an address of another family is never used as an IP address (the socket calls
/// reject it by [`SockAddr::len`]).
#[derive(Clone, Copy)]
pub(crate) struct SockAddr(b::sockaddr_in6);

/// Who holds a socket's lock for [`SockOps::read`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SockLock {
    /// The caller: the socket's receive path or an owner of the socket lock.
    Held,
    /// Nobody: the read takes it (and may sleep).
    Take,
}

// SAFETY: plain data; the pointer in the storage union only forces its alignment.
unsafe impl Send for SockAddr {}
// SAFETY: as above.
unsafe impl Sync for SockAddr {}

/// "10.0.0.2:4791", "[fe80::1%2]:4791": the kernel's `%pISpc` (address, port, IPv6 scope).
impl core::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut buf = [0u8; 64];
        let (out, cap) = (buf.as_mut_ptr().cast(), buf.len() as i32);
        // SAFETY: a whole address of the family it names (type invariant), which is all
        // `%pISpc` reads; the shim writes at most `cap` octets to `out`.
        let n = unsafe { b::rsiw_sockaddr_fmt(self.as_ptr(), out, cap) };
        let n = usize::try_from(n).unwrap_or(0).min(buf.len());
        f.write_str(core::str::from_utf8(&buf[..n]).unwrap_or("?"))
    }
}

impl kernel::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

impl SockAddr {
    /// The address in `ss` (its first 28 octets: all of an IPv4 or IPv6 address).
    pub(crate) fn from_storage(ss: &b::__kernel_sockaddr_storage) -> Self {
        let mut a = b::sockaddr_in6::zeroed();
        // SAFETY: both are plain integers and padding; `sockaddr_storage` (128 octets) is
        // larger than `sockaddr_in6` (28), so the copy reads and writes within both.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(ss).cast::<u8>(),
                core::ptr::from_mut(&mut a).cast::<u8>(),
                core::mem::size_of::<b::sockaddr_in6>(),
            )
        };
        // INVARIANT: the family came with the octets it describes.
        Self(a)
    }

    /// The address as a `struct sockaddr_storage` (zeroes after it), for `iw_cm`
    /// structures.
    pub(crate) fn storage(&self) -> b::__kernel_sockaddr_storage {
        let mut ss = b::__kernel_sockaddr_storage::zeroed();
        // SAFETY: as in `from_storage`, the other way round.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&self.0).cast::<u8>(),
                core::ptr::from_mut(&mut ss).cast::<u8>(),
                core::mem::size_of::<b::sockaddr_in6>(),
            )
        };
        ss
    }

    /// The address family (`AF_INET` = 2, `AF_INET6` = 10, other values are rejected by
    /// the socket calls with `EAFNOSUPPORT`).
    pub(crate) fn family(&self) -> u16 {
        self.0.sin6_family
    }

    /// Whether the address is the IPv4 or IPv6 wildcard (any address).
    pub(crate) fn is_wildcard(&self) -> bool {
        match u32::from(self.family()) {
            b::AF_INET => {
                let p = core::ptr::from_ref(&self.0).cast::<b::sockaddr_in>();
                // SAFETY: a `sockaddr_in` (16 octets, integers) in the first octets (invariant).
                unsafe { (*p).sin_addr.s_addr == 0 }
            }
            // SAFETY: the union's members are integer arrays; every bit pattern is valid.
            b::AF_INET6 => unsafe { self.0.sin6_addr.in6_u.u6_addr8 }
                .iter()
                .all(|&x| x == 0),
            _ => false,
        }
    }

    fn as_ptr(&self) -> *mut b::sockaddr {
        core::ptr::from_ref(&self.0).cast_mut().cast()
    }

    /// The length of the address for `family()`, or `EAFNOSUPPORT`.
    fn len(&self) -> Result<i32> {
        // SAFETY: `as_ptr()` points to a whole `sockaddr_in6`, which covers the family
        // field the helper reads.
        match unsafe { b::rsiw_sockaddr_len(self.as_ptr()) } {
            0 => Err(EAFNOSUPPORT),
            n => Ok(n),
        }
    }
}

/// Ranges of memory [`Socket::send_kvas`] offers TCP per call.
pub(crate) const SEND_RANGES: usize = 32;

/// A kernel TCP socket, owned.
///
/// # Invariants
///
/// `sock` is a `struct socket` created by `sock_create_kern()` or `kernel_accept()` with a
/// TCP `sk`; it is released (once) when the `Socket` is dropped. `attach`, when `Some`,
/// is the attachment registered with `rsiw_sk_attach()` and holds a reference of the
/// attached object; it is detached before the socket is released. `owned` is `true` exactly
/// while this `Socket` holds the socket lock (`lock_sock()` by [`Socket::own`], not yet
/// released); the methods that take or release the lock, or send under it, take
/// `&mut self`, so one owner runs them in sequence.
pub(crate) struct Socket {
    sock: NonNull<b::socket>,
    attach: Option<Attachment>,
    owned: bool,
}

// SAFETY: the socket layer serialises the operations rsiw calls (they take the socket lock
// or are atomic reads); the pointer may move between threads.
unsafe impl Send for Socket {}
// SAFETY: as above; every `&self` method may run concurrently with any other. `own`,
// `disown`, the sends and `shutdown` take `&mut self`, so they are one owner's sequence.
unsafe impl Sync for Socket {}

/// The attachment of an object to a socket.
///
/// # Invariants
///
/// `cb` is valid and pinned (boxed); while attached, `cb.ctx` holds a reference of the
/// object created by `Arc::into_foreign`, which `release` gives back.
struct Attachment {
    cb: KBox<Opaque<b::rsiw_sk_cb>>,
    release: unsafe fn(*mut c_void),
}

/// A borrowed socket, as socket events see it.
#[derive(Clone, Copy)]
pub(crate) struct SockRef<'a> {
    sock: NonNull<b::socket>,
    _p: PhantomData<&'a Socket>,
}

impl Socket {
    /// Wraps `sock`, a valid TCP socket this `Socket` is to own and release; not locked.
    fn new(sock: NonNull<b::socket>) -> Self {
        Self {
            sock,
            attach: None,
            owned: false,
        }
    }

    /// Takes the socket lock (`lock_sock()`) until [`Socket::disown`] (or the socket's
    /// shutdown or release): the sends in between do not take and release it once each,
    /// and segments and ACKs that arrive meanwhile wait in the socket's backlog, which
    /// TCP processes in one pass when the lock is released (running the socket events in
    /// the releasing context). Owning it again is a no-op. Process context, may sleep;
    /// the caller calls nothing else that locks the socket (`bind`, `connect`, the
    /// addresses, `set_tos`, [`SockOps::read`] with [`SockLock::Take`]) in between.
    pub(crate) fn own(&mut self) {
        if !core::mem::replace(&mut self.owned, true) {
            // SAFETY: `self.sock` is valid (invariant); process context (documented).
            unsafe { b::rsiw_sk_lock(self.sock.as_ptr()) };
        }
    }

    /// Releases the socket lock taken by [`Socket::own`] (`release_sock()`, which
    /// processes the backlog; may sleep); a no-op if not owned.
    pub(crate) fn disown(&mut self) {
        if core::mem::replace(&mut self.owned, false) {
            // SAFETY: `self.sock` is valid and this `Socket` holds its lock (invariant).
            unsafe { b::rsiw_sk_unlock(self.sock.as_ptr()) };
        }
    }

    /// Whether this `Socket` holds the socket lock ([`Socket::own`]).
    fn locked(&self) -> bool {
        self.owned
    }

    /// Creates a TCP socket of `family` (`AF_INET`/`AF_INET6`) in the network namespace
    /// `net` (the rsiw device's netdev namespace). The socket, and every connection a
    /// listener accepts from it, holds a reference to `net` until it is released, so a
    /// namespace deleted while rsiw still has sockets in it is freed only after them.
    ///
    /// # Errors
    ///
    /// What `sock_create_kern()` returns (`EAFNOSUPPORT`, `ENOMEM`, ...).
    pub(crate) fn tcp(net: *mut b::net, family: u16) -> Result<Self> {
        let mut sock: *mut b::socket = core::ptr::null_mut();
        // SAFETY: `net` is a live namespace (the caller holds its netdev); `sock` is a
        // valid out pointer.
        to_result(unsafe {
            b::sock_create_kern(
                net,
                i32::from(family),
                b::sock_type_SOCK_STREAM as i32,
                b::IPPROTO_TCP as i32,
                &mut sock,
            )
        })?;
        let sock = NonNull::new(sock).ok_or(ENOMEM)?;
        // SAFETY: just created, not yet used; `sock` is valid.
        unsafe { b::rsiw_sk_hold_net(sock.as_ptr()) };
        // INVARIANT: just created, TCP, not locked.
        Ok(Self::new(sock))
    }

    /// Binds to `addr` (port 0: an ephemeral port).
    ///
    /// # Errors
    ///
    /// `EAFNOSUPPORT` for a non-IP family, else what `kernel_bind()` returns
    /// (`EADDRINUSE`, `EADDRNOTAVAIL`, ...).
    pub(crate) fn bind(&self, addr: &SockAddr) -> Result {
        let len = addr.len()?;
        // SO_REUSEADDR before binding: a listener must reuse a port whose earlier
        // connections linger in TIME_WAIT (iw_cm consumers listen again on one port).
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::rsiw_sk_tune(self.sock.as_ptr(), true) };
        // SAFETY: `self.sock` is valid (invariant); `addr` points to `len` valid octets.
        to_result(unsafe { b::kernel_bind(self.sock.as_ptr(), addr.as_ptr().cast(), len) })
    }

    /// Restricts the socket to the netdev `ifindex` (`SO_BINDTODEVICE`).
    pub(crate) fn bind_to_netdev(&self, ifindex: i32) {
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::rsiw_sk_bind_dev(self.sock.as_ptr(), ifindex) };
    }

    /// Sets `IPV6_V6ONLY` (ignored for IPv4 sockets).
    pub(crate) fn set_v6only(&self, on: bool) {
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::rsiw_sk_set_v6only(self.sock.as_ptr(), on) };
    }

    /// Sets the type of service of what the socket sends: `IP_TOS` to `tos`, and
    /// `IPV6_TCLASS` on an IPv6 socket. An accepted socket inherits its listener's.
    ///
    /// # Errors
    ///
    /// What `setsockopt(IPV6_TCLASS)` returns.
    pub(crate) fn set_tos(&self, tos: u8) -> Result {
        // SAFETY: `self.sock` is valid (invariant); process context (sleepable callers).
        to_result(unsafe { b::rsiw_sk_set_tos(self.sock.as_ptr(), tos) })
    }

    /// Starts listening with a backlog of `backlog` connections (after [`Self::bind`]).
    ///
    /// # Errors
    ///
    /// What `kernel_listen()` returns.
    pub(crate) fn listen(&self, backlog: i32) -> Result {
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::rsiw_sk_tune(self.sock.as_ptr(), true) };
        // SAFETY: `self.sock` is valid (invariant).
        to_result(unsafe { b::kernel_listen(self.sock.as_ptr(), backlog) })
    }

    /// Takes the next connection from the accept queue without waiting: `Ok(None)` when the
    /// queue is empty.
    ///
    /// # Errors
    ///
    /// What `kernel_accept()` returns other than `EAGAIN`.
    pub(crate) fn accept(&self) -> Result<Option<Socket>> {
        let mut new: *mut b::socket = core::ptr::null_mut();
        // SAFETY: `self.sock` is valid (invariant); `new` is a valid out pointer.
        let ret = unsafe { b::kernel_accept(self.sock.as_ptr(), &mut new, b::O_NONBLOCK as i32) };
        if ret == -(b::EAGAIN as i32) {
            return Ok(None);
        }
        to_result(ret)?;
        let sock = NonNull::new(new).ok_or(ENOMEM)?;
        // SAFETY: `sock` is the accepted, valid TCP socket.
        unsafe { b::rsiw_sk_tune(sock.as_ptr(), false) };
        // INVARIANT: accepted from a TCP listener, not locked.
        Ok(Some(Self::new(sock)))
    }

    /// Connects to `addr`, waiting until TCP is established or failed (may sleep for the
    /// TCP connect timeout).
    ///
    /// # Errors
    ///
    /// What `kernel_connect()` returns (`ECONNREFUSED`, `ETIMEDOUT`, `ENETUNREACH`, ...).
    pub(crate) fn connect(&self, addr: &SockAddr) -> Result {
        let len = addr.len()?;
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::rsiw_sk_tune(self.sock.as_ptr(), false) };
        // SAFETY: `self.sock` is valid; `addr` points to `len` valid octets.
        to_result(unsafe { b::kernel_connect(self.sock.as_ptr(), addr.as_ptr().cast(), len, 0) })
    }

    /// The local address (after bind, connect or accept).
    ///
    /// # Errors
    ///
    /// What `kernel_getsockname()` returns.
    pub(crate) fn local_addr(&self) -> Result<SockAddr> {
        let mut ss = b::__kernel_sockaddr_storage::zeroed();
        // SAFETY: `self.sock` is valid; `ss` is a whole `sockaddr_storage`, room for any
        // address the socket's family writes.
        let ret = unsafe {
            b::kernel_getsockname(self.sock.as_ptr(), core::ptr::from_mut(&mut ss).cast())
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(SockAddr::from_storage(&ss))
    }

    /// The peer's address (connected sockets).
    ///
    /// # Errors
    ///
    /// What `kernel_getpeername()` returns (`ENOTCONN`).
    pub(crate) fn peer_addr(&self) -> Result<SockAddr> {
        let mut ss = b::__kernel_sockaddr_storage::zeroed();
        // SAFETY: `self.sock` is valid; `ss` is a whole `sockaddr_storage`, room for any
        // address the socket's family writes.
        let ret = unsafe {
            b::kernel_getpeername(self.sock.as_ptr(), core::ptr::from_mut(&mut ss).cast())
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(SockAddr::from_storage(&ss))
    }

    /// Attaches `obj` so that it receives this socket's events; a previous attachment is
    /// replaced. `inherit`: the listener this socket was accepted from, if it was (its
    /// callbacks were copied to this socket and its saved originals apply).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn attach<T: SockEvents>(
        &mut self,
        obj: Arc<T>,
        inherit: Option<&Socket>,
    ) -> Result {
        self.detach();
        let cb = KBox::new(Opaque::<b::rsiw_sk_cb>::uninit(), GFP_KERNEL)?;
        // SAFETY: `cb` is valid for writes; all-zeroes is a valid `rsiw_sk_cb`, then the
        // two fields the shim reads before attach are set.
        unsafe {
            cb.get().write(Pod::zeroed());
            (*cb.get()).ctx = obj.into_foreign();
            (*cb.get()).event = Some(event_c::<T>);
        }
        let parent = inherit
            .and_then(|p| p.attach.as_ref())
            .map_or(core::ptr::null(), |a| a.cb.get().cast_const());
        // SAFETY: `self.sock` is valid; `cb` is initialised and stays valid and unmoved
        // (boxed) until `detach()`; `parent` is null or a live attachment.
        unsafe { b::rsiw_sk_attach(self.sock.as_ptr(), cb.get(), parent) };
        // INVARIANT: attached with one reference of `obj`.
        self.attach = Some(Attachment {
            cb,
            release: release_c::<T>,
        });
        Ok(())
    }

    /// Detaches the attached object (if any) and drops the attachment's reference. On
    /// return no event callback runs or will start.
    pub(crate) fn detach(&mut self) {
        if let Some(a) = self.attach.take() {
            // SAFETY: `self.sock` is valid and `a.cb` is its current attachment.
            unsafe { b::rsiw_sk_detach(self.sock.as_ptr()) };
            // SAFETY: detached, so nothing uses `ctx` any more; it holds the reference
            // `attach()` took (type invariant).
            unsafe { (a.release)((*a.cb.get()).ctx) };
        }
    }

    /// Queues the concatenation of `bufs` without waiting; returns how many octets TCP took
    /// (fewer than asked when the send buffer filled). `more`: more data follows at once.
    ///
    /// # Errors
    ///
    /// `EAGAIN` when nothing could be queued, `EPIPE`/`ECONNRESET` after close, `EINVAL`
    /// for more than 8 buffers.
    pub(crate) fn send(&mut self, bufs: &[&[u8]], more: bool) -> Result<usize> {
        let mut vec = [b::kvec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; 8];
        if bufs.len() > vec.len() {
            return Err(EINVAL);
        }
        let mut total = 0usize;
        for (v, buf) in vec.iter_mut().zip(bufs) {
            v.iov_base = buf.as_ptr().cast_mut().cast();
            v.iov_len = buf.len();
            total += buf.len();
        }
        // SAFETY: valid socket, owned if `self.locked()`; the kvecs are live buffers TCP copies.
        let ret = unsafe {
            b::rsiw_send_kvec(
                self.sock.as_ptr(),
                vec.as_mut_ptr(),
                bufs.len(),
                total,
                more,
                self.locked(),
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(ret as usize)
    }

    /// Queues the `len` octets that `vecs` describe without waiting (for
    /// [`crate::sys::mem::kmem::IoList`]); returns how many octets TCP took.
    ///
    /// # Errors
    ///
    /// As [`Self::send`].
    pub(in crate::sys) fn send_kvecs(
        &mut self,
        vecs: &mut [b::kvec],
        len: usize,
        more: bool,
    ) -> Result<usize> {
        let ret =
            // SAFETY: valid socket, owned if `self.locked()`; readable kvecs (`IoList`).
            unsafe {
                b::rsiw_send_kvec(
                    self.sock.as_ptr(),
                    vecs.as_mut_ptr(),
                    vecs.len(),
                    len,
                    more,
                    self.locked(),
                )
            };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(ret as usize)
    }

    /// Queues the octets of `ranges` from octet `skip` on, in order, without waiting,
    /// handing TCP the pages themselves where it may take a reference to them
    /// (`MSG_SPLICE_PAGES`; slab memory is copied); returns how many octets TCP took. The
    /// pages of consecutive ranges go to TCP in one `sendmsg` call (up to 32 pages),
    /// contiguous or not: TCP sizes its packets by
    /// what one call queues, and a call per range of a physically scattered buffer (one
    /// page each) made it send a packet or two per page. At most [`SEND_RANGES`] ranges
    /// are offered per call (fewer octets are taken then). TCP reads a spliced page again
    /// whenever it (re)transmits it, so changes to the memory before the peer
    /// acknowledged it reach the wire: callers hand it only memory of their own that they
    /// do not change while TCP holds it (`crate::sys::mem::copy_pages`), never a
    /// consumer's, which may be reused or freed once its WR completed. `more`: more data
    /// follows at once.
    ///
    /// # Errors
    ///
    /// As [`Self::send`]; `EFAULT` for memory without a `struct page`, `EINVAL` for a
    /// range longer than the address space.
    pub(crate) fn send_kvas<'a>(
        &mut self,
        ranges: impl IntoIterator<Item = &'a crate::sys::mem::kmem::Kva>,
        skip: usize,
        more: bool,
    ) -> Result<usize> {
        let mut vec = [b::kvec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; SEND_RANGES];
        let mut n = 0;
        let mut total = 0usize;
        let mut skip = u64::try_from(skip).map_err(|_| EINVAL)?;
        let mut rest = false;
        for k in ranges {
            if skip >= k.len() {
                skip -= k.len();
                continue;
            }
            let Some(v) = vec.get_mut(n) else {
                rest = true;
                break;
            };
            let k = k.skip(skip);
            skip = 0;
            v.iov_base = k.addr() as usize as *mut c_void;
            v.iov_len = usize::try_from(k.len()).map_err(|_| EINVAL)?;
            total = total.checked_add(v.iov_len).ok_or(EINVAL)?;
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: valid socket, owned if `self.locked()`; each kvec is mapped memory (`Kva`).
        let ret = unsafe {
            b::rsiw_send_kvas(
                self.sock.as_ptr(),
                vec.as_ptr(),
                n,
                total,
                more || rest,
                self.locked(),
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(ret as usize)
    }

    /// Shuts down both directions (sends FIN; wakes the peer). The socket stays allocated;
    /// its lock, if owned, is released first.
    pub(crate) fn shutdown(&mut self) {
        self.disown();
        // SAFETY: `self.sock` is valid (invariant).
        unsafe { b::kernel_sock_shutdown(self.sock.as_ptr(), b::sock_shutdown_cmd_SHUT_RDWR) };
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.disown();
        self.detach();
        // SAFETY: `self.sock` is valid and released exactly once, here (invariant).
        unsafe { b::sock_release(self.sock.as_ptr()) };
    }
}

impl core::ops::Deref for Socket {
    type Target = SockOps;

    fn deref(&self) -> &SockOps {
        // SAFETY: `SockOps` is a transparent wrapper of the pointer, and `self.sock` is
        // valid for the lifetime of `&self`.
        unsafe { &*core::ptr::from_ref(&self.sock).cast::<SockOps>() }
    }
}

impl core::ops::Deref for SockRef<'_> {
    type Target = SockOps;

    fn deref(&self) -> &SockOps {
        // SAFETY: as for `Socket`; a `SockRef` is only made while the socket is valid.
        unsafe { &*core::ptr::from_ref(&self.sock).cast::<SockOps>() }
    }
}

/// The operations available on an owned or borrowed socket.
///
/// # Invariants
///
/// `0` is a valid TCP socket for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct SockOps(NonNull<b::socket>);

impl SockOps {
    /// The TCP state (see [`tcp_state`]).
    pub(crate) fn state(&self) -> i32 {
        // SAFETY: valid socket (invariant).
        unsafe { b::rsiw_sk_state(self.0.as_ptr()) }
    }

    /// Whether the receive queue holds data (or a FIN) not read yet; a buffer the
    /// socket's backlog still holds is not counted (the receive path queues it and calls
    /// the data-ready callback).
    pub(crate) fn rx_queued(&self) -> bool {
        // SAFETY: valid socket (invariant).
        unsafe { b::rsiw_sk_rx_queued(self.0.as_ptr()) }
    }

    /// The current TCP MSS (octets of TCP payload per segment).
    pub(crate) fn mss(&self) -> u32 {
        // SAFETY: valid socket (invariant).
        unsafe { b::rsiw_tcp_mss(self.0.as_ptr()) }
    }

    /// Reads the receive queue through `tcp_read_sock()`: `actor` gets each chunk of data
    /// in stream order and returns how many octets of it it consumed; reading stops at the
    /// first chunk not consumed entirely (the rest stays queued). With [`SockLock::Held`]
    /// the caller is the socket's receive path ([`SockEvents::event`] for `DataReady`) or
    /// owns the socket lock; with [`SockLock::Take`] the socket is locked for the read (may
    /// sleep). Returns the octets consumed.
    ///
    /// # Errors
    ///
    /// `ENOTCONN` on a socket that is not connected.
    pub(crate) fn read<F: FnMut(&SkbChunk<'_>) -> usize>(
        &self,
        lock: SockLock,
        mut actor: F,
    ) -> Result<usize> {
        let locked = lock == SockLock::Held;
        let ctx: *mut F = &mut actor;
        // SAFETY: valid socket; `read_actor_c::<F>` receives `ctx`, a live `F`, only during
        // this call.
        let ret = unsafe {
            b::rsiw_tcp_read(self.0.as_ptr(), Some(read_actor_c::<F>), ctx.cast(), locked)
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(ret as usize)
    }
}

/// Part of a received socket buffer: `len` octets from `offset` of `skb`.
///
/// # Invariants
///
/// `skb` is valid and holds `offset + len` octets for the lifetime `'a`.
pub(crate) struct SkbChunk<'a> {
    skb: *const b::sk_buff,
    offset: u32,
    len: usize,
    _p: PhantomData<&'a b::sk_buff>,
}

impl SkbChunk<'_> {
    /// The octets in the chunk.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `dst.len()` octets starting `at` octets into the chunk to `dst`.
    ///
    /// # Errors
    ///
    /// `EFAULT` if the range leaves the chunk.
    pub(crate) fn copy_to(&self, at: usize, dst: &mut [u8]) -> Result {
        let off = self.range(at, dst.len())?;
        // SAFETY: `skb` holds the range (invariant and the check above); `dst` is valid for
        // `dst.len()` octets of writes.
        to_result(unsafe {
            b::rsiw_skb_copy_bits(self.skb, off, dst.as_mut_ptr().cast(), dst.len())
        })
    }

    /// Copies `dst.len()` octets starting `at` octets into the chunk to the registered
    /// memory `dst` (payload placement, RFC 5041 §3: straight from the socket buffer).
    ///
    /// # Errors
    ///
    /// `EFAULT` if the range leaves the chunk.
    pub(crate) fn copy_to_kva(&self, at: usize, dst: &crate::sys::mem::kmem::Kva) -> Result {
        let len = usize::try_from(dst.len()).map_err(|_| EFAULT)?;
        let off = self.range(at, len)?;
        // SAFETY: `skb` holds the range (invariant and the check above); `dst` is mapped
        // kernel memory valid for writes (`Kva` invariant).
        to_result(unsafe {
            b::rsiw_skb_copy_bits(self.skb, off, dst.addr() as usize as *mut c_void, len)
        })
    }

    /// Folds the `len` octets starting `at` octets into the chunk into the running
    /// CRC32c value `crc` (RFC 5044 §4.4), read from the socket buffer itself: what was
    /// received, whatever happens to a copy of it.
    ///
    /// # Errors
    ///
    /// `EFAULT` if the range leaves the chunk.
    pub(crate) fn crc32c(&self, at: usize, len: usize, crc: u32) -> Result<u32> {
        let off = self.range(at, len)?;
        // SAFETY: `skb` holds the range (invariant and the check above); it is only read.
        Ok(unsafe { b::rsiw_skb_crc32c(self.skb, off, len, crc) })
    }

    fn range(&self, at: usize, len: usize) -> Result<u32> {
        match at.checked_add(len) {
            Some(end) if end <= self.len => u32::try_from(at)
                .ok()
                .and_then(|a| self.offset.checked_add(a))
                .ok_or(EFAULT),
            _ => Err(EFAULT),
        }
    }
}

/// The `tcp_read_sock()` actor of [`SockOps::read`].
///
/// # Safety
///
/// `ctx` is the `F` of the running `read()`; `skb` holds `offset + len` octets.
unsafe extern "C" fn read_actor_c<F: FnMut(&SkbChunk<'_>) -> usize>(
    ctx: *mut c_void,
    skb: *const b::sk_buff,
    offset: u32,
    len: usize,
) -> usize {
    // SAFETY: `ctx` is the `F` `SockOps::read` passed, alive for the whole read.
    let f = unsafe { &mut *ctx.cast::<F>() };
    // INVARIANT: `tcp_read_sock()` offers `len` octets of `skb` from `offset`.
    let chunk = SkbChunk {
        skb,
        offset,
        len,
        _p: PhantomData,
    };
    f(&chunk).min(len)
}

/// The event function of an attachment of `T`.
///
/// # Safety
///
/// `ctx` is the attachment's reference of `T`, and the shim holds `sk_callback_lock`.
unsafe extern "C" fn event_c<T: SockEvents>(
    ctx: *mut c_void,
    sock: *mut b::socket,
    ev: b::rsiw_sk_event,
) {
    let ev = match ev {
        b::rsiw_sk_event_RSIW_SK_DATA_READY => SockEvent::DataReady,
        b::rsiw_sk_event_RSIW_SK_WRITE_SPACE => SockEvent::WriteSpace,
        _ => SockEvent::StateChange,
    };
    let Some(sock) = NonNull::new(sock) else {
        return;
    };
    // SAFETY: `ctx` is from `Arc::into_foreign` in `attach()`, released only after
    // `rsiw_sk_detach()`, which waits for this callback (shim holds `sk_callback_lock`).
    let obj = unsafe { <Arc<T> as ForeignOwnable>::borrow(ctx) };
    // The socket is valid while its callback runs; `sock` is `sk->sk_socket` of an
    // attached socket.
    T::event(
        obj,
        SockRef {
            sock,
            _p: PhantomData,
        },
        ev,
    );
}

/// Gives back the reference of `T` an attachment held.
///
/// # Safety
///
/// `ctx` came from `Arc::<T>::into_foreign` and is not used afterwards.
unsafe fn release_c<T: SockEvents>(ctx: *mut c_void) {
    // SAFETY: `ctx` holds the reference `attach()` took with `into_foreign` (caller).
    drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(ctx) });
}

// SPDX-License-Identifier: GPL-2.0

//! A connection's copy pages: pages of rsiw's own that outgoing payload is copied into
//! when the consumer's memory must not go to TCP by reference, and that TCP then takes by
//! reference (`MSG_SPLICE_PAGES`).
//!
//! Payload that has to be copied (a signalled WR's, whose buffer the consumer may reuse
//! once it completed, and a Read Response's, whose Data Source may be invalidated once
//! the copy is done) is otherwise copied by TCP into page fragments it allocates, which
//! the kernel zeroes first where `init_on_alloc` is on (Debian's default). Copy pages are
//! used again as soon as TCP dropped its references to them, so a busy connection copies
//! its payload once and zeroes nothing. A page is reused only when the connection's own
//! reference is the only one left (`rsiw_copy_page_idle()`); octets of a page still held
//! by TCP are never written again, only the rest of the page after them.

use super::kmem::Kva;
use crate::sys::bindings as b;
use core::ptr::NonNull;
use kernel::ffi::c_void;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// The pages of one connection, used in turn as a ring.
///
/// # Invariants
///
/// Every entry of `pages` is an order-0 page of the linear map of which this object holds
/// one reference (`rsiw_copy_page_alloc()`), dropped when the entry goes. If `pages` is not
/// empty, `cur < pages.len()` and `off <= PAGE_SIZE`: octets `off..PAGE_SIZE` of
/// `pages[cur]` and all octets of the `ready` pages after it in ring order (`ready <
/// pages.len()`) were not handed to anyone since their page was last found idle or
/// allocated, so nothing else reads them.
pub(crate) struct CopyPages {
    pages: KVec<NonNull<b::page>>,
    cur: usize,
    off: usize,
    ready: usize,
    max: usize,
}

// SAFETY: the page references may be dropped and the pages written from any thread; the
// object is used by one owner at a time (`&mut self`).
unsafe impl Send for CopyPages {}
// SAFETY: no method takes `&self`.
unsafe impl Sync for CopyPages {}

impl CopyPages {
    /// No pages yet; at most `max` pages at a time (`max * PAGE_SIZE` octets in flight).
    pub(crate) const fn new(max: usize) -> Self {
        // INVARIANT: no pages.
        Self {
            pages: KVec::new(),
            cur: 0,
            off: 0,
            ready: 0,
            max,
        }
    }

    /// Octets that [`Self::copy`] may write without a further [`Self::reserve`].
    fn room(&self) -> usize {
        if self.pages.is_empty() {
            return 0;
        }
        PAGE_SIZE - self.off + self.ready * PAGE_SIZE
    }

    /// Makes room for `len` octets: the pages after the current one that TCP has let go
    /// of, and new pages up to the limit. Returns `Ok(false)` when the limit leaves too
    /// little room (the pages held are still in TCP's buffers); what was made ready stays.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn reserve(&mut self, len: usize) -> Result<bool> {
        while self.room() < len {
            let n = self.pages.len();
            if n > 0 && self.ready + 1 < n {
                let i = (self.cur + 1 + self.ready) % n;
                // SAFETY: a page this object holds a reference of (invariant).
                if unsafe { b::rsiw_copy_page_idle(self.pages[i].as_ptr()) } {
                    // INVARIANT: nothing but this object holds the page.
                    self.ready += 1;
                    continue;
                }
            }
            if n >= self.max {
                return Ok(false);
            }
            self.pages.reserve(1, GFP_KERNEL)?;
            // SAFETY: no preconditions.
            let page = NonNull::new(unsafe { b::rsiw_copy_page_alloc() }).ok_or(ENOMEM)?;
            if n == 0 {
                // INVARIANT: the first page, empty.
                self.pages.push(page, GFP_KERNEL)?;
                self.cur = 0;
                self.off = 0;
                continue;
            }
            // The new page goes right after the ready ones, in ring order.
            let at = self.cur + 1 + self.ready;
            let at = if at <= n {
                at
            } else {
                // Wrapped: it lands before the current page, which moves up by one.
                self.cur += 1;
                at - n
            };
            // Room was reserved above: no allocation.
            self.pages
                .insert_within_capacity(at, page)
                .map_err(|_| ENOMEM)?;
            // INVARIANT: a new page, held by nothing else.
            self.ready += 1;
        }
        Ok(true)
    }

    /// Copies the octets of `src` into the room [`Self::reserve`] made and gives each
    /// piece of a page it filled to `piece`, in order: a range TCP may take by reference.
    /// The pieces are valid while this object holds their pages (until it is dropped or
    /// [`Self::release`]d), and their octets are not written again until TCP dropped its
    /// references to their page. Allocates nothing.
    ///
    /// # Errors
    ///
    /// `ENOSPC` if `src` is longer than the room made; nothing is copied then.
    pub(crate) fn copy(&mut self, src: &Kva, mut piece: impl FnMut(Kva)) -> Result {
        let mut left = usize::try_from(src.len()).map_err(|_| EINVAL)?;
        if left > self.room() {
            return Err(ENOSPC);
        }
        let mut from = src.addr() as usize as *const c_void;
        while left > 0 {
            if self.off == PAGE_SIZE {
                // `room()` counted the ready pages: one follows.
                self.cur = (self.cur + 1) % self.pages.len();
                self.off = 0;
                self.ready -= 1;
            }
            let n = left.min(PAGE_SIZE - self.off);
            // SAFETY: a page this object holds, in the linear map (invariant).
            let base = unsafe { b::rsiw_copy_page_address(self.pages[self.cur].as_ptr()) };
            let dst = base.cast::<u8>().wrapping_add(self.off).cast::<c_void>();
            // SAFETY: `dst`: `n` octets after `off` that nothing else reads (invariant);
            // `from`: `left` mapped octets of `src` (`Kva`), not in this object's pages.
            unsafe { b::rsiw_copy_kva(dst, from, n) };
            // SAFETY: mapped while this object holds the page, as the caller is told.
            let copied = unsafe { Kva::new(dst as usize as u64, n as u64) };
            piece(copied);
            // INVARIANT: the octets handed out end at the new `off`.
            self.off += n;
            from = from.wrapping_byte_add(n);
            left -= n;
        }
        Ok(())
    }

    /// Drops this object's references to all its pages: a page TCP still holds is freed
    /// when TCP lets go of it. Used when the connection has nothing more to send for now,
    /// so that an idle connection holds no pages.
    pub(crate) fn release(&mut self) {
        if self.pages.capacity() == 0 {
            // No page since `new` or the last release, so `cur`, `off` and `ready` are
            // still 0. Returning here spares each message that used no copy pages the
            // freeing of an empty list's storage (`krealloc` to size 0 and `kfree(NULL)`).
            return;
        }
        // The list's storage goes too: an idle connection keeps nothing of it.
        for p in core::mem::take(&mut self.pages) {
            // SAFETY: the reference this object held (invariant), dropped once.
            unsafe { b::rsiw_copy_page_put(p.as_ptr()) };
        }
        // INVARIANT: no pages.
        self.cur = 0;
        self.off = 0;
        self.ready = 0;
    }
}

impl Drop for CopyPages {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(CONFIG_KUNIT = "y")]
#[kernel::prelude::kunit_tests(rsiw_copy_pages)]
mod tests {
    use super::{CopyPages, Kva, PAGE_SIZE};
    use crate::sys::bindings as b;
    use kernel::prelude::*;

    /// `n` octets that differ along the buffer and between `tag`s.
    fn pattern(tag: u8, n: usize) -> KVec<u8> {
        let mut v = KVec::with_capacity(n, GFP_KERNEL).expect("ENOMEM");
        for i in 0..n {
            v.push((i % 251) as u8 ^ tag, GFP_KERNEL).expect("ENOMEM");
        }
        v
    }

    fn kva_of(data: &[u8]) -> Kva {
        // SAFETY: `data` is mapped kernel memory that outlives the copy it is used for.
        unsafe { Kva::new(data.as_ptr() as usize as u64, data.len() as u64) }
    }

    /// The octets of `pieces`, in order.
    fn read(pieces: &[Kva]) -> KVec<u8> {
        let mut v = KVec::new();
        for k in pieces {
            // SAFETY: a piece of a page the pool under test still holds.
            let s = unsafe {
                core::slice::from_raw_parts(k.addr() as usize as *const u8, k.len() as usize)
            };
            v.extend_from_slice(s, GFP_KERNEL).expect("ENOMEM");
        }
        v
    }

    /// Copies `data` into `p` (room made first); returns the pieces.
    fn copy(p: &mut CopyPages, data: &[u8]) -> KVec<Kva> {
        assert_eq!(p.reserve(data.len()), Ok(true));
        let mut pieces = KVec::new();
        p.copy(&kva_of(data), |k| {
            pieces.push(k, GFP_KERNEL).expect("ENOMEM")
        })
        .expect("room was made");
        pieces
    }

    /// Takes a reference to every page of `p`, as TCP does to the pages it is given.
    fn hold_all(p: &CopyPages) -> KVec<core::ptr::NonNull<b::page>> {
        let mut held = KVec::new();
        for page in p.pages.iter() {
            // SAFETY: a page the pool holds a reference of.
            unsafe { b::rsiw_copy_page_get(page.as_ptr()) };
            held.push(*page, GFP_KERNEL).expect("ENOMEM");
        }
        held
    }

    fn put_all(held: KVec<core::ptr::NonNull<b::page>>) {
        for page in held {
            // SAFETY: the reference `hold_all` took.
            unsafe { b::rsiw_copy_page_put(page.as_ptr()) };
        }
    }

    #[test]
    fn copies_what_it_was_given() {
        let mut p = CopyPages::new(8);
        let a = pattern(1, 3 * PAGE_SIZE + 100);
        let pieces = copy(&mut p, &a);
        assert_eq!(&read(&pieces)[..], &a[..]);
        assert!(pieces.iter().all(|k| k.len() as usize <= PAGE_SIZE));
        // More than the room made is refused and copies nothing.
        let room = p.room();
        let big = pattern(2, room + 1);
        assert_eq!(p.copy(&kva_of(&big), |_| ()), Err(ENOSPC));
        assert_eq!(p.room(), room);
    }

    #[test]
    fn never_writes_a_page_tcp_holds() {
        let mut p = CopyPages::new(4);
        let a = pattern(3, 2 * PAGE_SIZE + 10);
        let first = copy(&mut p, &a);
        let held = hold_all(&p);
        let n = p.pages.len();
        // The rest of the current page, then pages it has to add: the held ones are not
        // taken again.
        let b2 = pattern(4, PAGE_SIZE);
        let second = copy(&mut p, &b2);
        assert_eq!(&read(&first)[..], &a[..]);
        assert_eq!(&read(&second)[..], &b2[..]);
        assert!(p.pages.len() > n);
        // At the limit with every other page held: no room, and nothing is written.
        let held2 = hold_all(&p);
        let c = pattern(5, 2 * PAGE_SIZE);
        assert_eq!(p.reserve(c.len()), Ok(false));
        assert_eq!(p.pages.len(), 4);
        assert_eq!(&read(&first)[..], &a[..]);
        assert_eq!(&read(&second)[..], &b2[..]);
        // TCP lets go: the same pages are used again, no more are added.
        put_all(held);
        put_all(held2);
        let third = copy(&mut p, &c);
        assert_eq!(p.pages.len(), 4);
        assert_eq!(&read(&third)[..], &c[..]);
    }

    #[test]
    fn release_without_pages_keeps_the_object_usable() {
        let mut p = CopyPages::new(4);
        p.release();
        p.release();
        assert_eq!(p.pages.capacity(), 0);
        assert_eq!(p.room(), 0);
        let a = pattern(8, PAGE_SIZE + 10);
        assert_eq!(&read(&copy(&mut p, &a))[..], &a[..]);
        p.release();
        assert_eq!(p.pages.capacity(), 0);
        assert_eq!(p.room(), 0);
    }

    #[test]
    fn release_leaves_held_pages_to_their_holder() {
        let mut p = CopyPages::new(4);
        let a = pattern(6, PAGE_SIZE / 2);
        let pieces = copy(&mut p, &a);
        let held = hold_all(&p);
        p.release();
        assert_eq!(p.pages.len(), 0);
        assert_eq!(p.room(), 0);
        // The holder's reference keeps the page and its octets.
        assert_eq!(&read(&pieces)[..], &a[..]);
        put_all(held);
        let b2 = pattern(7, 10);
        assert_eq!(&read(&copy(&mut p, &b2))[..], &b2[..]);
    }
}

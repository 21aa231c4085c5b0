// SPDX-License-Identifier: GPL-2.0

//! The user data of a verb (`struct ib_udata`): reading the provider-specific request and
//! writing the response of the siw user ABI (`include/uapi/rdma/siw-abi.h`).

use super::bindings;
use core::mem::{size_of, MaybeUninit};
use kernel::prelude::*;

/// The response buffer of a user verb (`struct ib_udata`'s output side).
///
/// # Invariants
///
/// `udata` is null (kernel caller) or the valid `ib_udata` of the verb being executed.
pub(crate) struct UserResponse<'a> {
    udata: *mut bindings::ib_udata,
    _p: core::marker::PhantomData<&'a mut bindings::ib_udata>,
}

impl UserResponse<'_> {
    /// Wraps the user data `udata` of a verb (null for a kernel caller).
    ///
    /// # Safety
    ///
    /// `udata` is the valid `ib_udata` of the running verb, live for the returned lifetime.
    pub(super) unsafe fn from_raw(udata: *mut bindings::ib_udata) -> Self {
        // INVARIANT: guaranteed by the caller.
        Self {
            udata,
            _p: core::marker::PhantomData,
        }
    }

    /// Returns the user context of the verb (null-checked), not for `alloc_ucontext`.
    pub(super) fn ucontext(&self) -> Option<*mut bindings::ib_ucontext> {
        if self.udata.is_null() {
            return None;
        }
        // SAFETY: `udata` is the valid udata of a uverbs call (type invariant), embedded in
        // its attribute bundle.
        let uctx = unsafe { bindings::rsiw_udata_ucontext(self.udata) };
        (!uctx.is_null()).then_some(uctx)
    }

    /// Reads the request struct `R` (from `siw-abi.h`) of a user verb.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the user's input is shorter than `R`; `EFAULT` if the copy faults.
    pub(crate) fn read<R: UserAbi + Copy>(&self) -> Result<R> {
        if self.udata.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: `udata` is valid (type invariant).
        if unsafe { bindings::rsiw_udata_inlen(self.udata) } < size_of::<R>() {
            return Err(EINVAL);
        }
        let mut r = MaybeUninit::<R>::zeroed();
        // SAFETY: `r` has room for `size_of::<R>()` octets; any octets form a valid `R`
        // (`UserAbi`: plain integers).
        super::to_result(unsafe {
            bindings::rsiw_copy_from_udata(r.as_mut_ptr().cast(), self.udata, size_of::<R>())
        })?;
        // SAFETY: fully written by the copy (or zeroed), and every bit pattern is valid.
        Ok(unsafe { r.assume_init() })
    }

    /// Copies `resp` (a plain C response struct from `siw-abi.h`) to user space.
    ///
    /// # Errors
    ///
    /// `EINVAL` if there is no user buffer or it is shorter than `R`; `EFAULT` if the copy
    /// faults.
    pub(crate) fn write<R: UserAbi>(&mut self, resp: &R) -> Result {
        if self.udata.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: `udata` is valid (type invariant).
        let outlen = unsafe { bindings::rsiw_udata_outlen(self.udata) };
        if outlen < size_of::<R>() {
            return Err(EINVAL);
        }
        // SAFETY: `udata` is valid; `resp` is `size_of::<R>()` readable octets without
        // padding holes (`UserAbi`).
        super::to_result(unsafe {
            bindings::rsiw_copy_to_udata(
                self.udata,
                core::ptr::from_ref(resp).cast(),
                size_of::<R>(),
            )
        })
    }
}

/// Returns the optional user data of a verb: `None` for a kernel caller.
///
/// # Safety
///
/// `udata` is null or the valid `ib_udata` of the running verb, which outlives `'a`.
pub(super) unsafe fn user<'a>(udata: *mut bindings::ib_udata) -> Option<UserResponse<'a>> {
    // SAFETY: guaranteed by the caller.
    (!udata.is_null()).then(|| unsafe { UserResponse::from_raw(udata) })
}

/// A C struct of the siw user ABI that can be copied to and from user space as is.
///
/// # Safety
///
/// The type is `repr(C)` plain integers with no padding octets (they would leak kernel
/// memory), so every bit pattern is a valid value.
pub(crate) unsafe trait UserAbi {}

// SAFETY: two `__u32` fields, no padding.
unsafe impl UserAbi for bindings::siw_uresp_alloc_ctx {}
// SAFETY: `__u32`, `__u32`, `__aligned_u64`: no padding.
unsafe impl UserAbi for bindings::siw_uresp_create_cq {}
// SAFETY: four `__u32` then two `__aligned_u64`: no padding.
unsafe impl UserAbi for bindings::siw_uresp_create_qp {}
// SAFETY: `__u32`, `__u32`, `__aligned_u64`: no padding.
unsafe impl UserAbi for bindings::siw_uresp_create_srq {}
// SAFETY: two `__u32`: no padding.
unsafe impl UserAbi for bindings::siw_uresp_reg_mr {}
// SAFETY: `__u8`, `__u8[3]`, `__u32`: no padding.
unsafe impl UserAbi for bindings::siw_ureq_reg_mr {}

// SPDX-License-Identifier: GPL-2.0

//! Trampolines of the device-level verbs: device and port queries, user contexts, PDs,
//! port counters and `dealloc_driver`. Each turns the core's raw pointers into typed
//! references, calls one [`DeviceOps`] method and maps the result to an errno.

use super::{errno, DeviceAttr, DeviceOps, IbDevice, PortAttr, Registry};
use crate::sys::bindings;
use crate::sys::mem::umap::CtxMaps;
use crate::sys::obj::{IbUcontext, Owner, UctxData};
use crate::sys::udata::UserResponse;
use core::mem::MaybeUninit;
use kernel::prelude::*;

impl<T: DeviceOps> IbDevice<T> {
    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn query_device_c(
        raw: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core calls device ops only on live devices of this type, with a
        // valid, exclusively borrowed attribute buffer.
        let (dev, attr) = unsafe { (Self::from_raw(raw), &mut *attr) };
        fill_device_attr(attr, &T::query_device(dev));
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn alloc_hw_port_stats_c(
        _raw: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let Ok(n) = kernel::ffi::c_int::try_from(T::HW_STATS.len()) else {
            return core::ptr::null_mut();
        };
        // SAFETY: `HW_STATS` is `'static`, so the descriptors outlive the stats struct the
        // core frees with the port; their names are NUL-terminated (`stat_desc`).
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(
                T::HW_STATS.as_ptr(),
                n,
                bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as kernel::ffi::c_ulong,
            )
        }
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type; `stats` is one that
    /// [`Self::alloc_hw_port_stats_c`] returned, which the core holds locked.
    pub(super) unsafe extern "C" fn get_hw_stats_c(
        raw: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let dev = unsafe { Self::from_raw(raw) };
        // SAFETY: `stats` is valid and exclusively ours for this call (the core holds its
        // lock); it was allocated with `num_counters` values after the header.
        let values = unsafe {
            let n = usize::try_from((*stats).num_counters).unwrap_or(0);
            (*stats).value.as_mut_slice(n)
        };
        let n = values.len().min(T::HW_STATS.len());
        if port != 1 {
            return EINVAL.to_errno();
        }
        T::hw_stats(dev, &mut values[..n]);
        // `n` is at most `num_counters`, a `c_int`.
        n as kernel::ffi::c_int
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn query_port_c(
        raw: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> kernel::ffi::c_int {
        if port != 1 {
            return EINVAL.to_errno();
        }
        // SAFETY: as in `query_device_c`.
        let (dev, attr) = unsafe { (Self::from_raw(raw), &mut *attr) };
        // SAFETY: all-zeroes is a valid `ib_port_attr`.
        *attr = unsafe { MaybeUninit::zeroed().assume_init() };
        let port_attr = match T::query_port(dev) {
            Ok(a) => a,
            Err(e) => return e.to_errno(),
        };
        if let Err(e) = dev.eth_speed(port, &mut attr.active_speed, &mut attr.active_width) {
            return e.to_errno();
        }
        fill_port_attr(attr, &port_attr);
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn query_gid_c(
        raw: *mut bindings::ib_device,
        port: u32,
        index: kernel::ffi::c_int,
        gid: *mut bindings::ib_gid,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `query_device_c`.
        let dev = unsafe { Self::from_raw(raw) };
        if port != 1 {
            return EINVAL.to_errno();
        }
        match T::query_gid(dev, index) {
            Ok(raw_gid) => {
                // SAFETY: `gid` is a valid, exclusively borrowed `union ib_gid` of 16
                // octets; writing its `raw` member is always valid.
                unsafe { (*gid).raw = raw_gid };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn port_immutable_c(
        _raw: *mut bindings::ib_device,
        port: u32,
        imm: *mut bindings::ib_port_immutable,
    ) -> kernel::ffi::c_int {
        if port != 1 {
            return EINVAL.to_errno();
        }
        // SAFETY: the core passes a valid, exclusively borrowed buffer.
        let imm = unsafe { &mut *imm };
        // One GID (the MAC address); the port speaks iWARP.
        imm.gid_tbl_len = 1;
        imm.core_cap_flags = bindings::RDMA_CORE_PORT_IWARP;
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn alloc_ucontext_c(
        uctx: *mut bindings::ib_ucontext,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core passes a ucontext it allocated for a live device of this type.
        let dev = unsafe { Self::from_raw((*uctx).device) };
        // SAFETY: the core passes a new context (no mmap entry yet) that lives until
        // `dealloc_ucontext_c`, or until this call fails, and drops the value before both.
        let maps = match unsafe { CtxMaps::new(uctx) } {
            Ok(m) => m,
            Err(e) => return e.to_errno(),
        };
        // The process opening the context owns its QPs (`IbQp::serves_caller`).
        // Taken before the driver counts the context: nothing to give back on failure.
        let Some(owner) = Owner::current() else {
            return ESRCH.to_errno();
        };
        // SAFETY: the core passes the valid udata of this `alloc_ucontext` call.
        let mut resp = unsafe { UserResponse::from_raw(udata) };
        if let Err(e) = T::alloc_ucontext(dev, &mut resp) {
            return e.to_errno();
        }
        // SAFETY: the core allocated `size_ib_ucontext` octets, an `IbUcontext`, whose
        // data is uninitialised; a value initialises it infallibly.
        let Ok(()) = unsafe { IbUcontext::init_data(uctx, UctxData { _maps: maps, owner }) };
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn dealloc_ucontext_c(uctx: *mut bindings::ib_ucontext) {
        // SAFETY: as in `alloc_ucontext_c`.
        let dev = unsafe { Self::from_raw((*uctx).device) };
        T::dealloc_ucontext(dev);
        // The context's objects are gone and no verb uses it: this removes its last mmap
        // entry, before the core checks that none is left.
        // SAFETY: `alloc_ucontext_c` succeeded (the data is initialised); unused from here.
        unsafe { IbUcontext::drop_data(uctx) };
    }

    /// `disassociate_ucontext`: the device is going away (unregistered, or moved to another
    /// network namespace) while a user context is still open, and the core has destroyed
    /// every object of that context through the ordinary destroy operations.
    ///
    /// Nothing is left to do here. The only memory rsiw maps into user space is its rings
    /// (`mem::umap`), mapped page by page with `remap_vmalloc_range`: each mapped page
    /// holds its own reference, so after the ring's owner is destroyed the process keeps
    /// writable pages that no kernel code reads any more, and they are freed at `munmap`.
    /// Providing the operation is what matters: without it the core keeps the module
    /// pinned while any user context is open, refuses `rdma dev set DEV netns NS`, and
    /// makes unregistration wait for every process to close the device.
    ///
    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`.
    pub(super) unsafe extern "C" fn disassociate_ucontext_c(_uctx: *mut bindings::ib_ucontext) {}

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn alloc_pd_c(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core passes a PD it allocated for a live device of this type.
        let dev = unsafe { Self::from_raw((*pd).device) };
        errno(T::alloc_pd(dev))
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn dealloc_pd_c(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: as in `alloc_pd_c`.
        let dev = unsafe { Self::from_raw((*pd).device) };
        T::dealloc_pd(dev);
        0
    }

    /// # Safety
    ///
    /// Called only by the RDMA core, through `IbDevice::<T>::OPS`, with the pointers the
    /// core passes for this operation on a live device of this type.
    pub(super) unsafe extern "C" fn dealloc_driver_c(raw: *mut bindings::ib_device) {
        // The core calls `dealloc_driver` exactly once, on a device of this type whose
        // data was initialised before the ops were installed (`NewDevice::new`).
        let this = raw.cast::<Self>();
        Registry::remove(raw);
        // SAFETY: the sweep was initialised with this device; after this it neither runs
        // nor is queued (the core destroyed every QP, so nothing queues it again).
        unsafe { bindings::rsiw_delayed_cancel_sync((*this).sweep.get()) };
        // The core destroyed all objects, calls no further operations and frees the memory.
        // SAFETY: `data`, `qps`, `cm_ids` and `sweep_qpns` are initialised and unused now.
        unsafe {
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).data));
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).qps));
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).cm_ids));
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*this).sweep_qpns));
        }
    }
}

/// Fills the core's device attributes from `d` and what every rsiw device reports.
fn fill_device_attr(attr: &mut bindings::ib_device_attr, d: &DeviceAttr) {
    attr.vendor_id = d.vendor_id;
    attr.vendor_part_id = 0;
    attr.sys_image_guid = u64::from_ne_bytes(d.sys_image_guid);
    attr.max_mr_size = u64::MAX;
    attr.page_size_cap = kernel::page::PAGE_SIZE as u64;
    attr.max_pd = d.max_pd;
    attr.max_qp = d.max_qp;
    attr.max_qp_wr = d.max_qp_wr;
    attr.max_send_sge = d.max_sge;
    attr.max_recv_sge = d.max_sge;
    // An iWARP Read Request names one sink (RFC 5040 §4.4).
    attr.max_sge_rd = 1;
    attr.max_cq = d.max_cq;
    attr.max_cqe = d.max_cqe;
    attr.max_mr = d.max_mr;
    attr.max_fast_reg_page_list_len = d.max_fast_reg_pages;
    attr.max_srq = d.max_srq;
    attr.max_srq_wr = d.max_srq_wr;
    attr.max_srq_sge = d.max_sge;
    attr.max_qp_rd_atom = d.max_ird_ord;
    attr.max_qp_init_rd_atom = d.max_ird_ord;
    attr.max_res_rd_atom = d.max_ird_ord.saturating_mul(d.max_qp);
    attr.atomic_cap = bindings::ib_atomic_cap_IB_ATOMIC_NONE;
    // REG_MR and LOCAL_INV work requests on kernel QPs, fast-registration MRs.
    attr.device_cap_flags = bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
    // `rdma link del` may remove rsiw devices.
    attr.kernel_cap_flags = u64::from(bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG);
}

/// Fills the attributes of an iWARP port from `p`: one GID, connection management by
/// iw_cm.
fn fill_port_attr(attr: &mut bindings::ib_port_attr, p: &PortAttr) {
    attr.gid_tbl_len = 1;
    attr.max_msg_sz = p.max_msg_sz;
    // A max_mtu of 0 means the netdev sets no limit (dummy, for example).
    attr.max_mtu = match p.max_mtu {
        0 => bindings::ib_mtu_IB_MTU_4096,
        m => ib_mtu(m),
    };
    attr.active_mtu = ib_mtu(p.mtu);
    if p.active {
        attr.state = bindings::ib_port_state_IB_PORT_ACTIVE;
        attr.phys_state = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8;
    } else {
        attr.state = bindings::ib_port_state_IB_PORT_DOWN;
        attr.phys_state = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8;
    }
    attr.port_cap_flags = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP
        | bindings::ib_port_capability_mask_bits_IB_PORT_DEVICE_MGMT_SUP;
}

/// Returns the IB MTU enum value for an MTU of `mtu` octets (`ib_mtu_int_to_enum()`).
pub(crate) fn ib_mtu(mtu: u32) -> bindings::ib_mtu {
    match mtu {
        4096.. => bindings::ib_mtu_IB_MTU_4096,
        2048..=4095 => bindings::ib_mtu_IB_MTU_2048,
        1024..=2047 => bindings::ib_mtu_IB_MTU_1024,
        512..=1023 => bindings::ib_mtu_IB_MTU_512,
        _ => bindings::ib_mtu_IB_MTU_256,
    }
}

impl<T: DeviceOps> IbDevice<T> {
    /// The `show` of the sysfs attributes of [`DeviceOps::ATTRS`].
    ///
    /// # Safety
    ///
    /// Called only by the C shim's attribute `show`, for an attribute that
    /// `NewDevice::install_attrs` added to a live device of this type, with the sysfs
    /// buffer of `PAGE_SIZE` octets.
    pub(super) unsafe extern "C" fn show_attr_c(
        raw: *mut bindings::ib_device,
        index: kernel::ffi::c_uint,
        buf: *mut kernel::ffi::c_char,
    ) -> isize {
        // SAFETY: sysfs removes the attributes before the core frees the device, and waits
        // for running reads; the device is of this type (caller).
        let dev = unsafe { Self::from_raw(raw) };
        let v = T::show_attr(dev, index as usize);
        let mut text = [0u8; 11];
        let n = decimal_line(v, &mut text);
        // SAFETY: `buf` holds `PAGE_SIZE` octets, more than the 11 of `text`.
        unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n) };
        n as isize
    }

    /// The `store` of the sysfs attributes of [`DeviceOps::ATTRS`].
    ///
    /// # Safety
    ///
    /// Called only by the C shim's attribute `store`, for an attribute that
    /// `NewDevice::install_attrs` added to a live device of this type, with the `count`
    /// octets written at `buf`.
    pub(super) unsafe extern "C" fn store_attr_c(
        raw: *mut bindings::ib_device,
        index: kernel::ffi::c_uint,
        buf: *const kernel::ffi::c_char,
        count: usize,
    ) -> isize {
        // SAFETY: as in `show_attr_c`.
        let dev = unsafe { Self::from_raw(raw) };
        // SAFETY: sysfs passes `count` readable octets at `buf` for this call.
        let text = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) };
        match T::store_attr(dev, index as usize, text) {
            Ok(()) => count as isize,
            Err(e) => e.to_errno() as isize,
        }
    }
}

/// Writes `v` in decimal and a newline to the start of `out`; returns the octets written.
fn decimal_line(mut v: u32, out: &mut [u8; 11]) -> usize {
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (o, d) in out.iter_mut().zip(digits[..n].iter().rev()) {
        *o = *d;
    }
    out[n] = b'\n';
    n + 1
}

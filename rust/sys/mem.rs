// SPDX-License-Identifier: GPL-2.0

//! Memory: pinned user memory of MRs ([`umem`]), kernel virtual ranges and I/O lists
//! ([`kmem`]), a connection's pages for copied payload ([`copy_pages`]), the rings rsiw
//! shares with user space ([`ring`]) and their `mmap` entries ([`umap`]).

pub(crate) mod copy_pages;
pub(crate) mod kmem;
pub(crate) mod ring;
pub(crate) mod umap;
pub(crate) mod umem;

//! Page-aligned, pre-faulted buffers owned by a kernel.

use crate::error::KernelError;
use std::alloc::{Layout, alloc_zeroed, dealloc};

/// Alignment of every kernel buffer (a page, so the stream buffer's chunks
/// are page-aligned too).
pub(crate) const BUF_ALIGN: usize = 4096;

/// A zeroed, page-aligned heap buffer whose pages are all mapped at
/// construction, so no page fault happens inside a measured loop.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain owned memory; access goes through &self/&mut self.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer (no allocation).
    pub(crate) fn empty() -> AlignedBuf {
        AlignedBuf {
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// A zeroed buffer of `len` bytes (`len > 0`), every page touched.
    pub(crate) fn new(len: usize) -> Result<AlignedBuf, KernelError> {
        let layout = Layout::from_size_align(len.max(1), BUF_ALIGN)
            .map_err(|_| KernelError::Alloc { bytes: len })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(KernelError::Alloc { bytes: len });
        }
        let mut b = AlignedBuf { ptr, len };
        // Pre-fault: a large zeroed allocation is mapped lazily; write every
        // page so the kernels never fault in their loops.
        for page in b.as_mut_slice().chunks_mut(BUF_ALIGN) {
            // SAFETY: volatile write of a byte inside the slice.
            unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
        }
        Ok(b)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: ptr is a live allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as above, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated in `new` with this very layout.
            unsafe {
                dealloc(
                    self.ptr,
                    Layout::from_size_align_unchecked(self.len.max(1), BUF_ALIGN),
                )
            };
        }
    }
}

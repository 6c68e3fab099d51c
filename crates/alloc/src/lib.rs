//! releasegate's global allocator: mimalloc, called through its plain entry points for
//! word-aligned layouts.
//!
//! The proxy and the offline tools allocate many small JSON nodes from several threads, where
//! mimalloc is markedly faster than the system allocator. Nearly every Rust allocation asks
//! for an alignment of at most a word, which every mimalloc block has (block sizes are word
//! multiples and pages start aligned), so those go to `mi_malloc`, `mi_zalloc` and
//! `mi_realloc`. Only larger alignments take mimalloc's aligned entry points.
//!
//! The aligned entry points are not used for everything (as a wrapper that always passes the
//! alignment would) because of how they behave once a size class's current page has no
//! block ready: for a size whose block is not a power of two, they then over-allocate from a
//! larger size class and align inside that block, without collecting the freed blocks of the
//! original page. That page stays empty-handed for them, so from then on every allocation of
//! that size is over-allocated, and its block carries an interior pointer that makes freeing
//! it slower too. On the proxy's request path that was about fifty allocations per request
//! (`docs/benchmarks.md`).
//!
//! Taking the plain entry points for small alignments is the shortcut the `mimalloc` crate
//! removed after RUSTSEC-2022-0094, where it assumed 16-byte alignment that mimalloc's
//! `secure` mode does not give. The condition here is stricter (a word, which every block
//! has), but it rests on `libmimalloc-sys` internals, so that crate is pinned to an exact
//! version, its `secure` feature is never enabled (`.ci/run` checks it), and debug builds
//! assert the alignment of every block handed out.
//!
//! The binary installs it with `#[global_allocator]`; this crate is the workspace's only
//! `unsafe` code (every other crate forbids it).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The largest alignment every block of `mi_malloc` has: block sizes are multiples of a word.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (see the module's documentation).
pub struct Allocator;

/// `block`, after asserting (in debug builds) that it has `layout`'s alignment.
#[inline]
fn aligned(block: *mut u8, layout: Layout) -> *mut u8 {
    debug_assert!(
        block.is_null() || (block as usize).is_multiple_of(layout.align()),
        "mimalloc returned a block without the layout's alignment"
    );
    block
}

// SAFETY: every pointer comes from mimalloc with at least the layout's size and alignment
// (word-aligned layouts from the plain entry points, whose blocks are all word-aligned; any
// other from the aligned ones), and goes back to mimalloc: `mi_free` takes blocks of all of
// its entry points, and a block is reallocated by the entry point family it came from,
// because `realloc` keeps the layout's alignment.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc accepts any size and power-of-two alignment.
        let block = unsafe {
            if layout.align() <= WORD {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        };
        aligned(block, layout)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let block = unsafe {
            if layout.align() <= WORD {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        };
        aligned(block, layout)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from one of mimalloc's entry points (the trait's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`, so from the same family.
        let block = unsafe {
            if layout.align() <= WORD {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        };
        aligned(block, layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' own allocations (the harness, the vectors below) go through it too.
    #[global_allocator]
    static GLOBAL: Allocator = Allocator;

    /// Every size class boundary up to a few pages, at every alignment from 1 to 4 KiB: the
    /// block is aligned, writable over its whole size, keeps its bytes through growing and
    /// shrinking reallocations (which keep the alignment), and zeroed blocks are zero.
    #[test]
    fn blocks_have_the_layouts_alignment_and_keep_their_bytes() {
        let sizes = (1..=80)
            .chain((88..=1100).step_by(24))
            .chain([4095, 4096, 4097, 65_536, 300_000]);
        for size in sizes {
            for shift in 0..=12 {
                let align = 1usize << shift;
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes, valid layouts, each block freed once with its layout.
                unsafe {
                    let p = Allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size}, align {align}");
                    for i in 0..size {
                        p.add(i).write(i as u8);
                    }
                    let grown = size * 3 + 7;
                    let q = Allocator.realloc(p, layout, grown);
                    assert_eq!(q as usize % align, 0, "grown {grown}, align {align}");
                    for i in 0..size {
                        assert_eq!(q.add(i).read(), i as u8);
                    }
                    let shrunk = size.div_ceil(2);
                    let grown_layout = Layout::from_size_align(grown, align).unwrap();
                    let r = Allocator.realloc(q, grown_layout, shrunk);
                    assert_eq!(r as usize % align, 0, "shrunk {shrunk}, align {align}");
                    for i in 0..shrunk {
                        assert_eq!(r.add(i).read(), i as u8);
                    }
                    Allocator.dealloc(r, Layout::from_size_align(shrunk, align).unwrap());

                    let z = Allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| z.add(i).read() == 0));
                    Allocator.dealloc(z, layout);
                }
            }
        }
    }

    /// Many blocks of one size alive at once, freed and allocated again (the pattern that
    /// empties a size class's page): all distinct, aligned and intact.
    #[test]
    fn a_size_class_reused_many_times_stays_sound() {
        let layout = Layout::from_size_align(224, 8).unwrap();
        for round in 0..4u8 {
            // SAFETY: valid layout; every block freed once with it.
            unsafe {
                let blocks: Vec<*mut u8> = (0..5_000).map(|_| Allocator.alloc(layout)).collect();
                for (n, &p) in blocks.iter().enumerate() {
                    assert_eq!(p as usize % 8, 0);
                    p.write_bytes(round ^ n as u8, layout.size());
                }
                let mut sorted = blocks.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), blocks.len());
                for (n, &p) in blocks.iter().enumerate() {
                    assert!((0..layout.size()).all(|i| p.add(i).read() == round ^ n as u8));
                    Allocator.dealloc(p, layout);
                }
            }
        }
    }
}

//! Output buffers kept per thread from one training step to the next: the largest activations a
//! step keeps for its backward pass (a layer's attention weights, B·H·T·T values, and its GELU
//! output, N·4C) go back to their thread when the step drops them, and the next step's kernels
//! write over them instead of asking for fresh zeroed memory, whose zeroing is a pass over every
//! value. Course model: bf16 step 1.063×, f32 0.99× (within noise); keeping every activation
//! instead made f32 slower (0.97×, a third more page faults) — docs/performance.md. Attention's
//! per-sequence working buffers (its heads split into blocks, their gradients, the weights'
//! gradient dS, a head's kᵀ and vᵀ) are taken and given back here within one call, and the
//! backward pass's gradients of activations (each Linear's dx, attention's dqkv, the output
//! layer's dx and logits) once they are used.

use std::cell::RefCell;

/// Buffers kept per thread: those of a few layers.
pub(crate) const KEPT: usize = 64;

thread_local! {
    static SHELF: RefCell<Shelf<f32>> = const { RefCell::new(Shelf::new(KEPT)) };
}

/// A buffer of `len` values for an output the caller overwrites entirely: one this thread kept
/// (its values are those of its last use) or a fresh zeroed one.
pub(crate) fn take(len: usize) -> Vec<f32> {
    SHELF.with_borrow_mut(|shelf| shelf.take(len))
}

/// Keeps `data` for this thread's next [`take`] (nothing is kept while the thread itself is
/// being torn down).
pub(crate) fn give_back(data: Vec<f32>) {
    let _ = SHELF.try_with(|shelf| shelf.borrow_mut().keep(data));
}

/// Buffers of one element type kept by one thread (a `thread_local!`), for outputs that are
/// written whole: here and for bf16's packed operands (`bf16::spare`).
pub(crate) struct Shelf<T> {
    kept: Vec<Vec<T>>,
    most: usize,
}

impl<T: Copy + Default> Shelf<T> {
    /// An empty shelf that keeps at most `most` buffers.
    pub(crate) const fn new(most: usize) -> Self {
        Shelf {
            kept: Vec::new(),
            most,
        }
    }

    /// A buffer of `len` values: the smallest kept one whose allocation holds `len` (its values
    /// left as they were, zeros past its last length) or, if none does, a fresh zeroed one. A
    /// buffer that already holds `len` values goes first, since it needs no zeroing.
    pub(crate) fn take(&mut self, len: usize) -> Vec<T> {
        let kept = &mut self.kept;
        let fitting = (0..kept.len())
            .filter(|&i| kept[i].capacity() >= len)
            .min_by_key(|&i| (kept[i].len() < len, kept[i].capacity()));
        let mut data = fitting.map(|i| kept.swap_remove(i)).unwrap_or_default();
        data.resize(len, T::default());
        data
    }

    /// Keeps `data` for a later [`Shelf::take`], dropping the smallest buffer when full.
    pub(crate) fn keep(&mut self, data: Vec<T>) {
        self.kept.push(data);
        if self.kept.len() > self.most {
            let smallest = (0..self.kept.len()).min_by_key(|&i| self.kept[i].capacity());
            smallest.map(|i| self.kept.swap_remove(i));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Shelf;

    #[test]
    fn a_shelf_hands_out_the_smallest_buffer_that_fits_and_keeps_at_most_its_limit() {
        let mut shelf = Shelf::new(2);
        shelf.keep(vec![1u16; 10]);
        shelf.keep(vec![2u16; 30]);
        shelf.keep(vec![3u16; 20]); // over the limit: the smallest (10) goes
        let taken = shelf.take(15);
        assert_eq!(taken, vec![3u16; 15], "the 20, the smallest that holds 15");
        let mut grown = shelf.take(25); // the 30, cut to 25
        assert_eq!(grown, vec![2u16; 25]);
        grown.truncate(5);
        shelf.keep(grown);
        let again = shelf.take(8); // kept values, zeros past the last length
        assert_eq!(again, [vec![2u16; 5], vec![0u16; 3]].concat());
        assert_eq!(
            shelf.take(4),
            vec![0u16; 4],
            "nothing left: a fresh zeroed buffer"
        );
    }

    #[test]
    fn a_shelf_prefers_a_buffer_that_needs_no_zeroing() {
        let mut shelf = Shelf::new(4);
        let mut short = vec![1u16; 30];
        short.truncate(5); // holds 30, but only 5 values are kept
        shelf.keep(short);
        shelf.keep(vec![2u16; 40]);
        assert_eq!(
            shelf.take(10),
            vec![2u16; 10],
            "the 40 holds 10 values already; the 30 would zero 5 of them"
        );
        assert_eq!(shelf.take(10), [vec![1u16; 5], vec![0u16; 5]].concat());
    }
}

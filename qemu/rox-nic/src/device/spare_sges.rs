//! Emptied SGE lists kept for the next WRs decoded (send and receive): a list comes from
//! here when a WQE's SGEs are decoded and goes back when its WR is done with it, so a
//! message costs no allocation and no free for its SGE list.

use crate::roce::{SendData, Sge};

/// Most emptied SGE lists kept for reuse (a deep queue's worth).
pub const SPARE_SGE_LISTS: usize = 1024;

/// The spare SGE lists.
#[derive(Debug, Default)]
pub struct SpareSges(Vec<Vec<Sge>>);

impl SpareSges {
    /// An empty list, a spare one if there is one.
    pub fn take(&mut self) -> Vec<Sge> {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `sges`'s allocation for the next WR decoded (up to [`SPARE_SGE_LISTS`] of them;
    /// a list without one is not worth keeping).
    pub fn give_back(&mut self, mut sges: Vec<Sge>) {
        if self.0.len() < SPARE_SGE_LISTS && sges.capacity() > 0 {
            sges.clear();
            self.0.push(sges);
        }
    }

    /// [`Self::give_back`] of `data`'s SGE list, if it is one.
    pub fn give_back_data(&mut self, data: SendData) {
        if let SendData::Sges(sges) = data {
            self.give_back(sges);
        }
    }

    /// Lists kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_given_back_is_taken_again_emptied_and_the_pool_is_bounded() {
        let mut spares = SpareSges::default();
        assert_eq!(spares.take().capacity(), 0, "none kept: a new empty list");
        let mut list = Vec::with_capacity(4);
        list.push(Sge {
            addr: 0,
            length: 1,
            lkey: crate::roce::Key::default(),
        });
        let at = list.as_ptr();
        spares.give_back(list);
        spares.give_back(Vec::new());
        spares.give_back_data(SendData::Inline(vec![1; 8]));
        assert_eq!(spares.len(), 1, "only an allocated SGE list is kept");
        let again = spares.take();
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        assert!(spares.is_empty());
        for _ in 0..SPARE_SGE_LISTS + 1 {
            spares.give_back_data(SendData::Sges(Vec::with_capacity(1)));
        }
        assert_eq!(spares.len(), SPARE_SGE_LISTS);
    }
}

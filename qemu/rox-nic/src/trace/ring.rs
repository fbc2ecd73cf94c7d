//! A bounded ring of records: allocated once when the trace starts, then the newest
//! `capacity` records are kept (a flight recorder: the oldest are overwritten and counted).

use super::record::{Dump, Record};

#[derive(Debug, Default)]
pub struct Ring {
    buf: Vec<Record>,
    capacity: usize,
    /// Index of the next write once the ring is full.
    next: usize,
    overwritten: u64,
}

impl Ring {
    pub const fn empty() -> Ring {
        Ring {
            buf: Vec::new(),
            capacity: 0,
            next: 0,
            overwritten: 0,
        }
    }

    /// An empty ring holding up to `capacity` records (its memory taken now, not per record).
    pub fn with_capacity(capacity: usize) -> Ring {
        Ring {
            buf: Vec::with_capacity(capacity),
            capacity,
            next: 0,
            overwritten: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn push(&mut self, r: Record) {
        if self.capacity == 0 {
            return;
        }
        if self.buf.len() < self.capacity {
            self.buf.push(r);
            return;
        }
        self.buf[self.next] = r;
        self.next = (self.next + 1) % self.capacity;
        self.overwritten += 1;
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.next = 0;
        self.overwritten = 0;
    }

    /// The records, oldest first.
    pub fn dump(&self) -> Dump {
        let (newer, older) = self.buf.split_at(self.next);
        Dump {
            records: older.iter().chain(newer).copied().collect(),
            overwritten: self.overwritten,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts_ns: u64) -> Record {
        Record {
            ts_ns,
            ..Record::default()
        }
    }

    fn times(r: &Ring) -> Vec<u64> {
        r.dump().records.iter().map(|r| r.ts_ns).collect()
    }

    #[test]
    fn the_ring_keeps_the_newest_records_in_order_and_counts_the_rest() {
        let mut r = Ring::with_capacity(3);
        r.push(rec(1));
        r.push(rec(2));
        assert_eq!(times(&r), [1, 2]);
        for t in 3..=7 {
            r.push(rec(t));
        }
        assert_eq!(times(&r), [5, 6, 7]);
        assert_eq!(r.dump().overwritten, 4);
        assert_eq!(r.len(), 3);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.dump().overwritten, 0);
        r.push(rec(9));
        assert_eq!(times(&r), [9]);
    }

    #[test]
    fn a_ring_without_room_records_nothing() {
        let mut r = Ring::empty();
        r.push(rec(1));
        assert!(r.is_empty());
        assert_eq!(r.capacity(), 0);
    }

    #[test]
    fn pushing_into_a_full_ring_never_grows_it() {
        let mut r = Ring::with_capacity(4);
        let cap = r.buf.capacity();
        for t in 0..100 {
            r.push(rec(t));
        }
        assert_eq!(r.buf.capacity(), cap, "no allocation after the start");
    }
}

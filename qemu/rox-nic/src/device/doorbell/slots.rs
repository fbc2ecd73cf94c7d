//! Which object holds each doorbell slot, page by page: filled when a QP, CQ or SRQ is created,
//! emptied when it is destroyed. The summary doorbell's scan looks up the objects of the news
//! groups here (docs/summary-doorbell.md), and the idle device announces its sleep on the pages
//! listed here.

use std::collections::BTreeMap;

use rox_uapi::ids::Qpn;
use rox_uapi::regs::{self, DB_NEWS_GROUP_SLOTS, DB_SLOTS_PER_PAGE};

use super::PageSet;

/// The object on a doorbell slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbObject {
    Qp(Qpn),
    Cq(u32),
    Srq(u32),
}

/// The objects on the slots of one page.
#[derive(Debug)]
pub struct PageObjects {
    objects: Box<[Option<DbObject>; DB_SLOTS_PER_PAGE]>,
    used: u32,
}

impl PageObjects {
    fn new() -> PageObjects {
        PageObjects {
            objects: Box::new([None; DB_SLOTS_PER_PAGE]),
            used: 0,
        }
    }

    /// The objects on the slots of news group `group` (`regs::db_news_group`), with their
    /// slots.
    pub fn group(&self, group: usize) -> impl Iterator<Item = (u32, DbObject)> + '_ {
        let first = (group * DB_NEWS_GROUP_SLOTS).min(DB_SLOTS_PER_PAGE);
        let end = (first + DB_NEWS_GROUP_SLOTS).min(DB_SLOTS_PER_PAGE);
        self.objects[first..end]
            .iter()
            .zip(first as u32..)
            .filter_map(|(object, slot)| object.map(|o| (slot, o)))
    }
}

/// The doorbell slots the device's objects (QPs, CQs, SRQs) hold, by page: the pages in it are
/// those whose doorbells software may ring, on which the idle device announces that it sleeps
/// (announcing on all 256 pages cost ~5,000 instructions per sleep, ~250 per 8 B WRITE of the
/// host bench, docs/benchmarks/session-16.md "Session 16: instructions per message").
#[derive(Debug, Default)]
pub struct DoorbellsUsed {
    /// The pages with a slot in use, ascending.
    pages: BTreeMap<u32, PageObjects>,
}

impl DoorbellsUsed {
    /// Gives slot `slot` of `page` to `object`; false if it was taken already or lies outside
    /// the BAR.
    pub fn claim(&mut self, page: u32, slot: u32, object: DbObject) -> bool {
        if page >= regs::DB_PAGE_COUNT || slot as usize >= DB_SLOTS_PER_PAGE {
            return false;
        }
        let objects = self.pages.entry(page).or_insert_with(PageObjects::new);
        let entry = &mut objects.objects[slot as usize];
        if entry.is_some() {
            return false;
        }
        *entry = Some(object);
        objects.used += 1;
        true
    }

    /// Gives slot `slot` of `page` back (nothing if it was not taken).
    pub fn release(&mut self, page: u32, slot: u32) {
        let Some(objects) = self.pages.get_mut(&page) else {
            return;
        };
        let Some(entry) = objects.objects.get_mut(slot as usize) else {
            return;
        };
        if entry.take().is_some() {
            objects.used -= 1;
            if objects.used == 0 {
                self.pages.remove(&page);
            }
        }
    }

    /// The object on slot `slot` of `page`.
    #[cfg(test)]
    pub fn object(&self, page: u32, slot: u32) -> Option<DbObject> {
        let objects = self.pages.get(&page)?;
        objects.objects.get(slot as usize).copied().flatten()
    }

    /// The pages with a slot in use, with their objects, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &PageObjects)> + '_ {
        self.pages.iter().map(|(&page, objects)| (page, objects))
    }

    /// The pages with a slot in use, and the kernel's (rox.ko rings its objects' doorbells
    /// there).
    pub fn pages(&self) -> PageSet {
        let mut pages = PageSet::default();
        pages.insert(regs::DB_PAGE_KERNEL);
        for &page in self.pages.keys() {
            pages.insert(page);
        }
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp(n: u32) -> DbObject {
        DbObject::Qp(Qpn::new(n).unwrap())
    }

    #[test]
    fn the_pages_in_use_follow_the_slots_claimed_and_released() {
        let mut used = DoorbellsUsed::default();
        let kernel = regs::DB_PAGE_KERNEL;
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel]);
        assert!(used.claim(3, 0, qp(2)));
        assert!(used.claim(3, 5, DbObject::Cq(1)));
        assert!(!used.claim(3, 5, qp(3)), "a slot is taken once");
        assert!(used.claim(200, 1, DbObject::Srq(1)));
        assert!(used.claim(kernel, 2, qp(4)));
        assert!(!used.claim(regs::DB_PAGE_COUNT, 0, qp(5)), "no such page");
        assert!(
            !used.claim(3, DB_SLOTS_PER_PAGE as u32, qp(5)),
            "no such slot"
        );
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel, 3, 200]);
        used.release(3, 0);
        assert_eq!(used.object(3, 5), Some(DbObject::Cq(1)));
        assert_eq!(used.object(3, 0), None);
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel, 3, 200]);
        used.release(3, 0); // not taken: changes nothing
        used.release(3, 5);
        used.release(200, 1);
        used.release(kernel, 2);
        assert_eq!(used.pages().iter().collect::<Vec<_>>(), [kernel]);
        assert_eq!(used.iter().count(), 0, "no page without an object is kept");
    }

    #[test]
    fn a_news_group_holds_exactly_the_objects_of_its_slots() {
        let mut used = DoorbellsUsed::default();
        let last = DB_SLOTS_PER_PAGE as u32 - 1;
        let edge = DB_NEWS_GROUP_SLOTS as u32;
        for (slot, n) in [(0, 2), (edge - 1, 3), (edge, 4), (last, 5)] {
            assert!(used.claim(7, slot, qp(n)));
        }
        let (page, objects) = used.iter().next().unwrap();
        assert_eq!(page, 7);
        let group = |g| objects.group(g).collect::<Vec<_>>();
        assert_eq!(group(0), [(0, qp(2)), (edge - 1, qp(3))]);
        assert_eq!(group(1), [(edge, qp(4))]);
        assert_eq!(group(regs::db_news_group(last)), [(last, qp(5))]);
        assert_eq!(
            group(regs::DB_NEWS_GROUPS),
            [],
            "past the last group: no slot"
        );
    }
}

//! Memory commands: MR registration (ordinary, physical, on-demand, fast-registration),
//! ODP page updates, deregistration, memory windows, and the keys they get.

use rox_uapi::admin::*;
use rox_uapi::ids::Key;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

use super::{next_id, AdminResult};
use crate::device::region::{
    pages_cover, region_access_valid, region_fits, FastRegState, Mr, Mw, ODP_PTE_FAILED,
};
use crate::device::ring::load_page_list;
use crate::device::state::Hw;

pub(super) fn reg_mr(hw: &mut Hw, c: &RegMrCmd) -> AdminResult<MrKeys> {
    if c.flags & MR_FLAG_FAST_REG != 0 {
        return alloc_fast_reg_mr(hw, c);
    }
    if !region_access_valid(c.access)
        || c.flags & !(MR_FLAG_PHYSICAL | MR_FLAG_ON_DEMAND) != 0
        || c.flags == MR_FLAG_PHYSICAL | MR_FLAG_ON_DEMAND
        || !region_fits(c.iova, c.length)
    {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mrs.len() >= DEV_MAX_MR as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let physical = c.flags & MR_FLAG_PHYSICAL != 0;
    let odp = c.flags & MR_FLAG_ON_DEMAND != 0;
    let (pages, page_shift) = if physical {
        (Vec::new(), 0)
    } else if odp {
        // Every page starts not present; the driver maps them with ODP_UPDATE.
        let pl = &c.pbl;
        if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&pl.page_shift)
            || pl.npages == 0
            || pl.npages > DEV_MAX_PBL_PAGES
        {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        if !pages_cover(
            c.offset_in_first_page.into(),
            c.length,
            pl.npages,
            pl.page_shift,
        ) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        (vec![0; pl.npages as usize], pl.page_shift as u32)
    } else {
        let pages = load_page_list(&hw.mem, &c.pbl)?;
        if !pages_cover(
            c.offset_in_first_page.into(),
            c.length,
            c.pbl.npages,
            c.pbl.page_shift,
        ) {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        (pages, c.pbl.page_shift as u32)
    };
    Ok(insert_mr(hw, |key| Mr {
        key,
        pd: c.pd,
        access: c.access,
        iova: c.iova,
        length: c.length,
        offset: c.offset_in_first_page as u64,
        pages,
        page_shift,
        physical,
        odp,
        fast_reg: None,
    }))
}

/// Enters the region `make` builds under a fresh key; lkey and rkey are that key.
fn insert_mr(hw: &mut Hw, make: impl FnOnce(Key) -> Mr) -> MrKeys {
    let key = alloc_key(hw);
    hw.mem_table.mrs.insert(key.index(), make(key));
    MrKeys {
        lkey: key,
        rkey: key,
    }
}

/// Allocates a fast-registration region of `pbl.npages` pages capacity in `pd`: no pages, key
/// invalid until a `WR_REG_MR` binds some (the other fields of the command are ignored).
fn alloc_fast_reg_mr(hw: &mut Hw, c: &RegMrCmd) -> AdminResult<MrKeys> {
    if c.flags != MR_FLAG_FAST_REG || c.pbl.npages == 0 || c.pbl.npages > DEV_MAX_FAST_REG_PAGES {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mrs.len() >= DEV_MAX_MR as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    Ok(insert_mr(hw, |key| Mr {
        key,
        pd: c.pd,
        access: 0,
        iova: 0,
        length: 0,
        offset: 0,
        pages: Vec::new(),
        page_shift: u32::from(PAGE_SHIFT_MIN),
        physical: false,
        odp: false,
        fast_reg: Some(FastRegState {
            capacity: c.pbl.npages,
            valid: false,
        }),
    }))
}

/// Maps, unmaps or fails pages of an on-demand region. Admin commands run between data-path
/// passes, so once this returns no access uses an unmapped page.
pub(super) fn odp_update(hw: &mut Hw, c: &OdpUpdateCmd) -> AdminResult {
    let mr = hw
        .mem_table
        .mr(c.key)
        .map_err(|_| ADMIN_STATUS_BAD_HANDLE)?;
    if !mr.odp {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    let first = c.first_page as usize;
    let end = first
        .checked_add(c.npages as usize)
        .filter(|&end| end <= mr.pages.len() && c.npages != 0)
        .ok_or(ADMIN_STATUS_BAD_PARAM)?;
    let psize = 1u64 << mr.page_shift;
    let new: Vec<u64> = match c.op {
        ODP_OP_MAP => {
            if c.npages > ODP_MAX_UPDATE_PAGES {
                return Err(ADMIN_STATUS_BAD_PARAM);
            }
            let mut bytes = vec![0u8; c.npages as usize * 8];
            hw.mem
                .read(c.pages, &mut bytes)
                .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
            let mut new = Vec::with_capacity(c.npages as usize);
            for (i, b) in bytes.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes(b.try_into().expect("8"));
                if e & ODP_PTE_PRESENT == 0 {
                    new.push(mr.pages[first + i]);
                    continue;
                }
                let addr = e & !ODP_PTE_FLAGS;
                if addr & (psize - 1) != 0 {
                    return Err(ADMIN_STATUS_BAD_PARAM);
                }
                hw.mem
                    .check_access(addr, psize, e & ODP_PTE_WRITE != 0)
                    .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
                new.push(e & ODP_PTE_FLAGS | addr);
            }
            new
        }
        ODP_OP_UNMAP => vec![0; c.npages as usize],
        ODP_OP_FAIL => vec![ODP_PTE_FAILED; c.npages as usize],
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    };
    let mr = hw
        .mem_table
        .mrs
        .get_mut(&c.key.index())
        .expect("looked up above");
    mr.pages[first..end].copy_from_slice(&new);
    Ok(())
}

/// Forgets an MR. Windows bound to it are unbound (their rkeys reach nothing any more) rather
/// than making the deregistration fail as rxe does: a dereg at process teardown cannot fail.
/// An ordinary MR is named by its lkey; a fast-registration region, valid or not, by any key
/// of its index (the consumer may have changed the variant without the driver knowing).
pub(super) fn dereg_mr(hw: &mut Hw, lkey: Key) -> AdminResult {
    // A window's key names no MR, whatever its index.
    let index = lkey.index();
    let named = !lkey.is_window()
        && hw
            .mem_table
            .mrs
            .get(&index)
            .is_some_and(|mr| mr.key == lkey || mr.fast_reg.is_some());
    if !named {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    hw.mem_table.mrs.remove(&index);
    hw.mem_table.unbind_windows_into(index);
    Ok(())
}

pub(super) fn alloc_mw(hw: &mut Hw, c: &AllocMwCmd) -> AdminResult<Key> {
    if !matches!(c.mw_type, MW_TYPE_1 | MW_TYPE_2) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.mem_table.mws.len() >= DEV_MAX_MW as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let mws = &hw.mem_table.mws;
    let index = next_id(&mut hw.next_mw, 1, |i| {
        i > Key::MAX_INDEX || mws.contains_key(&i)
    });
    // The first rkey's key part is random too; binds change it (librox increments it for type
    // 1 windows, the binder chooses it for type 2).
    let rkey = Key::window(index, random_key_part());
    hw.mem_table.mws.insert(
        index,
        Mw {
            pd: c.pd,
            mw_type: c.mw_type,
            rkey,
            binding: None,
        },
    );
    Ok(rkey)
}

pub(super) fn dealloc_mw(hw: &mut Hw, rkey: Key) -> AdminResult {
    if !rkey.is_window() {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    hw.mem_table
        .mws
        .remove(&rkey.index())
        .map(|_| ())
        .ok_or(ADMIN_STATUS_BAD_HANDLE)
}

/// A fresh MR key: the next free index (counting up, so a freed index is reused last) over a
/// random key part, as HCAs and rxe make them: a peer holding one rkey cannot guess another
/// MR's, nor a later registration's at a reused index.
fn alloc_key(hw: &mut Hw) -> Key {
    // Index 0 is never used.
    loop {
        let index = hw.next_mr_index;
        hw.next_mr_index = if index >= Key::MAX_INDEX {
            1
        } else {
            index + 1
        };
        if !hw.mem_table.mrs.contains_key(&index) {
            return Key::region(index, random_key_part());
        }
    }
}

/// The variable low byte of a new key ([`Key::variant`]), from a generator seeded by the OS.
fn random_key_part() -> u8 {
    rand::random::<u8>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{payload, TestDriver};
    use crate::DeviceConfig;

    #[test]
    fn mr_keys_have_a_random_key_part_under_a_unique_index() {
        let mut d = TestDriver::new(DeviceConfig::new([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        let buf = d.ram.alloc(4096, 4096);
        let keys: Vec<Key> = (0..32)
            .map(|_| d.reg_mr(7, buf, 4096, ACCESS_LOCAL_WRITE).expect("reg_mr"))
            .collect();
        let words: Vec<u32> = keys.iter().map(|k| k.get()).collect();
        let mut indices: Vec<u32> = keys.iter().map(|k| k.index()).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), keys.len(), "one index per MR: {words:x?}");
        assert!(keys.iter().all(|k| !k.is_window() && k.index() != 0));
        // The variant byte itself must look random. A constant variant has one value and 31
        // equal steps, a counter 31 steps of +1; 32 random bytes have about 30 distinct values,
        // and a given step between neighbours recurs 5 or more times with odds near 1e-5.
        let variants: Vec<u8> = keys.iter().map(|k| k.variant()).collect();
        let mut distinct = variants.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 16, "few distinct key parts: {words:x?}");
        let mut steps = [0usize; 256];
        for w in variants.windows(2) {
            steps[w[1].wrapping_sub(w[0]) as usize] += 1;
        }
        let most = steps.iter().max().copied().unwrap_or(0);
        assert!(most <= 4, "key parts follow a fixed step: {words:x?}");
        // A deregistered key is gone.
        let old = keys[0];
        let cmd = KeyCmd {
            key: old,
            reserved: 0,
        };
        assert_eq!(
            d.admin(ADMIN_OP_DEREG_MR, payload(&cmd)).status,
            ADMIN_STATUS_SUCCESS
        );
        assert_eq!(
            d.admin(ADMIN_OP_DEREG_MR, payload(&cmd)).status,
            ADMIN_STATUS_BAD_HANDLE
        );
    }
}

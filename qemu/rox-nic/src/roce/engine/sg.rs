//! Scatter/gather (as rxe_mr.c's copy_data): copying a message's bytes between packets and
//! the local buffers its SGE list (or inline data) describes.

use crate::roce::*;

pub(super) fn sges_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

pub(super) enum SgError {
    /// The data does not fit the SGE list.
    Length,
    /// The device refused an access (key, PD, access flags or bounds).
    Access,
    /// A page of an on-demand region is not present yet: try again later.
    Fault,
}

/// Walks bytes `[offset, offset + len)` of the buffer an SGE list describes, in pieces that
/// each lie in one SGE: `piece(sge, address in it, range of the walked bytes)`. Returns how
/// many bytes the list covered (less than `len` if it is too short).
pub(super) fn walk_sges(
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut piece: impl FnMut(&Sge, u64, std::ops::Range<usize>) -> Result<(), SgError>,
) -> Result<usize, SgError> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(sge.length);
        if skip >= sge_len {
            skip -= sge_len;
            continue;
        }
        let n = ((sge_len - skip) as usize).min(len - done);
        piece(sge, sge.addr + skip, done..done + n)?;
        done += n;
        skip = 0;
    }
    Ok(done)
}

pub(super) fn access_refused(e: AccessError) -> SgError {
    log::debug!("local access refused: {e}");
    match e {
        AccessError::PageFault { .. } => SgError::Fault,
        _ => SgError::Access,
    }
}

/// Copies `out.len()` bytes starting at byte `offset` of the payload described by `data`.
pub(super) fn gather(
    env: &mut dyn DeviceEnv,
    pd: u32,
    data: &SendData,
    offset: u64,
    out: &mut [u8],
) -> Result<(), SgError> {
    match data {
        SendData::Inline(bytes) => {
            let start = offset as usize;
            let src = bytes.get(start..start + out.len()).ok_or(SgError::Length)?;
            out.copy_from_slice(src);
            Ok(())
        }
        SendData::Sges(sges) => {
            let len = out.len();
            let done = walk_sges(sges, offset, len, |sge, addr, range| {
                env.read_local(pd, sge.lkey, addr, &mut out[range])
                    .map_err(access_refused)
            })?;
            if done == len {
                Ok(())
            } else {
                Err(SgError::Length)
            }
        }
    }
}

/// Writes `data` at byte `offset` of the buffer described by `sges`.
pub(super) fn scatter(
    env: &mut dyn DeviceEnv,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), SgError> {
    if offset + data.len() as u64 > sges_len(sges) {
        return Err(SgError::Length);
    }
    walk_sges(sges, offset, data.len(), |sge, addr, range| {
        env.write_local(pd, sge.lkey, addr, &data[range])
            .map_err(access_refused)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::*;

    fn sge(addr: u64, length: u32, lkey: Key) -> Sge {
        Sge { addr, length, lkey }
    }

    #[test]
    fn walk_covers_the_range_in_pieces_of_one_sge_each() {
        let key = LKEY;
        let sges = [sge(0x100, 4, key), sge(0x200, 4, key), sge(0x300, 4, key)];
        let mut pieces = Vec::new();
        let done = walk_sges(&sges, 2, 7, |s, addr, range| {
            pieces.push((s.addr, addr, range));
            Ok(())
        });
        assert_eq!(done.ok(), Some(7));
        assert_eq!(
            pieces,
            [
                (0x100, 0x102, 0..2),
                (0x200, 0x200, 2..6),
                (0x300, 0x300, 6..7)
            ]
        );
        let short = walk_sges(&sges, 10, 8, |_, _, _| Ok(()));
        assert_eq!(short.ok(), Some(2), "the list ends 2 bytes in");
    }

    #[test]
    fn gather_and_scatter_report_length_access_and_fault() {
        let mut env = TestEnv::new();
        let key = LKEY;
        let sges = vec![sge(0x10, 4, key), sge(0x20, 4, key)];
        scatter(&mut env, 1, &sges, 2, b"abcd").ok().unwrap();
        assert_eq!(&env.mem[0x12..0x14], b"ab");
        assert_eq!(&env.mem[0x20..0x22], b"cd");
        let mut out = [0u8; 4];
        gather(&mut env, 1, &SendData::Sges(sges.clone()), 2, &mut out)
            .ok()
            .unwrap();
        assert_eq!(&out, b"abcd");
        assert!(matches!(
            scatter(&mut env, 1, &sges, 5, b"abcd"),
            Err(SgError::Length)
        ));
        assert_eq!(
            &env.mem[0x21..0x24],
            b"d\0\0",
            "a list too short writes nothing"
        );
        let inline = SendData::Inline(b"xyz".to_vec());
        assert!(matches!(
            gather(&mut env, 1, &inline, 1, &mut out[..3]),
            Err(SgError::Length)
        ));
        let faulting = SendData::Sges(vec![sge(0, 4, FAULT_KEY)]);
        assert!(matches!(
            gather(&mut env, 1, &faulting, 0, &mut out),
            Err(SgError::Fault)
        ));
        let refused = vec![sge(0, 4, BAD_KEY)];
        assert!(matches!(
            scatter(&mut env, 1, &refused, 0, b"abcd"),
            Err(SgError::Access)
        ));
    }
}

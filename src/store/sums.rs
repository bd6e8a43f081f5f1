//! Per-block checksums of an object: CRC32C of every [`CHUNK`] bytes,
//! computed while the object is written and checked on every read, so a
//! byte that rots on disk is caught by the response that reads it (the
//! sha256 proves the whole; these prove each chunk a range touches, at
//! memory speed: CRC32C runs in hardware on x86-64 and aarch64).
//!
//! File format (`sums/<digest>`): `TGC1`, the chunk size (u32 LE), then
//! one CRC32C (u32 LE) per chunk, the last chunk possibly short.

use std::io;

/// The CRC32C of `b` in one call, the one every read checks its blocks
/// with: `crc-fast`, which folds with VPCLMULQDQ where the CPU has it
/// (about 2-3x the `crc32c` crate's three-lane CRC instruction on a
/// 64 KiB block; a piece-wise sum, `crc32c_append`, stays with that crate).
pub fn crc(b: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, b) as u32
}

/// Bytes per checksummed block: a read checks the blocks it touches, so a
/// range reads at most one block beyond each of its ends (64 KiB kept a
/// 1 MiB range within the cached-serving bar; 1 MiB blocks doubled the
/// bytes read and checked for an unaligned 1 MiB range).
pub const CHUNK: usize = 64 << 10;

const MAGIC: &[u8; 4] = b"TGC1";

/// The checksums of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sums {
    chunk: usize,
    crcs: Vec<u32>,
}

impl Sums {
    /// Checksums of `data` (tests, and re-computing for `mirror verify`).
    pub fn of(data: &[u8]) -> Sums {
        let mut b = SumsBuilder::default();
        b.update(data);
        b.finish()
    }

    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.crcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.crcs.is_empty()
    }

    /// Does chunk `i` (its whole bytes) match ([`crc`])?
    pub fn check(&self, i: usize, data: &[u8]) -> bool {
        self.crcs.get(i) == Some(&crc(data))
    }

    /// The checksum of chunk `i`, if there is one (for a chunk checked in
    /// pieces: `crc32c_append` over them).
    pub fn expected(&self, i: usize) -> Option<u32> {
        self.crcs.get(i).copied()
    }

    /// Do these checksums fit an object of `size` bytes?
    pub fn fits(&self, size: u64) -> bool {
        self.chunk > 0 && self.crcs.len() as u64 == size.div_ceil(self.chunk as u64)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + 4 * self.crcs.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&(self.chunk as u32).to_le_bytes());
        for c in &self.crcs {
            v.extend_from_slice(&c.to_le_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> io::Result<Sums> {
        let bad = |what: &str| {
            io::Error::new(io::ErrorKind::InvalidData, format!("checksum file: {what}"))
        };
        if b.len() < 8 || &b[..4] != MAGIC {
            return Err(bad("not a talos-gen checksum file"));
        }
        let chunk = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
        let rest = &b[8..];
        if chunk == 0 || !rest.len().is_multiple_of(4) {
            return Err(bad("malformed"));
        }
        let crcs = rest
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Sums { chunk, crcs })
    }
}

/// Computes [`Sums`] over bytes written in pieces of any size.
#[derive(Debug, Clone, Default)]
pub struct SumsBuilder {
    crcs: Vec<u32>,
    cur: u32,
    cur_len: usize,
}

impl SumsBuilder {
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = (CHUNK - self.cur_len).min(data.len());
            self.cur = crc32c::crc32c_append(self.cur, &data[..n]);
            self.cur_len += n;
            data = &data[n..];
            if self.cur_len == CHUNK {
                self.crcs.push(self.cur);
                self.cur = 0;
                self.cur_len = 0;
            }
        }
    }

    /// The checksums of the whole chunks so far, from chunk `from` on.
    pub fn whole_since(&self, from: usize) -> &[u32] {
        &self.crcs[from.min(self.crcs.len())..]
    }

    /// The checksum of the short chunk after the whole ones, and its
    /// length (0: none yet).
    pub fn tail(&self) -> (u32, usize) {
        (self.cur, self.cur_len)
    }

    pub fn finish(mut self) -> Sums {
        if self.cur_len > 0 {
            self.crcs.push(self.cur);
        }
        Sums {
            chunk: CHUNK,
            crcs: self.crcs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read path's CRC32C (`crc-fast`) is the one the sums were
    /// written with (`crc32c`): every length around the vector widths, at
    /// every alignment, and whole blocks.
    #[test]
    fn the_read_paths_crc_is_the_crc32c_the_sums_were_written_with() {
        let data: Vec<u8> = (0..(CHUNK + 300)).map(|i| (i * 131 % 251) as u8).collect();
        for start in 0..8 {
            for len in (0..300).chain([4095, 4096, 4097, CHUNK - 1, CHUNK]) {
                let b = &data[start..start + len];
                assert_eq!(crc(b), crc32c::crc32c(b), "{start}+{len}");
            }
        }
        assert_eq!(crc(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn pieces_of_any_size_give_the_same_sums() {
        let data: Vec<u8> = (0..(CHUNK * 2 + 777))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let whole = Sums::of(&data);
        assert_eq!(whole.len(), 3);
        assert!(whole.fits(data.len() as u64));
        assert!(!whole.fits(data.len() as u64 + CHUNK as u64));
        for piece in [1, 4096, 65537, CHUNK, CHUNK + 1] {
            let mut b = SumsBuilder::default();
            for p in data.chunks(piece) {
                b.update(p);
            }
            assert_eq!(b.finish(), whole, "piece {piece}");
        }
        assert!(whole.check(2, &data[2 * CHUNK..]));
        let mut flipped = data[CHUNK..2 * CHUNK].to_vec();
        flipped[100] ^= 1;
        assert!(!whole.check(1, &flipped));
        assert_eq!(Sums::decode(&whole.encode()).unwrap(), whole);
        assert!(Sums::decode(b"TGC1").is_err());
        assert!(Sums::decode(b"nope\0\0\x10\0").is_err());
        assert_eq!(Sums::of(b"").len(), 0);
    }
}

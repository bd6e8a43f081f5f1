//! The uncompressed size of an `.xz` file, from its end: every xz stream
//! ends with an index (the unpadded and uncompressed size of each block)
//! and a 12-byte footer that says how long the index is (the xz file
//! format, tukaani.org/xz/xz-file-format.txt, sections 2.1.2 and 4). So a
//! ranged read of the file's tail answers the size of the raw disk inside
//! it: the artifact is never read whole, nor held in memory.
//!
//! Pure: the caller reads the tail (the CLI over HTTP, the service from its
//! store) and asks again with more of it when [`Tail::NeedMore`] says so.
//! Concatenated streams and stream padding are walked back to the first.

/// What a tail says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The total uncompressed size of every stream.
    Size(u64),
    /// The last `n` bytes of the file are needed (more than given).
    NeedMore(u64),
}

/// Why a tail is not an xz file's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XzIndexError {
    #[error("no xz stream footer at byte {0} (not an .xz file, or cut short)")]
    NoFooter(u64),
    #[error("the xz stream footer at byte {0} fails its CRC32")]
    FooterCrc(u64),
    #[error("the xz index at byte {0} is malformed ({1})")]
    Index(u64, &'static str),
    #[error("no xz stream header at byte {0} where the index says a stream starts")]
    NoHeader(u64),
    #[error("the sizes in the xz index do not fit the file")]
    Overflow,
}

const FOOTER_MAGIC: &[u8; 2] = b"YZ";
const HEADER_MAGIC: &[u8; 6] = b"\xFD7zXZ\x00";

/// The uncompressed size of the `.xz` file of `total` bytes whose last
/// `tail.len()` bytes are `tail`.
pub fn uncompressed_size(tail: &[u8], total: u64) -> Result<Tail, XzIndexError> {
    let have = tail.len() as u64;
    let start_of_tail = total.saturating_sub(have);
    // `len` bytes at `at`, or how much tail is needed for them.
    let slice = |at: u64, len: u64| -> Result<&[u8], Tail> {
        if at < start_of_tail {
            return Err(Tail::NeedMore(total - at));
        }
        let i = (at - start_of_tail) as usize;
        Ok(&tail[i..i + len as usize])
    };
    let mut pos = total;
    let mut sum: u64 = 0;
    loop {
        // Stream padding: zero bytes, in fours, before a footer.
        loop {
            if pos < 4 {
                return Err(XzIndexError::NoFooter(pos));
            }
            match slice(pos - 4, 4) {
                Ok([0, 0, 0, 0]) => pos -= 4,
                Ok(_) => break,
                Err(t) => return Ok(t),
            }
        }
        if pos < 24 {
            return Err(XzIndexError::NoFooter(pos.saturating_sub(12)));
        }
        let footer_at = pos - 12;
        let footer = match slice(footer_at, 12) {
            Ok(f) => f,
            Err(t) => return Ok(t),
        };
        if &footer[10..12] != FOOTER_MAGIC {
            return Err(XzIndexError::NoFooter(footer_at));
        }
        if crc32(&footer[4..10]) != u32::from_le_bytes(footer[0..4].try_into().unwrap()) {
            return Err(XzIndexError::FooterCrc(footer_at));
        }
        let backward = u32::from_le_bytes(footer[4..8].try_into().unwrap()) as u64;
        let index_len = (backward + 1) * 4;
        let index_at = footer_at
            .checked_sub(index_len)
            .ok_or(XzIndexError::Index(0, "longer than the file"))?;
        let index = match slice(index_at, index_len) {
            Ok(i) => i,
            Err(t) => return Ok(t),
        };
        let (uncompressed, blocks) =
            parse_index(index).map_err(|why| XzIndexError::Index(index_at, why))?;
        sum = sum
            .checked_add(uncompressed)
            .ok_or(XzIndexError::Overflow)?;
        let stream_at = index_at
            .checked_sub(blocks)
            .and_then(|p| p.checked_sub(12))
            .ok_or(XzIndexError::Overflow)?;
        match slice(stream_at, 6) {
            Ok(h) if h == HEADER_MAGIC => {}
            Ok(_) => return Err(XzIndexError::NoHeader(stream_at)),
            Err(t) => return Ok(t),
        }
        if stream_at == 0 {
            return Ok(Tail::Size(sum));
        }
        pos = stream_at;
    }
}

/// An index (from its indicator to its CRC32): the sum of the blocks'
/// uncompressed sizes, and the bytes the blocks take (unpadded sizes
/// rounded up to four).
fn parse_index(index: &[u8]) -> Result<(u64, u64), &'static str> {
    if index.len() < 8 || index[0] != 0 {
        return Err("no index indicator");
    }
    let body = &index[..index.len() - 4];
    let want = u32::from_le_bytes(index[index.len() - 4..].try_into().unwrap());
    if crc32(body) != want {
        return Err("CRC32 mismatch");
    }
    let mut i = 1;
    let count = varint(body, &mut i)?;
    let (mut uncompressed, mut blocks) = (0u64, 0u64);
    for _ in 0..count {
        let unpadded = varint(body, &mut i)?;
        let size = varint(body, &mut i)?;
        if unpadded == 0 {
            return Err("a block of no size");
        }
        uncompressed = uncompressed.checked_add(size).ok_or("sizes overflow")?;
        blocks = blocks
            .checked_add(unpadded.div_ceil(4) * 4)
            .ok_or("sizes overflow")?;
    }
    // Index padding: zeros up to a multiple of four.
    while i % 4 != 0 {
        if body.get(i) != Some(&0) {
            return Err("bad padding");
        }
        i += 1;
    }
    if i != body.len() {
        return Err("records do not fill it");
    }
    Ok((uncompressed, blocks))
}

/// An xz multibyte integer (7 bits a byte, low first, at most 9 bytes).
fn varint(b: &[u8], i: &mut usize) -> Result<u64, &'static str> {
    let mut v: u64 = 0;
    for n in 0..9 {
        let byte = *b.get(*i).ok_or("a record runs past the end")?;
        *i += 1;
        v |= u64::from(byte & 0x7F) << (7 * n);
        if byte & 0x80 == 0 {
            if n > 0 && byte == 0 {
                return Err("a non-minimal integer");
            }
            return Ok(v);
        }
    }
    Err("an integer longer than 9 bytes")
}

/// CRC-32 (IEEE 802.3, reflected 0xEDB88320), as xz checks its headers.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn xz(data: &[u8], threads: u32) -> Vec<u8> {
        let stream = xz2::stream::MtStreamBuilder::new()
            .threads(threads)
            .block_size(64 * 1024)
            .preset(1)
            .encoder()
            .unwrap();
        let mut w = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
        w.write_all(data).unwrap();
        w.finish().unwrap()
    }

    fn size_of(file: &[u8]) -> Result<u64, XzIndexError> {
        // Start with the footer alone, ask for more as told (the caller's way).
        let mut n = 12.min(file.len());
        loop {
            match uncompressed_size(&file[file.len() - n..], file.len() as u64)? {
                Tail::Size(s) => return Ok(s),
                Tail::NeedMore(m) => {
                    assert!(m as usize > n && m as usize <= file.len());
                    n = m as usize;
                }
            }
        }
    }

    #[test]
    fn the_index_holds_the_uncompressed_size() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for threads in [1, 2] {
            let f = xz(&data, threads);
            assert_eq!(size_of(&f).unwrap(), data.len() as u64);
        }
        assert_eq!(size_of(&xz(b"", 1)).unwrap(), 0);
        // Two streams and stream padding between and after them.
        let mut f = xz(&data, 2);
        f.extend([0u8; 8]);
        f.extend(xz(b"hello", 1));
        f.extend([0u8; 4]);
        assert_eq!(size_of(&f).unwrap(), data.len() as u64 + 5);
    }

    #[test]
    fn what_is_not_an_xz_tail_is_refused() {
        let data = vec![7u8; 100_000];
        let f = xz(&data, 1);
        assert!(matches!(
            size_of(b"not an xz file at all, no"),
            Err(XzIndexError::NoFooter(_))
        ));
        // Cut short: the footer is gone.
        assert!(size_of(&f[..f.len() - 3]).is_err());
        // A flipped bit in the footer, in the index.
        let mut g = f.clone();
        let n = g.len();
        g[n - 7] ^= 1;
        assert!(matches!(size_of(&g), Err(XzIndexError::FooterCrc(_))));
        let mut g = f.clone();
        g[n - 14] ^= 1;
        assert!(matches!(size_of(&g), Err(XzIndexError::Index(..))));
        // A stream whose head was overwritten: no header where the index
        // says; one cut off: the index runs past the file's start.
        let mut g = f.clone();
        g[..4].copy_from_slice(b"abcd");
        assert!(matches!(size_of(&g), Err(XzIndexError::NoHeader(0))));
        assert!(matches!(size_of(&f[4..]), Err(XzIndexError::Overflow)));
    }
}

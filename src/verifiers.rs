//! Stream checks for compressed artifacts: an `.xz`, `.gz` or `.zst` body
//! must decode whole (every checksum of the format) before a fill commits
//! it. Each verifier keeps none of the output; it runs on the fill's
//! verifier thread ([`crate::fill::Verifier`]).

use crate::fill::{Verifier, VerifyError};

/// Why a compressed stream fails its check (the fill's verdict names the
/// key it was fetching before it).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The decoder could not be set up (memory).
    #[error("{format} decoder: {reason}")]
    Decoder {
        format: &'static str,
        reason: String,
    },
    /// A byte of the stream does not decode (a corrupt block, a bad checksum).
    #[error("{format} stream does not decode: {reason}")]
    Corrupt {
        format: &'static str,
        reason: String,
    },
    /// The stream ends before its last frame or member does.
    #[error("{0} stream is truncated")]
    Truncated(&'static str),
    /// Not a byte came.
    #[error("{0} stream is empty")]
    Empty(&'static str),
    /// gzip's own end check failed (truncated or corrupt: flate2 does not say which).
    #[error("gzip stream is truncated or corrupt: {0}")]
    GzipEnd(std::io::Error),
}

impl StreamError {
    fn corrupt(format: &'static str, e: impl std::fmt::Display) -> StreamError {
        StreamError::Corrupt {
            format,
            reason: e.to_string(),
        }
    }
}

/// A verdict as the fill's [`Verifier`] trait takes it.
fn said<T>(r: Result<T, StreamError>) -> Result<(), VerifyError> {
    r.map(drop).map_err(Into::into)
}

/// The check of a stream whose decoder could not be set up: the fill it
/// guards fails, saying why, rather than going unchecked.
pub struct NoDecoder(pub StreamError);

impl Verifier for NoDecoder {
    fn update(&mut self, _data: &[u8]) -> Result<(), VerifyError> {
        Err(self.0.to_string().into())
    }

    fn finish(&mut self) -> Result<(), VerifyError> {
        Err(self.0.to_string().into())
    }
}

/// Checks that an `.xz` stream decodes cleanly (all its checks), keeping
/// none of the output.
pub struct XzVerifier {
    stream: xz2::stream::Stream,
    out: Vec<u8>,
}

impl XzVerifier {
    pub fn new() -> Result<XzVerifier, StreamError> {
        let stream = xz2::stream::Stream::new_stream_decoder(u64::MAX, xz2::stream::CONCATENATED)
            .map_err(|e| StreamError::Decoder {
            format: "xz",
            reason: e.to_string(),
        })?;
        Ok(XzVerifier {
            stream,
            out: vec![0; 256 * 1024],
        })
    }

    fn run(
        &mut self,
        mut input: &[u8],
        action: xz2::stream::Action,
    ) -> Result<xz2::stream::Status, StreamError> {
        loop {
            let before_in = self.stream.total_in();
            let before_out = self.stream.total_out();
            let status = self
                .stream
                .process(input, &mut self.out, action)
                .map_err(|e| StreamError::corrupt("xz", e))?;
            let used = (self.stream.total_in() - before_in) as usize;
            input = &input[used..];
            let produced = self.stream.total_out() - before_out;
            if status == xz2::stream::Status::StreamEnd {
                return Ok(status);
            }
            if input.is_empty() && produced < self.out.len() as u64 {
                return Ok(status);
            }
            if used == 0 && produced == 0 {
                return Ok(status);
            }
        }
    }
}

impl Verifier for XzVerifier {
    fn update(&mut self, data: &[u8]) -> Result<(), VerifyError> {
        said(self.run(data, xz2::stream::Action::Run))
    }

    fn finish(&mut self) -> Result<(), VerifyError> {
        said(self.end())
    }
}

impl XzVerifier {
    fn end(&mut self) -> Result<(), StreamError> {
        for _ in 0..1_000_000 {
            if self.run(&[], xz2::stream::Action::Finish)? == xz2::stream::Status::StreamEnd {
                return Ok(());
            }
        }
        Err(StreamError::Truncated("xz"))
    }
}

/// Checks that a `.gz` stream (one or more gzip members) decodes cleanly,
/// CRC and length included, keeping none of the output.
pub struct GzVerifier {
    dec: flate2::write::MultiGzDecoder<std::io::Sink>,
    seen: u64,
}

impl GzVerifier {
    pub fn new() -> GzVerifier {
        GzVerifier {
            dec: flate2::write::MultiGzDecoder::new(std::io::sink()),
            seen: 0,
        }
    }
}

impl Default for GzVerifier {
    fn default() -> Self {
        GzVerifier::new()
    }
}

impl Verifier for GzVerifier {
    fn update(&mut self, data: &[u8]) -> Result<(), VerifyError> {
        use std::io::Write;
        self.seen += data.len() as u64;
        said(
            self.dec
                .write_all(data)
                .map_err(|e| StreamError::corrupt("gzip", e)),
        )
    }

    fn finish(&mut self) -> Result<(), VerifyError> {
        if self.seen == 0 {
            return said::<()>(Err(StreamError::Empty("gzip")));
        }
        said(self.dec.try_finish().map_err(StreamError::GzipEnd))
    }
}

/// Checks that a `.zst` stream (one or more frames) decodes cleanly,
/// checksums included, keeping none of the output.
pub struct ZstdVerifier {
    dec: zstd::stream::raw::Decoder<'static>,
    out: Vec<u8>,
    /// The decoder's last hint: 0 when the last frame is complete.
    hint: usize,
    seen: u64,
}

impl ZstdVerifier {
    pub fn new() -> Result<ZstdVerifier, StreamError> {
        Ok(ZstdVerifier {
            dec: zstd::stream::raw::Decoder::new().map_err(|e| StreamError::Decoder {
                format: "zstd",
                reason: e.to_string(),
            })?,
            out: vec![0; 256 * 1024],
            hint: 0,
            seen: 0,
        })
    }

    /// Feed `data`; returns whether the last call made progress (took
    /// input or produced output).
    fn run(&mut self, data: &[u8]) -> Result<bool, StreamError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut input = InBuffer::around(data);
        loop {
            let mut output = OutBuffer::around(&mut self.out[..]);
            let before = input.pos;
            self.hint = self
                .dec
                .run(&mut input, &mut output)
                .map_err(|e| StreamError::corrupt("zstd", e))?;
            let progress = input.pos > before || output.pos() > 0;
            let full = output.pos() == output.capacity();
            if (input.pos == data.len() && !full) || !progress {
                return Ok(progress);
            }
        }
    }
}

impl Verifier for ZstdVerifier {
    fn update(&mut self, data: &[u8]) -> Result<(), VerifyError> {
        self.seen += data.len() as u64;
        said(self.run(data))
    }

    fn finish(&mut self) -> Result<(), VerifyError> {
        said(self.end())
    }
}

impl ZstdVerifier {
    fn end(&mut self) -> Result<(), StreamError> {
        // Let the decoder work off what it buffered (it may hold input it
        // has taken but not decoded), then the last frame must be whole.
        while self.hint != 0 && self.run(&[])? {}
        if self.seen == 0 {
            return Err(StreamError::Empty("zstd"));
        }
        if self.hint != 0 {
            return Err(StreamError::Truncated("zstd"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder that could not be set up fails every fill it guards.
    #[test]
    fn a_check_without_its_decoder_fails_the_fill() {
        let mut v = NoDecoder(StreamError::Decoder {
            format: "xz",
            reason: "out of memory".into(),
        });
        assert!(
            v.update(b"bytes")
                .unwrap_err()
                .to_string()
                .contains("out of memory")
        );
        assert!(v.finish().is_err());
    }
    use std::io::Write;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn verify(v: &mut dyn Verifier, data: &[u8], step: usize) -> Result<(), VerifyError> {
        for c in data.chunks(step) {
            v.update(c)?;
        }
        v.finish()
    }

    #[test]
    fn xz_verifier() {
        let raw: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let good = xz(&raw);
        for step in [1, 7, 4096, 1 << 20] {
            assert!(
                verify(&mut XzVerifier::new().unwrap(), &good, step).is_ok(),
                "{step}"
            );
        }
        let truncated = &good[..good.len() - 10];
        assert!(verify(&mut XzVerifier::new().unwrap(), truncated, 4096).is_err());
        let mut corrupt = good.clone();
        let mid = corrupt.len() / 2;
        corrupt[mid] ^= 0x55;
        assert!(verify(&mut XzVerifier::new().unwrap(), &corrupt, 4096).is_err());
        let mut two = good.clone();
        two.extend_from_slice(&good);
        assert!(verify(&mut XzVerifier::new().unwrap(), &two, 4096).is_ok());
        assert!(verify(&mut XzVerifier::new().unwrap(), b"not xz at all", 4096).is_err());
    }

    /// The same checks as for xz, for every compressed form the factory
    /// serves: whole streams pass in any chunking (concatenated too),
    /// truncated, corrupt and foreign ones fail.
    #[test]
    fn gz_and_zstd_verifiers() {
        let raw: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let gz = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&raw).unwrap();
            e.finish().unwrap()
        };
        // With a content checksum, as the zstd CLI writes by default
        // (without one, a flipped literal byte is undetectable by design).
        let zst = {
            let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
            e.include_checksum(true).unwrap();
            e.write_all(&raw).unwrap();
            e.finish().unwrap()
        };
        for (name, good) in [("a.raw.gz", gz), ("a.raw.zst", zst)] {
            let v = || crate::factory::verifier_for(name).unwrap();
            for step in [1, 7, 4096, 1 << 20] {
                let r = verify(&mut *v(), &good, step);
                assert!(r.is_ok(), "{name} {step}: {r:?}");
            }
            let mut two = good.clone();
            two.extend_from_slice(&good);
            assert!(verify(&mut *v(), &two, 4096).is_ok(), "{name} twice");
            for cut in [1, 10, good.len() / 2] {
                let truncated = &good[..good.len() - cut];
                assert!(
                    verify(&mut *v(), truncated, 4096).is_err(),
                    "{name} cut {cut}"
                );
            }
            let mut corrupt = good.clone();
            let mid = corrupt.len() / 2;
            corrupt[mid] ^= 0x55;
            assert!(verify(&mut *v(), &corrupt, 4096).is_err(), "{name} corrupt");
            assert!(verify(&mut *v(), b"", 4096).is_err(), "{name} empty");
            assert!(
                verify(&mut *v(), b"not compressed at all", 4096).is_err(),
                "{name} foreign"
            );
        }
        assert!(crate::factory::verifier_for("a.iso").is_none());
        assert!(crate::factory::verifier_for("a.raw.xz").is_some());
    }
}

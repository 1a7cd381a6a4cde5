//! What several fuzz targets share: cutting one input into the several files a reader takes.

/// Splits `bytes` into a part whose length the first two bytes give (little-endian, cut to
/// what is there) and the rest after it; `None` for an input shorter than two bytes. Seeds
/// are written the same way, so a seed of real files splits exactly where they meet.
pub fn split_by_length(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (length, rest) = bytes.split_first_chunk::<2>()?;
    let at = usize::from(u16::from_le_bytes(*length)).min(rest.len());
    Some(rest.split_at(at))
}

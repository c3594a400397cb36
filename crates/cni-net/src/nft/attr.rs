//! Netlink attribute (TLV) encoding and decoding.
//!
//! An attribute is `{u16 len, u16 type}` followed by its payload, padded to 4 bytes.
//! nf_tables puts every integer on the wire in network byte order, so the helpers here
//! are big-endian; the data of `cmp`/`immediate` is raw bytes and is left untouched.

use super::error::NftError;
use super::sys::{NLA_F_NESTED, NLA_TYPE_MASK};

/// Rounds up to the 4-byte netlink alignment.
pub(crate) const fn align4(len: usize) -> usize {
    (len + 3) & !3
}

/// Appends attributes to a message buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct AttrWriter {
    pub(crate) buf: Vec<u8>,
}

impl AttrWriter {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn put(&mut self, kind: u16, payload: &[u8]) {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.pad();
    }

    pub(crate) fn put_u32(&mut self, kind: u16, value: u32) {
        self.put(kind, &value.to_be_bytes());
    }

    pub(crate) fn put_u64(&mut self, kind: u16, value: u64) {
        self.put(kind, &value.to_be_bytes());
    }

    /// Strings go out NUL-terminated, as libmnl's `mnl_attr_put_strz` does.
    pub(crate) fn put_str(&mut self, kind: u16, value: &str) {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.put(kind, &bytes);
    }

    /// Writes a nested attribute whose content `fill` produces.
    pub(crate) fn nest(&mut self, kind: u16, fill: impl FnOnce(&mut AttrWriter)) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn pad(&mut self) {
        let padded = align4(self.buf.len());
        self.buf.resize(padded, 0);
    }
}

/// One decoded attribute: its type (flags stripped) and payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attr<'a> {
    pub(crate) kind: u16,
    pub(crate) payload: &'a [u8],
}

impl<'a> Attr<'a> {
    pub(crate) fn u32(&self) -> Result<u32, NftError> {
        let bytes: [u8; 4] = self.payload.try_into().map_err(|_| self.bad_len(4))?;
        Ok(u32::from_be_bytes(bytes))
    }

    pub(crate) fn u64(&self) -> Result<u64, NftError> {
        let bytes: [u8; 8] = self.payload.try_into().map_err(|_| self.bad_len(8))?;
        Ok(u64::from_be_bytes(bytes))
    }

    /// A string attribute, with the trailing NUL (if any) removed.
    pub(crate) fn string(&self) -> Result<String, NftError> {
        let bytes = self.payload.split(|b| *b == 0).next().unwrap_or_default();
        String::from_utf8(bytes.to_vec())
            .map_err(|_| NftError::Malformed(format!("attribute {} is not UTF-8", self.kind)))
    }

    pub(crate) fn nested(&self) -> AttrIter<'a> {
        AttrIter::new(self.payload)
    }

    fn bad_len(&self, want: usize) -> NftError {
        NftError::Malformed(format!(
            "attribute {} has {} bytes, expected {want}",
            self.kind,
            self.payload.len()
        ))
    }
}

/// Iterates over the attributes in a byte slice; a truncated attribute ends the walk with
/// an error item.
pub(crate) struct AttrIter<'a> {
    rest: &'a [u8],
}

impl<'a> AttrIter<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Result<Attr<'a>, NftError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(NftError::Malformed(format!("attribute {kind} claims {len} bytes"))));
        }
        let payload = &self.rest[4..len];
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        Some(Ok(Attr { kind, payload }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_is_nul_terminated_and_padded() {
        let mut w = AttrWriter::new();
        w.put_str(1, "abc");
        assert_eq!(w.buf, [8, 0, 1, 0, b'a', b'b', b'c', 0]);
        w.put_str(2, "abcd");
        assert_eq!(w.buf.len(), 8 + 12);
        assert_eq!(&w.buf[8..12], &[9, 0, 2, 0]);
    }

    #[test]
    fn nested_length_covers_children_and_sets_flag() {
        let mut w = AttrWriter::new();
        w.nest(4, |w| w.put_u32(1, 0x0102_0304));
        assert_eq!(w.buf, [12, 0, 4, 0x80, 8, 0, 1, 0, 1, 2, 3, 4]);
        let outer: Vec<_> = AttrIter::new(&w.buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(outer.len(), 1);
        assert_eq!(outer[0].kind, 4);
        let inner = outer[0].nested().next().unwrap().unwrap();
        assert_eq!(inner.u32().unwrap(), 0x0102_0304);
    }

    #[test]
    fn truncated_attribute_is_an_error() {
        let bytes = [20u8, 0, 1, 0, 0, 0];
        let mut it = AttrIter::new(&bytes);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}

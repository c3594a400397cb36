//! Userdata TLVs as libnftnl writes them: `{u8 type, u8 len, value}` with no padding.
//! `nft` reads a comment from type 0 of a rule's, chain's or table's userdata, stored with
//! its terminating NUL.

/// The longest comment `nft` accepts (`NFT_USERDATA_MAXLEN` bounds the whole blob).
pub const MAX_COMMENT_LEN: usize = 128;

/// Encodes a userdata blob holding one comment TLV.
pub(crate) fn encode_comment(kind: u8, comment: &str) -> Vec<u8> {
    let bytes = comment.as_bytes();
    let bytes = &bytes[..bytes.len().min(MAX_COMMENT_LEN - 1)];
    let mut out = Vec::with_capacity(bytes.len() + 3);
    out.push(kind);
    out.push((bytes.len() + 1) as u8);
    out.extend_from_slice(bytes);
    out.push(0);
    out
}

/// Appends a TLV holding a host-order u32 (how libnftnl stores set byte orders).
pub(crate) fn push_u32(blob: &mut Vec<u8>, kind: u8, value: u32) {
    blob.push(kind);
    blob.push(4);
    blob.extend_from_slice(&value.to_ne_bytes());
}

/// Finds the TLV of `kind` in a userdata blob and reads it as a string.
pub(crate) fn find_string(blob: &[u8], kind: u8) -> Option<String> {
    let mut rest = blob;
    while rest.len() >= 2 {
        let (tlv_kind, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if tlv_kind == kind {
            let text = value.split(|b| *b == 0).next().unwrap_or_default();
            return String::from_utf8(text.to_vec()).ok();
        }
        rest = &rest[2 + len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_round_trip_and_layout() {
        let blob = encode_comment(0, "ctr abc");
        assert_eq!(blob[..2], [0, 8]);
        assert_eq!(blob.last(), Some(&0));
        assert_eq!(find_string(&blob, 0).as_deref(), Some("ctr abc"));
        assert_eq!(find_string(&blob, 1), None);
    }

    #[test]
    fn skips_other_tlvs_and_survives_truncation() {
        let mut blob = vec![1, 2, 9, 9];
        blob.extend(encode_comment(0, "x"));
        assert_eq!(find_string(&blob, 0).as_deref(), Some("x"));
        assert_eq!(find_string(&[0, 10, 1], 0), None);
    }
}

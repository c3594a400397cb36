//! x_tables matches inside nf_tables rules, as `iptables-nft` writes them.
//!
//! Rules in a table that iptables-nft owns (e.g. `ip filter`) must use the expressions
//! iptables-nft itself produces, or `iptables-save`, `iptables -L` and other programs'
//! iptables calls stop understanding the table. iptables-nft 1.8 encodes `-m comment` and
//! `-m conntrack` as `match` expressions (nft_compat) carrying the x_tables match's own
//! binary info; these helpers build exactly those expressions and read a comment back.

use super::attr::{AttrIter, AttrWriter};
use super::expr::Expr;

const NFTA_MATCH_NAME: u16 = 1;
const NFTA_MATCH_REV: u16 = 2;
const NFTA_MATCH_INFO: u16 = 3;

/// `struct xt_comment_info`: the comment, NUL-padded to 256 bytes.
const COMMENT_INFO_LEN: usize = 256;
/// The longest comment the match holds (its terminating NUL takes the last byte).
pub const MAX_XT_COMMENT_LEN: usize = COMMENT_INFO_LEN - 1;

/// `struct xt_conntrack_mtinfo3` (164 bytes) rounded up to x_tables' 8-byte alignment,
/// the size the kernel insists on.
const CONNTRACK3_INFO_LEN: usize = 168;
/// Offsets of `match_flags` and `state_mask` in `xt_conntrack_mtinfo3`: after eight
/// 16-byte addresses/masks, two u32 expiry bounds, the u16 protocol and four u16 ports.
const CONNTRACK3_MATCH_FLAGS: usize = 146;
const CONNTRACK3_STATE_MASK: usize = 150;
/// `XT_CONNTRACK_STATE`: the match tests `state_mask`.
const XT_CONNTRACK_STATE: u16 = 1;

/// Conntrack states of `-m conntrack --ctstate` (`XT_CONNTRACK_STATE_*`).
pub mod xt_ct_state {
    /// ESTABLISHED.
    pub const ESTABLISHED: u16 = 1 << 1;
    /// RELATED.
    pub const RELATED: u16 = 1 << 2;
    /// NEW.
    pub const NEW: u16 = 1 << 3;
    /// DNAT: the connection's destination was translated.
    pub const DNAT: u16 = 1 << 7;
}

/// A `match` expression: the x_tables match `name` at revision `rev` with its info blob.
fn xt_match(name: &str, rev: u32, info: &[u8]) -> Expr {
    let mut w = AttrWriter::new();
    w.put_str(NFTA_MATCH_NAME, name);
    w.put_u32(NFTA_MATCH_REV, rev);
    w.put(NFTA_MATCH_INFO, info);
    Expr::Unknown { name: "match".into(), data: w.buf }
}

/// `-m comment --comment <text>` (text longer than the match holds is cut at a character
/// boundary).
pub fn comment_match(text: &str) -> Expr {
    let mut end = text.len().min(MAX_XT_COMMENT_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut info = vec![0u8; COMMENT_INFO_LEN];
    info[..end].copy_from_slice(&text.as_bytes()[..end]);
    xt_match("comment", 0, &info)
}

/// `-m conntrack --ctstate <states>` (revision 3, as iptables 1.8 writes it).
pub fn conntrack_state_match(states: u16) -> Expr {
    let mut info = vec![0u8; CONNTRACK3_INFO_LEN];
    info[CONNTRACK3_MATCH_FLAGS..CONNTRACK3_MATCH_FLAGS + 2]
        .copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    info[CONNTRACK3_STATE_MASK..CONNTRACK3_STATE_MASK + 2].copy_from_slice(&states.to_ne_bytes());
    xt_match("conntrack", 3, &info)
}

/// The match name and info of a `match` expression as the kernel lists it.
fn match_parts(expr: &Expr) -> Option<(String, &[u8])> {
    let Expr::Unknown { name, data } = expr else { return None };
    if name != "match" {
        return None;
    }
    let (mut match_name, mut info) = (None, None);
    for attr in AttrIter::new(data) {
        let attr = attr.ok()?;
        match attr.kind {
            NFTA_MATCH_NAME => match_name = attr.string().ok(),
            NFTA_MATCH_INFO => info = Some(attr.payload),
            _ => {}
        }
    }
    Some((match_name?, info?))
}

/// The text of a `-m comment` match expression, if `expr` is one.
pub fn comment_of(expr: &Expr) -> Option<String> {
    let (name, info) = match_parts(expr)?;
    if name != "comment" {
        return None;
    }
    let text = info.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8(text.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_reads_back_and_is_cut_to_what_the_match_holds() {
        assert_eq!(comment_of(&comment_match("cni-rs x")).as_deref(), Some("cni-rs x"));
        let long = "é".repeat(200);
        let back = comment_of(&comment_match(&long)).unwrap();
        assert!(back.len() <= MAX_XT_COMMENT_LEN && long.starts_with(&back));
        assert_eq!(comment_of(&conntrack_state_match(xt_ct_state::DNAT)), None);
    }

    #[test]
    fn conntrack_info_has_the_size_the_kernel_checks() {
        let expr = conntrack_state_match(xt_ct_state::DNAT);
        let (_, info) = match_parts(&expr).unwrap();
        assert_eq!(info.len(), CONNTRACK3_INFO_LEN);
        assert_eq!(info[CONNTRACK3_STATE_MASK], 0x80);
    }
}

//! Rules: a list of expressions in a chain, plus the comment that identifies their owner.

use super::attr::AttrWriter;
use super::data::Family;
use super::error::NftError;
use super::expr::Expr;
use super::msg::Incoming;
use super::sys::*;
use super::udata;

/// A rule to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Family of the table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Chain name.
    pub chain: String,
    /// The expressions, evaluated in order.
    pub exprs: Vec<Expr>,
    /// Comment stored as rule userdata; `nft list` shows it. Plugins tag rules with the
    /// container ID here so DEL can find exactly its own rules.
    pub comment: Option<String>,
}

impl Rule {
    /// An empty rule for a chain.
    pub fn new(family: Family, table: impl Into<String>, chain: impl Into<String>) -> Self {
        Self { family, table: table.into(), chain: chain.into(), exprs: Vec::new(), comment: None }
    }

    /// `position`: the handle of the rule to append after (add) or insert before (insert).
    pub(crate) fn encode(&self, w: &mut AttrWriter, position: Option<u64>) {
        w.put_str(NFTA_RULE_TABLE, &self.table);
        w.put_str(NFTA_RULE_CHAIN, &self.chain);
        if let Some(handle) = position {
            w.put_u64(NFTA_RULE_POSITION, handle);
        }
        w.nest(NFTA_RULE_EXPRESSIONS, |w| {
            for expr in &self.exprs {
                expr.encode(w);
            }
        });
        if let Some(comment) = &self.comment {
            w.put(NFTA_RULE_USERDATA, &udata::encode_comment(NFTNL_UDATA_RULE_COMMENT, comment));
        }
    }
}

/// A rule as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    /// Kernel handle, for deleting or positioning.
    pub handle: u64,
    /// The rule itself (expressions as the kernel returns them, comment from userdata).
    pub rule: Rule,
}

impl ListedRule {
    pub(crate) fn decode(msg: &Incoming<'_>) -> Result<Self, NftError> {
        let mut rule = Rule::new(Family::from_raw(u32::from(msg.family())), "", "");
        let mut handle = None;
        for attr in msg.attrs() {
            let attr = attr?;
            match attr.kind {
                NFTA_RULE_TABLE => rule.table = attr.string()?,
                NFTA_RULE_CHAIN => rule.chain = attr.string()?,
                NFTA_RULE_HANDLE => handle = Some(attr.u64()?),
                NFTA_RULE_EXPRESSIONS => {
                    for elem in attr.nested() {
                        rule.exprs.push(Expr::decode(&elem?)?);
                    }
                }
                NFTA_RULE_USERDATA => {
                    rule.comment = udata::find_string(attr.payload, NFTNL_UDATA_RULE_COMMENT);
                }
                _ => {}
            }
        }
        let handle = handle.ok_or_else(|| NftError::Malformed("rule without handle".into()))?;
        Ok(Self { handle, rule })
    }
}

/// Encodes the attributes that name one rule (for delete).
pub(crate) fn encode_rule_ref(w: &mut AttrWriter, table: &str, chain: &str, handle: u64) {
    w.put_str(NFTA_RULE_TABLE, table);
    w.put_str(NFTA_RULE_CHAIN, chain);
    w.put_u64(NFTA_RULE_HANDLE, handle);
}

/// Encodes the attributes that select a chain's rules (for flush and dump).
pub(crate) fn encode_chain_filter(w: &mut AttrWriter, table: &str, chain: &str) {
    w.put_str(NFTA_RULE_TABLE, table);
    w.put_str(NFTA_RULE_CHAIN, chain);
}

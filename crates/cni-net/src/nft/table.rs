//! Tables: the top-level containers of chains and sets.

use super::attr::AttrWriter;
pub use super::data::Family;
use super::sys::*;
use super::udata;

/// A table to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Address family.
    pub family: Family,
    /// Table name.
    pub name: String,
    /// Comment stored as userdata (`nft list` shows it).
    pub comment: Option<String>,
}

impl Table {
    /// A table without comment.
    pub fn new(family: Family, name: impl Into<String>) -> Self {
        Self { family, name: name.into(), comment: None }
    }

    /// Adds a comment.
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.comment = Some(comment.into());
        self
    }

    pub(crate) fn encode(&self, w: &mut AttrWriter) {
        w.put_str(NFTA_TABLE_NAME, &self.name);
        w.put_u32(NFTA_TABLE_FLAGS, 0);
        if let Some(comment) = &self.comment {
            w.put(NFTA_TABLE_USERDATA, &udata::encode_comment(NFTNL_UDATA_TABLE_COMMENT, comment));
        }
    }
}

/// Encodes the attributes that name a table (for delete/get).
pub(crate) fn encode_table_name(w: &mut AttrWriter, name: &str) {
    w.put_str(NFTA_TABLE_NAME, name);
}

/// A table as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// Address family.
    pub family: Family,
    /// Table name.
    pub name: String,
    /// Kernel handle.
    pub handle: u64,
}

impl TableInfo {
    pub(crate) fn decode(msg: &super::msg::Incoming<'_>) -> Result<Self, super::NftError> {
        let mut info =
            TableInfo { family: Family::from_raw(u32::from(msg.family())), name: String::new(), handle: 0 };
        for attr in msg.attrs() {
            let attr = attr?;
            match attr.kind {
                NFTA_TABLE_NAME => info.name = attr.string()?,
                NFTA_TABLE_HANDLE => info.handle = attr.u64()?,
                _ => {}
            }
        }
        Ok(info)
    }
}

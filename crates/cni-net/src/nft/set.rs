//! Sets and maps, named and anonymous, and their elements.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::attr::AttrWriter;
use super::data::{put_value, put_verdict, Family, Verdict};
use super::sys::*;
use super::udata;

/// The data types `nft` knows set keys by (ids from nftables' `datatype.h`) that CNI
/// plugins need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    /// `ipv4_addr`
    Ipv4Addr,
    /// `ipv6_addr`
    Ipv6Addr,
    /// `inet_proto` (one byte)
    InetProto,
    /// `inet_service` (a port, network byte order)
    InetService,
    /// `ether_addr`
    EtherAddr,
    /// `mark` (host byte order)
    Mark,
    /// `ifname` (16 bytes, NUL-padded)
    IfName,
}

impl KeyType {
    /// nftables' datatype id.
    pub fn type_id(self) -> u32 {
        match self {
            KeyType::Ipv4Addr => 7,
            KeyType::Ipv6Addr => 8,
            KeyType::EtherAddr => 9,
            KeyType::InetProto => 12,
            KeyType::InetService => 13,
            KeyType::Mark => 19,
            KeyType::IfName => 41,
        }
    }

    /// nftables' byte order of the type: host order for `ifname` and `mark`, network
    /// order for the rest. `nft` needs it in the set's userdata to print elements.
    fn byteorder(self) -> u32 {
        const BYTEORDER_HOST_ENDIAN: u32 = 1;
        const BYTEORDER_BIG_ENDIAN: u32 = 2;
        match self {
            KeyType::IfName | KeyType::Mark => BYTEORDER_HOST_ENDIAN,
            _ => BYTEORDER_BIG_ENDIAN,
        }
    }

    /// Size of a value in bytes.
    pub fn byte_len(self) -> u32 {
        match self {
            KeyType::Ipv4Addr | KeyType::Mark => 4,
            KeyType::Ipv6Addr | KeyType::IfName => 16,
            KeyType::EtherAddr => 6,
            KeyType::InetProto => 1,
            KeyType::InetService => 2,
        }
    }
}

/// Bits of a concatenated type id per component (nftables' `TYPE_BITS`).
const CONCAT_TYPE_BITS: u32 = 6;

/// The type id and length of a (possibly concatenated) key. In a concatenation every
/// component occupies whole 4-byte registers.
fn key_spec(parts: &[KeyType]) -> (u32, u32) {
    if let [single] = parts {
        return (single.type_id(), single.byte_len());
    }
    let type_id = parts.iter().fold(0, |acc, t| (acc << CONCAT_TYPE_BITS) | t.type_id());
    let len = parts.iter().map(|t| t.byte_len().div_ceil(4) * 4).sum();
    (type_id, len)
}

/// A value of a key component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    /// An IPv4 address.
    Ipv4(Ipv4Addr),
    /// An IPv6 address.
    Ipv6(Ipv6Addr),
    /// A protocol number (6 tcp, 17 udp, ...).
    Proto(u8),
    /// A port.
    Port(u16),
    /// A MAC address.
    Ether([u8; 6]),
    /// A packet mark.
    Mark(u32),
    /// An interface name.
    IfName(String),
}

impl KeyValue {
    /// The bytes as they appear in a register.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            KeyValue::Ipv4(a) => a.octets().to_vec(),
            KeyValue::Ipv6(a) => a.octets().to_vec(),
            KeyValue::Proto(p) => vec![*p],
            KeyValue::Port(p) => p.to_be_bytes().to_vec(),
            KeyValue::Ether(m) => m.to_vec(),
            KeyValue::Mark(m) => m.to_ne_bytes().to_vec(),
            KeyValue::IfName(name) => ifname_bytes(name).to_vec(),
        }
    }
}

/// An interface name as nf_tables compares it: NUL-padded to `IFNAMSIZ`.
pub fn ifname_bytes(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let len = name.len().min(15);
    out[..len].copy_from_slice(&name.as_bytes()[..len]);
    out
}

/// Joins key components; in a concatenation each one is padded to 4 bytes.
pub fn concat_key(parts: &[KeyValue]) -> Vec<u8> {
    if let [single] = parts {
        return single.bytes();
    }
    let mut out = Vec::new();
    for part in parts {
        let bytes = part.bytes();
        out.extend_from_slice(&bytes);
        out.resize(out.len() + (bytes.len().div_ceil(4) * 4 - bytes.len()), 0);
    }
    out
}

/// What a map maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapData {
    /// A verdict map (`vmap`).
    Verdict,
    /// A data map; several types make concatenated values (e.g. address . port for
    /// `dnat to ... map`).
    Value(Vec<KeyType>),
}

/// A set or map to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// Family of the table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Set name; for anonymous sets the kernel fills in `%d`.
    pub name: String,
    /// Key components (more than one makes a concatenation).
    pub key: Vec<KeyType>,
    /// Set for maps.
    pub data: Option<MapData>,
    /// Extra `NFT_SET_*` flags (e.g. interval, timeout).
    pub extra_flags: u32,
    /// Anonymous (bound to the one rule that uses it, constant).
    pub anonymous: bool,
}

/// `NFT_SET_*` flags.
pub mod set_flags {
    /// Elements are ranges.
    pub const INTERVAL: u32 = 0x4;
    /// Elements may carry a timeout.
    pub const TIMEOUT: u32 = 0x10;
}

impl Set {
    /// A named set, which outlives rules and can be updated.
    pub fn named(family: Family, table: impl Into<String>, name: impl Into<String>, key: &[KeyType]) -> Self {
        Self {
            family,
            table: table.into(),
            name: name.into(),
            key: key.to_vec(),
            data: None,
            extra_flags: 0,
            anonymous: false,
        }
    }

    /// An anonymous constant set, created in the same batch as the rule that uses it.
    pub fn anonymous(family: Family, table: impl Into<String>, key: &[KeyType]) -> Self {
        Self { anonymous: true, ..Self::named(family, table, "__set%d", key) }
    }

    /// Makes this a map to `data`.
    pub fn map_to(mut self, data: MapData) -> Self {
        self.data = Some(data);
        self
    }

    fn flags(&self) -> u32 {
        let mut flags = self.extra_flags;
        if self.anonymous {
            flags |= NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;
        }
        if self.data.is_some() {
            flags |= NFT_SET_MAP;
        }
        // The kernel wants the concatenation flag exactly when field lengths are given.
        if self.key.len() > 1 {
            flags |= NFT_SET_CONCAT;
        }
        flags
    }

    pub(crate) fn encode(&self, w: &mut AttrWriter, set_id: u32) {
        let (key_type, key_len) = key_spec(&self.key);
        w.put_str(NFTA_SET_TABLE, &self.table);
        w.put_str(NFTA_SET_NAME, &self.name);
        w.put_u32(NFTA_SET_FLAGS, self.flags());
        w.put_u32(NFTA_SET_KEY_TYPE, key_type);
        w.put_u32(NFTA_SET_KEY_LEN, key_len);
        match &self.data {
            Some(MapData::Verdict) => w.put_u32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT),
            Some(MapData::Value(types)) => {
                let (data_type, data_len) = key_spec(types);
                w.put_u32(NFTA_SET_DATA_TYPE, data_type);
                w.put_u32(NFTA_SET_DATA_LEN, data_len);
            }
            None => {}
        }
        if self.key.len() > 1 {
            // Per-field lengths let the kernel pick a concatenation-aware backend.
            w.nest(NFTA_SET_DESC, |w| {
                w.nest(NFTA_SET_DESC_CONCAT, |w| {
                    for part in &self.key {
                        w.nest(NFTA_LIST_ELEM, |w| w.put_u32(NFTA_SET_FIELD_LEN, part.byte_len()));
                    }
                });
            });
        }
        w.put_u32(NFTA_SET_ID, set_id);
        let mut userdata = Vec::new();
        if let [single] = self.key[..] {
            udata::push_u32(&mut userdata, NFTNL_UDATA_SET_KEYBYTEORDER, single.byteorder());
        }
        if let Some(MapData::Value(types)) = &self.data {
            if let [single] = types[..] {
                udata::push_u32(&mut userdata, NFTNL_UDATA_SET_DATABYTEORDER, single.byteorder());
            }
        }
        if !userdata.is_empty() {
            w.put(NFTA_SET_USERDATA, &userdata);
        }
    }
}

// Set flags from nf_tables.h used above.
const NFT_SET_ANONYMOUS: u32 = 0x1;
const NFT_SET_CONSTANT: u32 = 0x2;
const NFT_SET_MAP: u32 = 0x8;
const NFT_SET_CONCAT: u32 = 0x80;
const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;

/// Names a set for lookups and element changes. `id` ties a reference to a set created
/// earlier in the same batch (required for anonymous sets, whose name is not known yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRef {
    /// Family of the table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Set name.
    pub name: String,
    /// Transaction id of a set created in the same batch.
    pub id: Option<u32>,
}

impl SetRef {
    /// Refers to an existing named set.
    pub fn named(family: Family, table: impl Into<String>, name: impl Into<String>) -> Self {
        Self { family, table: table.into(), name: name.into(), id: None }
    }
}

/// One element of a set or map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElement {
    /// Key bytes (see [`concat_key`]).
    pub key: Vec<u8>,
    /// For interval sets with concatenations: the range end.
    pub key_end: Option<Vec<u8>>,
    /// For maps: the value.
    pub data: Option<ElementData>,
    /// Marks the end of an interval (rbtree interval sets).
    pub interval_end: bool,
}

/// What a map element maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElementData {
    /// A verdict (verdict maps).
    Verdict(Verdict),
    /// A value (data maps).
    Value(Vec<u8>),
}

impl SetElement {
    /// An element with the given key components.
    pub fn new(key: &[KeyValue]) -> Self {
        Self { key: concat_key(key), key_end: None, data: None, interval_end: false }
    }

    /// Maps this element to a verdict.
    pub fn with_verdict(mut self, verdict: Verdict) -> Self {
        self.data = Some(ElementData::Verdict(verdict));
        self
    }

    /// Maps this element to a value.
    pub fn with_value(mut self, value: &[KeyValue]) -> Self {
        self.data = Some(ElementData::Value(concat_key(value)));
        self
    }

    fn encode(&self, w: &mut AttrWriter) {
        w.nest(NFTA_LIST_ELEM, |w| {
            put_value(w, NFTA_SET_ELEM_KEY, &self.key);
            if let Some(end) = &self.key_end {
                put_value(w, NFTA_SET_ELEM_KEY_END, end);
            }
            match &self.data {
                Some(ElementData::Verdict(v)) => put_verdict(w, NFTA_SET_ELEM_DATA, v),
                Some(ElementData::Value(v)) => put_value(w, NFTA_SET_ELEM_DATA, v),
                None => {}
            }
            if self.interval_end {
                w.put_u32(NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
            }
        });
    }
}

/// Encodes an element list message body.
pub(crate) fn encode_elements(w: &mut AttrWriter, set: &SetRef, elements: &[SetElement]) {
    w.put_str(NFTA_SET_ELEM_LIST_TABLE, &set.table);
    w.put_str(NFTA_SET_ELEM_LIST_SET, &set.name);
    if let Some(id) = set.id {
        w.put_u32(NFTA_SET_ELEM_LIST_SET_ID, id);
    }
    w.nest(NFTA_SET_ELEM_LIST_ELEMENTS, |w| {
        for element in elements {
            element.encode(w);
        }
    });
}

/// Encodes the attributes that name a set (for delete).
pub(crate) fn encode_set_name(w: &mut AttrWriter, table: &str, name: &str) {
    w.put_str(NFTA_SET_TABLE, table);
    w.put_str(NFTA_SET_NAME, name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenated_key_pads_each_component() {
        let key = concat_key(&[KeyValue::Ipv4(Ipv4Addr::new(10, 0, 0, 1)), KeyValue::Port(80)]);
        assert_eq!(key, [10, 0, 0, 1, 0, 80, 0, 0]);
        assert_eq!(key_spec(&[KeyType::Ipv4Addr, KeyType::InetService]), ((7 << 6) | 13, 8));
        assert_eq!(key_spec(&[KeyType::InetService]), (13, 2));
    }

    #[test]
    fn ifname_is_nul_padded() {
        let b = ifname_bytes("eth0");
        assert_eq!(&b[..5], b"eth0\0");
        assert_eq!(b.len(), 16);
    }
}

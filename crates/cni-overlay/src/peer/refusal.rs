//! Why a node record was refused: the rule it broke (a closed set, the label the refusals
//! metric counts it under) and a message for the log saying how.

use std::fmt;

/// The part of a record a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The key is not a subnet key under the prefix.
    Key,
    /// The key's subnet: not a first address, outside `--network`, another length, or
    /// overlapping this node's own.
    Subnet,
    /// The IPv6 subnet is not the one paired with the key's.
    Subnet6,
    /// The record is not bound to a lease.
    NoLease,
    /// The record is over [`super::MAX_RECORD_BYTES`].
    TooLarge,
    /// The record is not the JSON of a node record.
    Malformed,
    NodeName,
    /// The record names this node.
    OwnNode,
    Underlay,
    VtepMac,
    WgPublicKey,
    WgPort,
}

impl Rule {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Rule::Key => "key",
            Rule::Subnet => "subnet",
            Rule::Subnet6 => "subnet6",
            Rule::NoLease => "no_lease",
            Rule::TooLarge => "too_large",
            Rule::Malformed => "malformed",
            Rule::NodeName => "node_name",
            Rule::OwnNode => "own_node",
            Rule::Underlay => "underlay",
            Rule::VtepMac => "vtep_mac",
            Rule::WgPublicKey => "wg_public_key",
            Rule::WgPort => "wg_port",
        }
    }

    /// A refusal under this rule.
    pub fn refuse(self, message: impl Into<String>) -> Refusal {
        Refusal { rule: self, message: message.into() }
    }
}

/// A refused record: the rule and what about the record broke it (quoting the record,
/// which is untrusted: log it escaped, never use it as a label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: Rule,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

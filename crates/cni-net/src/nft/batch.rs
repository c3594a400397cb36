//! Batches: several nf_tables changes applied atomically (all or nothing).

use super::attr::AttrWriter;
use super::chain::{encode_chain_name, Chain};
use super::data::Family;
use super::msg::nft_type;
use super::rule::{encode_chain_filter, encode_rule_ref, Rule};
use super::set::{encode_elements, encode_set_name, Set, SetElement, SetRef};
use super::sys::*;
use super::table::{encode_table_name, Table};

/// One message of a batch.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    pub(crate) msg_type: u16,
    pub(crate) flags: u16,
    pub(crate) family: Family,
    pub(crate) attrs: Vec<u8>,
    /// For error messages: what this operation was meant to do.
    pub(crate) description: String,
}

/// A list of changes committed together with [`NftClient::commit`](super::NftClient::commit).
///
/// Each `add_*`/`delete_*` call returns the index of its operation, which errors and
/// [`CommitOutcome::rule_handle`](super::CommitOutcome::rule_handle) refer to.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub(crate) ops: Vec<Operation>,
    next_set_id: u32,
    /// Whether new rules are echoed back (`NLM_F_ECHO`), for their handles.
    echo_rules: bool,
}

impl Batch {
    /// An empty batch. The rules it adds are not echoed back, so the commit reports no
    /// handles for them: an echo makes the kernel encode every new rule whole (and the
    /// commit read and decode it) for a handle that the plugins, which delete a
    /// container's rules with its chain, never use. [`Batch::with_rule_handles`] asks for
    /// them.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch whose new rules the kernel echoes back, so that
    /// [`CommitOutcome::rule_handle`](super::CommitOutcome::rule_handle) reports their
    /// handles.
    pub fn with_rule_handles() -> Self {
        Self { echo_rules: true, ..Self::default() }
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if there is nothing to commit.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Whether the batch deletes anything (tables, chains, rules, sets or elements): only
    /// such commits leave the kernel destruction work to finish after an RCU grace period.
    pub(crate) fn removes_anything(&self) -> bool {
        const REMOVALS: [u16; 8] = [
            NFT_MSG_DELTABLE,
            NFT_MSG_DELCHAIN,
            NFT_MSG_DELRULE,
            NFT_MSG_DELSET,
            NFT_MSG_DELSETELEM,
            NFT_MSG_DESTROYTABLE,
            NFT_MSG_DESTROYCHAIN,
            NFT_MSG_DESTROYSET,
        ];
        self.ops.iter().any(|op| REMOVALS.iter().any(|&msg| op.msg_type == nft_type(msg)))
    }

    fn push(
        &mut self,
        msg: u16,
        flags: u16,
        family: Family,
        description: String,
        fill: impl FnOnce(&mut AttrWriter),
    ) -> usize {
        let mut w = AttrWriter::new();
        fill(&mut w);
        self.ops.push(Operation { msg_type: nft_type(msg), flags, family, attrs: w.buf, description });
        self.ops.len() - 1
    }

    /// Creates a table, or leaves an existing one as it is.
    pub fn add_table(&mut self, table: &Table) -> usize {
        let what = format!("add table {} {}", table.family.nft_name(), table.name);
        self.push(NFT_MSG_NEWTABLE, NLM_F_CREATE, table.family, what, |w| table.encode(w))
    }

    /// Creates a table; fails with `EEXIST` if it exists.
    pub fn create_table(&mut self, table: &Table) -> usize {
        let what = format!("create table {} {}", table.family.nft_name(), table.name);
        let flags = NLM_F_CREATE | NLM_F_EXCL;
        self.push(NFT_MSG_NEWTABLE, flags, table.family, what, |w| table.encode(w))
    }

    /// Deletes a table with everything in it; fails with `ENOENT` if it does not exist.
    pub fn delete_table(&mut self, family: Family, name: &str) -> usize {
        let what = format!("delete table {} {name}", family.nft_name());
        self.push(NFT_MSG_DELTABLE, 0, family, what, |w| encode_table_name(w, name))
    }

    /// Deletes a table if it exists (kernel 6.3 or newer).
    pub fn destroy_table(&mut self, family: Family, name: &str) -> usize {
        let what = format!("destroy table {} {name}", family.nft_name());
        self.push(NFT_MSG_DESTROYTABLE, 0, family, what, |w| encode_table_name(w, name))
    }

    /// Creates a chain, or leaves an existing one (a base chain's hook must match).
    pub fn add_chain(&mut self, chain: &Chain) -> usize {
        let what = format!("add chain {}", chain_path(chain.family, &chain.table, &chain.name));
        self.push(NFT_MSG_NEWCHAIN, NLM_F_CREATE, chain.family, what, |w| chain.encode(w))
    }

    /// Creates a chain; fails with `EEXIST` if it exists.
    pub fn create_chain(&mut self, chain: &Chain) -> usize {
        let what = format!("create chain {}", chain_path(chain.family, &chain.table, &chain.name));
        let flags = NLM_F_CREATE | NLM_F_EXCL;
        self.push(NFT_MSG_NEWCHAIN, flags, chain.family, what, |w| chain.encode(w))
    }

    /// Deletes an empty chain that nothing jumps to; `ENOENT` if missing, `EBUSY` if used.
    pub fn delete_chain(&mut self, family: Family, table: &str, chain: &str) -> usize {
        let what = format!("delete chain {}", chain_path(family, table, chain));
        self.push(NFT_MSG_DELCHAIN, 0, family, what, |w| encode_chain_name(w, table, chain))
    }

    /// Deletes a chain if it exists (kernel 6.3 or newer).
    pub fn destroy_chain(&mut self, family: Family, table: &str, chain: &str) -> usize {
        let what = format!("destroy chain {}", chain_path(family, table, chain));
        let msg = NFT_MSG_DESTROYCHAIN;
        self.push(msg, 0, family, what, |w| encode_chain_name(w, table, chain))
    }

    /// Removes every rule of a chain.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) -> usize {
        let what = format!("flush chain {}", chain_path(family, table, chain));
        self.push(NFT_MSG_DELRULE, 0, family, what, |w| encode_chain_filter(w, table, chain))
    }

    /// Appends a rule at the end of its chain. In a batch made by
    /// [`Batch::with_rule_handles`] its handle is in the [`CommitOutcome`](super::CommitOutcome).
    pub fn add_rule(&mut self, rule: &Rule) -> usize {
        self.rule_op(rule, NLM_F_APPEND, None, "add")
    }

    /// Appends a rule right after the rule with handle `after`.
    pub fn add_rule_after(&mut self, rule: &Rule, after: u64) -> usize {
        self.rule_op(rule, NLM_F_APPEND, Some(after), "add")
    }

    /// Inserts a rule at the start of its chain.
    pub fn insert_rule(&mut self, rule: &Rule) -> usize {
        self.rule_op(rule, 0, None, "insert")
    }

    /// Inserts a rule right before the rule with handle `before`.
    pub fn insert_rule_before(&mut self, rule: &Rule, before: u64) -> usize {
        self.rule_op(rule, 0, Some(before), "insert")
    }

    fn rule_op(&mut self, rule: &Rule, place: u16, position: Option<u64>, verb: &str) -> usize {
        let what = format!("{verb} rule {}", chain_path(rule.family, &rule.table, &rule.chain));
        let echo = if self.echo_rules { NLM_F_ECHO } else { 0 };
        let flags = NLM_F_CREATE | echo | place;
        self.push(NFT_MSG_NEWRULE, flags, rule.family, what, |w| rule.encode(w, position))
    }

    /// Deletes one rule by handle; `ENOENT` if it does not exist.
    pub fn delete_rule(&mut self, family: Family, table: &str, chain: &str, handle: u64) -> usize {
        let what = format!("delete rule {} handle {handle}", chain_path(family, table, chain));
        self.push(NFT_MSG_DELRULE, 0, family, what, |w| encode_rule_ref(w, table, chain, handle))
    }

    /// Creates a set or map and returns the reference rules and element changes in the
    /// same batch use. Named sets that exist are left as they are.
    pub fn add_set(&mut self, set: &Set) -> SetRef {
        self.next_set_id += 1;
        let id = self.next_set_id;
        let what = format!("add set {} {} {}", set.family.nft_name(), set.table, set.name);
        self.push(NFT_MSG_NEWSET, NLM_F_CREATE, set.family, what, |w| set.encode(w, id));
        SetRef { family: set.family, table: set.table.clone(), name: set.name.clone(), id: Some(id) }
    }

    /// Deletes a named set; `ENOENT` if missing, `EBUSY` while a rule uses it.
    pub fn delete_set(&mut self, family: Family, table: &str, name: &str) -> usize {
        let what = format!("delete set {} {table} {name}", family.nft_name());
        self.push(NFT_MSG_DELSET, 0, family, what, |w| encode_set_name(w, table, name))
    }

    /// Deletes a named set if it exists (kernel 6.3 or newer).
    pub fn destroy_set(&mut self, family: Family, table: &str, name: &str) -> usize {
        let what = format!("destroy set {} {table} {name}", family.nft_name());
        self.push(NFT_MSG_DESTROYSET, 0, family, what, |w| encode_set_name(w, table, name))
    }

    /// Adds elements to a set or map (existing equal elements are not an error).
    pub fn add_elements(&mut self, set: &SetRef, elements: &[SetElement]) -> usize {
        let what = format!("add element {} {} {}", set.family.nft_name(), set.table, set.name);
        self.push(NFT_MSG_NEWSETELEM, NLM_F_CREATE, set.family, what, |w| encode_elements(w, set, elements))
    }

    /// Removes elements from a set or map; `ENOENT` if one is missing.
    pub fn delete_elements(&mut self, set: &SetRef, elements: &[SetElement]) -> usize {
        let what = format!("delete element {} {} {}", set.family.nft_name(), set.table, set.name);
        self.push(NFT_MSG_DELSETELEM, 0, set.family, what, |w| encode_elements(w, set, elements))
    }

    /// The wire bytes of the whole batch (begin, operations, end) for sequence numbers
    /// starting at `first_seq`: begin gets `first_seq`, operation `i` gets
    /// `first_seq + 1 + i`, end gets the next one.
    pub(crate) fn encode(&self, first_seq: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.ops.iter().map(|o| o.attrs.len() + 20).sum::<usize>());
        let batch_family = 0; // AF_UNSPEC
        super::msg::put_message(
            &mut out,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            first_seq,
            batch_family,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        for (i, op) in self.ops.iter().enumerate() {
            super::msg::put_message(
                &mut out,
                op.msg_type,
                NLM_F_REQUEST | NLM_F_ACK | op.flags,
                first_seq.wrapping_add(1 + i as u32),
                op.family.byte(),
                0,
                &op.attrs,
            );
        }
        super::msg::put_message(
            &mut out,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            first_seq.wrapping_add(1 + self.ops.len() as u32),
            batch_family,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        out
    }
}

fn chain_path(family: Family, table: &str, chain: &str) -> String {
    format!("{} {table} {chain}", family.nft_name())
}

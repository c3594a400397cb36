//! Per-attachment nftables state that ADD adds and DEL removes in O(1).
//!
//! A plugin's table has base chains that dispatch through verdict maps; each attachment
//! (network, container, ifname) gets its own regular chain, named from a hash of the three,
//! plus map elements (keyed by e.g. the container's IP or its host interface) that jump to
//! it. ADD adds the chain, its rules and the elements in one atomic batch; DEL deletes the
//! elements and the chain — no listing of other containers' rules, so the cost does not
//! grow with the number of containers.
//!
//! After the plugin's own rules, the chain gets one counter rule per map key, commented
//! `cni-rs net=<hash of the network> key=<key>` (with no keys, one rule without `key=`).
//! The tags are short enough for nftables' 127-byte comments whatever the container ID,
//! and let DEL without prevResult find the elements, and GC find the network's chains, by
//! listing only those chains.
//!
//! A key is one attachment's at a time: an ADD whose element is already in a map (another
//! attachment holds the key, e.g. portmap's host port) fails with the table's
//! [`DispatchTable::key_taken`] error and changes nothing.
//!
//! Used by masquerading (`masq`), bridge's MAC spoof check, the firewall and portmap.

use cni_net::nft::{
    Batch, Chain, Family, ListedRule, NftClient, NftError, Rule, RuleBuilder, SetElement, SetRef,
};
use cni_net::Idempotent;
use cni_sdk::{Attachment, CniError, GcErrors, Request};

/// FNV-1a over NUL-separated parts: short, stable names and tags.
fn hash16(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|s| s.bytes().chain([0])) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The name of an attachment's chain: `cni-` + 16 hex digits of a hash of network,
/// container and ifname.
pub fn chain_name(network: &str, who: &Attachment) -> String {
    format!("cni-{}", hash16(&[network, &who.container_id, &who.ifname]))
}

const TAG: &str = "cni-rs net=";

pub fn network_tag(network: &str) -> String {
    format!("{TAG}{}", hash16(&[network]))
}

/// The network tag and key of a tag rule's comment.
fn parse_tag(comment: &str) -> Option<(&str, Option<&str>)> {
    let rest = comment.strip_prefix(TAG)?;
    Some(match rest.split_once(" key=") {
        Some((net, key)) => (net, Some(key)),
        None => (rest, None),
    })
}

/// The keys recorded in an attachment chain's tag rules.
fn recorded_keys(rules: &[ListedRule]) -> Vec<String> {
    rules
        .iter()
        .filter_map(|r| r.rule.comment.as_deref().and_then(parse_tag))
        .filter_map(|(_, k)| k.map(str::to_string))
        .collect()
}

/// A plugin's table: how to create it, and which map elements send traffic for a key to
/// an attachment's chain.
pub trait DispatchTable {
    const FAMILY: Family;
    const TABLE: &'static str;
    /// Adds the base chains, maps and static rules (the table itself is already in the
    /// batch).
    fn bootstrap(batch: &mut Batch);
    /// The map elements for `key` that jump to `chain`.
    fn elements(key: &str, chain: &str) -> Result<Vec<(SetRef, SetElement)>, CniError>;
    /// Why an ADD fails when another attachment's element already has `key`.
    fn key_taken(key: &str) -> CniError {
        CniError::internal(format!("nftables: {key} is already used by another attachment"))
    }
}

/// How an attachment's batch failed.
enum AttachFailure {
    /// A table is missing (the first attachment on this host) or an attachment's chain
    /// exists (a retried ADD): worth clearing up and trying once more.
    Retry,
    Fatal(CniError),
}

/// One table's part of an attachment: its chain with the rules and tag rules, and the
/// map elements for its keys. Parts of several tables (bridge's masquerade and MAC spoof
/// check) go to the kernel in one batch through [`attach_all`], so an ADD makes one
/// nftables transaction, and a refused part leaves no other part behind.
pub struct TablePart<'a> {
    table: &'static str,
    chain: Chain,
    rules: Vec<Rule>,
    elements: Vec<(SetRef, SetElement, String)>,
    /// The table's own steps, from its [`DispatchTable`]: make the table, remove what an
    /// earlier ADD of the attachment left in it, name a key another attachment holds.
    ensure_table: fn(&mut NftClient) -> Result<(), CniError>,
    clear: fn(&mut NftClient, &str, &Attachment) -> Result<(), CniError>,
    key_taken: fn(&str) -> CniError,
    who: &'a Attachment,
}

impl<'a> TablePart<'a> {
    /// Table `T`'s part of `who`'s attachment: `rules` (built for the attachment's chain),
    /// the tag rules and the map elements of `keys`.
    pub fn new<T: DispatchTable>(
        network: &str,
        who: &'a Attachment,
        keys: &[String],
        rules: impl FnOnce(&str) -> Vec<RuleBuilder>,
    ) -> Result<TablePart<'a>, CniError> {
        let chain = chain_name(network, who);
        let tag = network_tag(network);
        let tags: Vec<String> =
            if keys.is_empty() { vec![tag] } else { keys.iter().map(|k| format!("{tag} key={k}")).collect() };
        let tag_rules = tags
            .into_iter()
            .map(|t| RuleBuilder::new(T::FAMILY, T::TABLE, chain.as_str()).counter().comment(t));
        let rules = rules(&chain)
            .into_iter()
            .chain(tag_rules)
            .map(|rule| rule.build().map_err(|e| nft_error("build rule", e)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut elements = Vec::new();
        for key in keys {
            for (set, element) in T::elements(key, &chain)? {
                elements.push((set, element, key.clone()));
            }
        }
        Ok(TablePart {
            table: T::TABLE,
            chain: Chain::regular(T::FAMILY, T::TABLE, chain),
            rules,
            elements,
            ensure_table: ensure_table::<T>,
            clear: |nft, network, who| detach::<T>(nft, network, who, None),
            key_taken: T::key_taken,
            who,
        })
    }
}

/// The one batch of `parts`, and which of its operations add an element (for the error
/// of a key another attachment holds).
fn attachment_batch<'p>(parts: &'p [TablePart<'_>]) -> (Batch, Vec<(usize, &'p TablePart<'p>, &'p str)>) {
    let mut batch = Batch::new();
    let mut element_ops = Vec::new();
    for part in parts {
        batch.create_chain(&part.chain);
        for rule in &part.rules {
            batch.add_rule(rule);
        }
        for (set, element, key) in &part.elements {
            element_ops.push((batch.add_elements(set, std::slice::from_ref(element)), part, key.as_str()));
        }
    }
    (batch, element_ops)
}

/// Commits an attachment's batch, telling a key another attachment holds (an element op
/// refused as existing: the map already has that key) from the failures a retry fixes.
fn commit_attachment(
    nft: &mut NftClient,
    batch: &Batch,
    element_ops: &[(usize, &TablePart<'_>, &str)],
    who: &Attachment,
) -> Result<(), AttachFailure> {
    match nft.commit(batch) {
        Ok(_) => Ok(()),
        Err(NftError::Operation { index, errno, .. })
            if matches!(errno, libc::EEXIST | libc::EBUSY | libc::ENOTEMPTY)
                && element_ops.iter().any(|(op, ..)| *op == index) =>
        {
            let (_, part, key) = element_ops.iter().find(|(op, ..)| *op == index).expect("found above");
            Err(AttachFailure::Fatal((part.key_taken)(key)))
        }
        Err(e) if e.is_not_found() || e.is_already_exists() => Err(AttachFailure::Retry),
        Err(e) => Err(AttachFailure::Fatal(nft_error(&format!("add rules for {}", who.container_id), e))),
    }
}

fn nft_error(what: &str, e: NftError) -> CniError {
    CniError::internal(format!("nftables: {what}: {e}"))
}

/// Creates the table once. Two plugins racing to create it both succeed: the loser's
/// exclusive create fails with EEXIST and it carries on with the winner's table.
pub fn ensure_table<T: DispatchTable>(nft: &mut NftClient) -> Result<(), CniError> {
    if nft.get_table(T::FAMILY, T::TABLE).map_err(|e| nft_error("look up table", e))?.is_some() {
        return Ok(());
    }
    let mut batch = Batch::new();
    batch.create_table(&cni_net::nft::Table::new(T::FAMILY, T::TABLE));
    T::bootstrap(&mut batch);
    nft.commit(&batch)
        .ignore_exists()
        .map(drop)
        .map_err(|e| nft_error(&format!("create table {}", T::TABLE), e))
}

/// Adds an attachment's chain with `rules` (built for that chain), its tag rules and its
/// map elements for `keys`, in one atomic batch: [`attach_all`] with table `T`'s part.
pub fn attach<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
    keys: &[String],
    rules: impl FnOnce(&str) -> Vec<RuleBuilder>,
) -> Result<(), CniError> {
    attach_all(nft, network, who, &[TablePart::new::<T>(network, who, keys, rules)?])
}

/// Adds the parts of `who`'s attachment, in one atomic batch whatever the number of
/// tables. A chain left by an earlier ADD of the same attachment is replaced.
///
/// The batch is committed optimistically: it creates the chains exclusively, so it fails
/// (changing nothing) if a table is missing (the first attachment on this host) or a
/// chain exists (a retried ADD). Only then are the tables made and the old chains removed
/// before a second attempt — the usual ADD costs one round trip to the kernel, not three.
pub fn attach_all(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
    parts: &[TablePart<'_>],
) -> Result<(), CniError> {
    if parts.is_empty() {
        return Ok(());
    }
    let (batch, element_ops) = attachment_batch(parts);
    match commit_attachment(nft, &batch, &element_ops, who) {
        Err(AttachFailure::Retry) => {}
        Err(AttachFailure::Fatal(e)) => return Err(e),
        Ok(()) => return Ok(()),
    }
    for part in parts {
        (part.ensure_table)(nft)?;
        // Start clean: a retried ADD must not stack a second set of rules.
        (part.clear)(nft, network, part.who)?;
    }
    match commit_attachment(nft, &batch, &element_ops, who) {
        Err(AttachFailure::Retry) => {
            let tables: Vec<&str> = parts.iter().map(|p| p.table).collect();
            Err(CniError::internal(format!(
                "nftables: table {} or the chain of {} changed under this ADD twice",
                tables.join(", "),
                who.container_id
            )))
        }
        Err(AttachFailure::Fatal(e)) => Err(e),
        Ok(()) => Ok(()),
    }
}

/// Removes an attachment's elements and chain. `keys` come from prevResult when there is
/// one; otherwise they are read from the chain's comment. Missing pieces are fine: DEL is
/// idempotent.
pub fn detach<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
    keys: Option<&[String]>,
) -> Result<(), CniError> {
    let chain = chain_name(network, who);
    let listed = nft.list_rules(T::FAMILY, T::TABLE, &chain).ignore_missing();
    let Some(listed) = listed.map_err(|e| nft_error("list the attachment's chain", e))? else {
        return Ok(());
    };
    // Attachment chains always hold rules: an empty listing means there is no chain (and so
    // no element pointing at it) — nothing to do, and no batch that would fail.
    if listed.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> =
        keys.map(<[String]>::to_vec).unwrap_or_default().into_iter().chain(recorded_keys(&listed)).collect();
    remove_chain::<T>(nft, &chain, &keys)
}

/// Deletes `chain` and the elements of `keys` that point at it.
fn remove_chain<T: DispatchTable>(nft: &mut NftClient, chain: &str, keys: &[String]) -> Result<(), CniError> {
    let mut elements = Vec::new();
    for key in keys {
        for (set, element) in T::elements(key, chain)? {
            if !elements.contains(&(set.clone(), element.clone())) {
                elements.push((set, element));
            }
        }
    }
    delete_chain_and_elements(nft, T::FAMILY, T::TABLE, chain, &elements)
}

/// Deletes `elements` and then `chain` (flushed first). One batch when every piece is
/// there (the usual case); piece by piece when some is already gone, since a missing piece
/// fails a whole batch. Missing pieces are fine: DEL is idempotent.
pub fn delete_chain_and_elements(
    nft: &mut NftClient,
    family: Family,
    table: &str,
    chain: &str,
    elements: &[(SetRef, SetElement)],
) -> Result<(), CniError> {
    let mut batch = Batch::new();
    for (set, element) in elements {
        batch.delete_elements(set, std::slice::from_ref(element));
    }
    batch.flush_chain(family, table, chain);
    batch.delete_chain(family, table, chain);
    match nft.commit(&batch) {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => {
            for (set, element) in elements {
                let mut one = Batch::new();
                one.delete_elements(set, std::slice::from_ref(element));
                nft.commit(&one).ignore_missing().map_err(|e| nft_error("delete map element", e))?;
            }
            let mut tail = Batch::new();
            tail.flush_chain(family, table, chain);
            tail.delete_chain(family, table, chain);
            let deleted = nft.commit(&tail).ignore_missing();
            deleted.map(drop).map_err(|e| nft_error("delete the attachment's chain", e))
        }
        Err(e) => Err(nft_error("delete the attachment's rules", e)),
    }
}

/// The keys an attachment's chain records (none when there is no such chain): for CHECK.
pub fn attached_keys<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
) -> Result<Vec<String>, CniError> {
    let rules = nft.list_rules(T::FAMILY, T::TABLE, &chain_name(network, who)).ignore_missing();
    let rules = rules.map_err(|e| nft_error("list the attachment's chain", e))?;
    Ok(rules.map(|rules| recorded_keys(&rules)).unwrap_or_default())
}

/// Whether the attachment's chain exists (for CHECK).
pub fn is_attached<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
) -> Result<bool, CniError> {
    let rules = nft.list_rules(T::FAMILY, T::TABLE, &chain_name(network, who)).ignore_missing();
    Ok(rules.map_err(|e| nft_error("list the attachment's chain", e))?.is_some_and(|rules| !rules.is_empty()))
}

/// Removes every attachment chain of `network` whose attachment is not in `valid`. Lists
/// the table's chains and reads the tags of each of ours: GC is the one operation allowed
/// to look at everything. A chain that cannot be read or removed is recorded and GC goes
/// on with the next.
pub fn gc<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    valid: &[Attachment],
) -> Result<(), GcErrors> {
    let mut errors = GcErrors::new();
    let chains = match nft.list_chains(T::FAMILY, T::TABLE).ignore_missing() {
        Ok(Some(chains)) => chains,
        Ok(None) => return Ok(()),
        Err(e) => {
            errors.push(format!("table {}", T::TABLE), nft_error("list chains", e));
            return errors.into_result();
        }
    };
    let keep: Vec<String> = valid.iter().map(|who| chain_name(network, who)).collect();
    let ours = network_tag(network);
    let ours = ours.strip_prefix(TAG).expect("tag has the prefix");
    for chain in chains.iter().filter(|c| c.name.starts_with("cni-") && !keep.contains(&c.name)) {
        let object = || format!("chain {} {}", T::TABLE, chain.name);
        let rules = match nft.list_rules(T::FAMILY, T::TABLE, &chain.name).ignore_missing() {
            Ok(Some(rules)) => rules,
            Ok(None) => continue,
            Err(e) => {
                errors.push(object(), nft_error("list chain", e));
                continue;
            }
        };
        let of_network = rules
            .iter()
            .filter_map(|r| r.rule.comment.as_deref().and_then(parse_tag))
            .any(|(net, _)| net == ours);
        if of_network {
            errors.record(object(), remove_chain::<T>(nft, &chain.name, &recorded_keys(&rules)));
        }
    }
    errors.into_result()
}

/// CHECK for a plugin's table: the request's attachment must have its chain.
pub fn check_request<T: DispatchTable>(
    nft: &mut NftClient,
    req: &Request,
    what: &str,
) -> Result<(), CniError> {
    if is_attached::<T>(nft, &req.conf.name, &req.attachment())? {
        Ok(())
    } else {
        Err(CniError::internal(format!("{what} rules for {} are missing", req.container_id)))
    }
}

/// GC of a plugin's table through a client of its own: a client that cannot be opened is
/// the one failure.
pub fn gc_table<T: DispatchTable>(network: &str, valid: &[Attachment]) -> Result<(), GcErrors> {
    match client() {
        Ok(mut nft) => gc::<T>(&mut nft, network, valid),
        Err(e) => {
            let mut errors = GcErrors::new();
            errors.push(format!("table {}", T::TABLE), e);
            Err(errors)
        }
    }
}

/// An nftables client for a plugin process: dropping it closes the socket without
/// waiting for the kernel's deferred cleanup (see [`NftClient::close_without_waiting`]),
/// which saves 6–18 ms per ADD and DEL.
pub struct Client(Option<NftClient>);

impl From<NftClient> for Client {
    fn from(nft: NftClient) -> Client {
        Client(Some(nft))
    }
}

impl std::ops::Deref for Client {
    type Target = NftClient;
    fn deref(&self) -> &NftClient {
        self.0.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut NftClient {
        self.0.as_mut().expect("present until drop")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(nft) = self.0.take() {
            nft.close_without_waiting();
        }
    }
}

/// A client in the plugin's (host) namespace.
pub fn client() -> Result<Client, CniError> {
    NftClient::new().map(Client::from).map_err(|e| CniError::internal(format!("nftables: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_fit_any_container_id_and_parse_back() {
        let tag = format!(
            "{} key={}",
            network_tag("a-network-with-a-rather-long-name"),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        assert!(tag.len() < cni_net::nft::MAX_COMMENT_LEN, "{tag}");
        let (net, key) = parse_tag(&tag).unwrap();
        assert_eq!(format!("{TAG}{net}"), network_tag("a-network-with-a-rather-long-name"));
        assert_eq!(key, Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert_eq!(parse_tag(&network_tag("n")).unwrap().1, None);
        assert!(parse_tag("someone else's rule").is_none());
    }

    #[test]
    fn chain_names_are_stable_and_distinct() {
        let (a, b) = (Attachment::new("c1", "eth0"), Attachment::new("c2", "eth0"));
        assert_eq!(chain_name("n", &a), chain_name("n", &a.clone()));
        assert_ne!(chain_name("n", &a), chain_name("n", &b));
        assert_ne!(chain_name("n", &a), chain_name("m", &a));
        assert_eq!(chain_name("n", &a).len(), 20);
    }
}

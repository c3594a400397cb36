//! Per-attachment nftables state that ADD adds and DEL removes in O(1).
//!
//! A plugin's table has base chains that dispatch through verdict maps; each attachment
//! (network, container, ifname) gets its own regular chain, named from a hash of the three,
//! plus map elements (keyed by e.g. the container's IP or its host interface) that jump to
//! it. ADD adds the chain, its rules and the elements in one atomic batch; DEL deletes the
//! elements and the chain — no listing of other containers' rules, so the cost does not
//! grow with the number of containers. The first rule of every chain carries a comment
//! naming the attachment and its map keys, so DEL without prevResult and GC can find them
//! by listing only that one chain (GC lists the table's chains).

use cni_net::nft::{Batch, Chain, Family, NftClient, NftError, RuleBuilder, SetElement, SetRef};
use cni_plugin::{CniError, Request};

/// What identifies an attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
}

impl Attachment {
    pub fn of(req: &Request) -> Attachment {
        Attachment {
            network: req.conf.name.clone(),
            container_id: req.container_id.clone(),
            ifname: req.ifname.clone(),
        }
    }

    /// `cni-` + 16 hex digits of an FNV-1a hash: short, stable, and unique in practice.
    pub fn chain_name(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in
            [&self.network, &self.container_id, &self.ifname].iter().flat_map(|s| s.bytes().chain([0]))
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("cni-{hash:016x}")
    }

    fn comment(&self, keys: &[String]) -> String {
        format!(
            "cni-rs net={} id={} if={} keys={}",
            self.network,
            self.container_id,
            self.ifname,
            keys.join(",")
        )
    }

    fn parse_comment(comment: &str) -> Option<(Attachment, Vec<String>)> {
        let rest = comment.strip_prefix("cni-rs ")?;
        let field = |name: &str| {
            rest.split(' ')
                .find_map(|part| part.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
                .map(str::to_string)
        };
        let keys = field("keys")?.split(',').filter(|k| !k.is_empty()).map(str::to_string).collect();
        Some((Attachment { network: field("net")?, container_id: field("id")?, ifname: field("if")? }, keys))
    }
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
    match nft.commit(&batch) {
        Err(e) if !e.is_already_exists() => Err(nft_error(&format!("create table {}", T::TABLE), e)),
        _ => Ok(()),
    }
}

/// Adds an attachment's chain with `rules` (built for that chain) and its map elements
/// for `keys`, in one atomic batch. A chain left by an earlier ADD of the same attachment
/// is replaced.
pub fn attach<T: DispatchTable>(
    nft: &mut NftClient,
    who: &Attachment,
    keys: &[String],
    rules: impl FnOnce(&str) -> Vec<RuleBuilder>,
) -> Result<(), CniError> {
    ensure_table::<T>(nft)?;
    let chain = who.chain_name();
    // Start clean: a retried ADD must not stack a second set of rules.
    detach::<T>(nft, who, None)?;
    let mut batch = Batch::new();
    batch.add_chain(&Chain::regular(T::FAMILY, T::TABLE, chain.clone()));
    for (i, rule) in rules(&chain).into_iter().enumerate() {
        let rule = if i == 0 { rule.comment(who.comment(keys)) } else { rule };
        batch.add_rule(&rule.build().map_err(|e| nft_error("build rule", e))?);
    }
    for key in keys {
        for (set, element) in T::elements(key, &chain)? {
            batch.add_elements(&set, &[element]);
        }
    }
    nft.commit(&batch).map_err(|e| nft_error(&format!("add rules for {}", who.container_id), e)).map(drop)
}

/// Removes an attachment's elements and chain. `keys` come from prevResult when there is
/// one; otherwise they are read from the chain's comment. Missing pieces are fine: DEL is
/// idempotent.
pub fn detach<T: DispatchTable>(
    nft: &mut NftClient,
    who: &Attachment,
    keys: Option<&[String]>,
) -> Result<(), CniError> {
    let chain = who.chain_name();
    let listed = match nft.list_rules(T::FAMILY, T::TABLE, &chain) {
        Ok(rules) => rules,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(nft_error("list the attachment's chain", e)),
    };
    let from_comment = listed
        .iter()
        .find_map(|r| r.rule.comment.as_deref().and_then(Attachment::parse_comment))
        .map(|(_, keys)| keys)
        .unwrap_or_default();
    let keys: Vec<String> =
        keys.map(<[String]>::to_vec).unwrap_or_default().into_iter().chain(from_comment).collect();
    let mut elements = Vec::new();
    for key in &keys {
        for (set, element) in T::elements(key, &chain)? {
            if !elements.contains(&(set.clone(), element.clone())) {
                elements.push((set, element));
            }
        }
    }
    // One batch when every element is there (the usual case); element by element when some
    // is already gone, since a missing element fails a whole batch.
    let mut batch = Batch::new();
    for (set, element) in &elements {
        batch.delete_elements(set, std::slice::from_ref(element));
    }
    batch.flush_chain(T::FAMILY, T::TABLE, &chain);
    batch.delete_chain(T::FAMILY, T::TABLE, &chain);
    match nft.commit(&batch) {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => {
            for (set, element) in &elements {
                let mut one = Batch::new();
                one.delete_elements(set, std::slice::from_ref(element));
                match nft.commit(&one) {
                    Err(e) if !e.is_not_found() => return Err(nft_error("delete map element", e)),
                    _ => {}
                }
            }
            let mut tail = Batch::new();
            tail.flush_chain(T::FAMILY, T::TABLE, &chain);
            tail.delete_chain(T::FAMILY, T::TABLE, &chain);
            match nft.commit(&tail) {
                Err(e) if !e.is_not_found() => Err(nft_error("delete the attachment's chain", e)),
                _ => Ok(()),
            }
        }
        Err(e) => Err(nft_error("delete the attachment's rules", e)),
    }
}

/// Whether the attachment's chain exists (for CHECK).
pub fn is_attached<T: DispatchTable>(nft: &mut NftClient, who: &Attachment) -> Result<bool, CniError> {
    match nft.list_rules(T::FAMILY, T::TABLE, &who.chain_name()) {
        Ok(rules) => Ok(!rules.is_empty()),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(nft_error("list the attachment's chain", e)),
    }
}

/// Removes every attachment of `network` that `keep` rejects. Lists the table's chains and
/// the first rule of each of ours: GC is the one operation allowed to look at everything.
pub fn gc<T: DispatchTable>(
    nft: &mut NftClient,
    network: &str,
    keep: impl Fn(&Attachment) -> bool,
) -> Result<(), CniError> {
    let chains = match nft.list_chains(T::FAMILY, T::TABLE) {
        Ok(chains) => chains,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(nft_error("list chains", e)),
    };
    let mut errors = Vec::new();
    for chain in chains.iter().filter(|c| c.name.starts_with("cni-")) {
        let rules =
            nft.list_rules(T::FAMILY, T::TABLE, &chain.name).map_err(|e| nft_error("list chain", e))?;
        let Some((who, keys)) =
            rules.iter().find_map(|r| r.rule.comment.as_deref().and_then(Attachment::parse_comment))
        else {
            continue;
        };
        if who.network == network && !keep(&who) {
            if let Err(e) = detach::<T>(nft, &who, Some(&keys)) {
                errors.push(e.to_string());
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!("GC failed for some attachments: {}", errors.join("; "))))
    }
}

/// CHECK for a plugin's table: the request's attachment must have its chain.
pub fn check_request<T: DispatchTable>(
    nft: &mut NftClient,
    req: &Request,
    what: &str,
) -> Result<(), CniError> {
    if is_attached::<T>(nft, &Attachment::of(req))? {
        Ok(())
    } else {
        Err(CniError::internal(format!("{what} rules for {} are missing", req.container_id)))
    }
}

/// GC for a plugin's table: removes attachments of the request's network that are not in
/// its `cni.dev/valid-attachments`.
pub fn gc_request<T: DispatchTable>(nft: &mut NftClient, req: &Request) -> Result<(), CniError> {
    let valid = req.valid_attachments()?;
    gc::<T>(nft, &req.conf.name, |who| {
        valid.iter().any(|v| v.container_id == who.container_id && v.ifname == who.ifname)
    })
}

/// A client in the plugin's (host) namespace.
pub fn client() -> Result<NftClient, CniError> {
    NftClient::new().map_err(|e| CniError::internal(format!("nftables: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_round_trips() {
        let who =
            Attachment { network: "podman".into(), container_id: "abc123".into(), ifname: "eth0".into() };
        let comment = who.comment(&["10.88.0.5".into(), "fd00::5".into()]);
        let (back, keys) = Attachment::parse_comment(&comment).unwrap();
        assert_eq!(back, who);
        assert_eq!(keys, ["10.88.0.5", "fd00::5"]);
        assert!(Attachment::parse_comment("someone else's rule").is_none());
    }

    #[test]
    fn chain_names_are_stable_and_distinct() {
        let a = Attachment { network: "n".into(), container_id: "c1".into(), ifname: "eth0".into() };
        let b = Attachment { container_id: "c2".into(), ..a.clone() };
        assert_eq!(a.chain_name(), a.clone().chain_name());
        assert_ne!(a.chain_name(), b.chain_name());
        assert_eq!(a.chain_name().len(), 20);
    }
}

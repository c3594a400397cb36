//! One record per plugin: its name, how to make it, its dry configuration stage, the keys
//! it reads, and whether it is chained. Each crate that builds plugins exports its records
//! once (`plugins()`); everything that needs to know about plugins without running them —
//! the multi-call binary's dispatch, `cnitool validate`, the fuzzer, the docs drift test —
//! reads a [`Catalog`] of those lists, so adding a plugin touches one place.

use crate::keys::Keys;
use crate::{CniError, Plugin, Request};

/// What the workspace knows of one plugin.
pub struct Entry {
    /// Its `type` in a configuration, and the name it is installed under.
    pub name: &'static str,
    pub make: fn() -> Box<dyn Plugin>,
    /// Parses and validates a request as the plugin's ADD does before it touches anything
    /// (no netlink, nftables, file or daemon work): what `cnitool validate` and the fuzzer run.
    pub config_stage: fn(&Request) -> Result<(), CniError>,
    /// The keys its code parses stdin into, beyond the keys every plugin shares.
    pub keys: fn() -> Keys,
    /// It acts on an earlier plugin's result and refuses an ADD without prevResult from
    /// 0.3.0 on (the meta plugins), so a list must not start with it.
    pub chained: bool,
}

/// The plugins of several crates, looked up by name.
pub struct Catalog(Vec<&'static Entry>);

impl Catalog {
    /// The lists of each crate, in order; a name is looked up in the first list that has it.
    pub fn new(lists: &[&'static [Entry]]) -> Catalog {
        Catalog(lists.iter().flat_map(|list| list.iter()).collect())
    }

    pub fn find(&self, name: &str) -> Option<&'static Entry> {
        self.0.iter().copied().find(|entry| entry.name == name)
    }

    pub fn entries(&self) -> impl Iterator<Item = &'static Entry> + '_ {
        self.0.iter().copied()
    }

    /// Plugin `name`'s configuration stage followed by its IPAM plugin's when `ipam.type`
    /// names another plugin of the catalog (an interface plugin hands it the same stdin).
    /// `None` when `name` is not in the catalog.
    pub fn config_stage_with_ipam(&self, name: &str, req: &Request) -> Option<Result<(), CniError>> {
        let own = (self.find(name)?.config_stage)(req);
        let ipam = req.conf.ipam.as_ref().map(|i| i.ipam_type.as_str()).filter(|t| *t != name);
        Some(match ipam.and_then(|t| self.find(t)) {
            Some(ipam) => own.and((ipam.config_stage)(req)),
            None => own,
        })
    }
}

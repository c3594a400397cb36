//! A link this ADD created in the container, deleted again if the ADD fails later.

use cni_net::{NetNs, Netlink};

/// Deletes link `index` in `ns` on drop unless [`CreatedLink::keep`] was called.
pub struct CreatedLink<'a> {
    ns: &'a NetNs,
    index: u32,
    armed: bool,
}

impl<'a> CreatedLink<'a> {
    pub fn new(ns: &'a NetNs, index: u32) -> CreatedLink<'a> {
        CreatedLink { ns, index, armed: true }
    }

    /// The ADD succeeded: the link stays.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for CreatedLink<'_> {
    fn drop(&mut self) {
        if self.armed {
            // A fresh socket: the one the ADD used may be what failed.
            if let Err(e) = Netlink::in_ns(self.ns).and_then(|mut nl| nl.delete_link(self.index)) {
                if !e.is_not_found() {
                    eprintln!("rollback: cannot delete link #{}: {e}", self.index);
                }
            }
        }
    }
}

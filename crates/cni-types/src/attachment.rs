//! What the spec calls an attachment: one container's interface on a network.

use serde::{Deserialize, Serialize};

/// A container's interface, as the runtime names it (CNI_CONTAINERID, CNI_IFNAME) and as
/// GC lists the ones still in use (`cni.dev/valid-attachments`). The network is not part
/// of it: every request, and so every attachment it speaks of, is about one network.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    #[serde(rename = "ifname")]
    pub ifname: String,
}

impl Attachment {
    pub fn new(container_id: impl Into<String>, ifname: impl Into<String>) -> Attachment {
        Attachment { container_id: container_id.into(), ifname: ifname.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_with_the_spec_keys() {
        let a = Attachment::new("c1", "eth0");
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json, serde_json::json!({"containerID": "c1", "ifname": "eth0"}));
        assert_eq!(serde_json::from_value::<Attachment>(json).unwrap(), a);
    }
}

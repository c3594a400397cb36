//! What several of the SDK's integration tests share.

/// The environment of an ADD as a runtime sets it (no CNI_ARGS).
pub fn add_env(key: &str) -> Option<String> {
    Some(
        match key {
            "CNI_COMMAND" => "ADD",
            "CNI_CONTAINERID" => "c1",
            "CNI_NETNS" => "/run/netns/none",
            "CNI_IFNAME" => "eth0",
            "CNI_PATH" => "/opt/cni/bin",
            _ => return None,
        }
        .to_string(),
    )
}

//! The snapshot sees every kind of kernel state a plugin could leave behind (needs root).

use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_testkit::ns::TestNetns;
use cni_testkit::snapshot::Scope;

#[test]
fn links_addresses_routes_rules_and_nftables_show_up() {
    let host = TestNetns::with_prefix("bi").unwrap();
    let ctr = TestNetns::with_prefix("bi").unwrap();
    let scope = Scope::new().netns("host", &host).netns("ctr", &ctr);
    let mut before = scope.take();
    assert!(before.diff(&scope.take()).is_empty(), "two snapshots of an idle namespace differ");

    let changed = |before: &cni_testkit::snapshot::Snapshot, section: &str| {
        let after = scope.take();
        let diff = before.diff(&after);
        assert_eq!(diff.len(), 1, "{section}: {diff:?}");
        assert!(diff[0].starts_with(section), "{section}: {diff:?}");
        after
    };
    let mut nl = host.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new("bisnap0"), peer: LinkSpec::new("eth0").netns(ctr.netns()) })
        .unwrap();
    let after = scope.take();
    let diff = before.diff(&after);
    assert!(diff.iter().any(|d| d.starts_with("host/links")), "{diff:?}");
    assert!(diff.iter().any(|d| d.starts_with("ctr/links")), "{diff:?}");
    before = after;

    let ip = |args: &[&str]| {
        let out = host.command("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let link = nl.require_link("bisnap0").unwrap();
    nl.add_address(link.index, "10.199.0.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    // The address also adds a local route (table local): both sections change.
    let after = scope.take();
    let diff = before.diff(&after);
    assert!(diff.iter().any(|d| d.starts_with("host/addresses")), "{diff:?}");
    before = after;
    ip(&["rule", "add", "from", "10.199.0.9", "table", "199"]);
    before = changed(&before, "host/rules4");
    ip(&["route", "add", "blackhole", "10.198.0.0/24", "table", "199"]);
    before = changed(&before, "host/routes4");
    let out = host.command("nft").args(["add", "table", "inet", "bisnap"]).output().unwrap();
    assert!(out.status.success());
    changed(&before, "host/nftables");
}

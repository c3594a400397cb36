//! One CniConfig shared by many threads attaching different containers at once.

use crate::support::Rig;
use libcni::RuntimeConf;
use serde_json::json;
use std::collections::BTreeSet;

#[test]
fn a_hundred_parallel_adds_and_dels_for_distinct_containers() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<libcni::CniConfig>();
    assert_send_sync::<libcni::NetworkConfigList>();

    let rig = Rig::new();
    rig.plugin("a").plugin("b");
    let list = rig.list(json!({"cniVersion": "1.1.0", "name": "par", "plugins": [
        {"type": "a"}, {"type": "b", "testBehaviour": {"echoPrevResult": true}}]}));
    let rt = |i: usize| RuntimeConf::new(format!("ctr-{i:03}"), format!("/run/netns/ns{i}"), "eth0");
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for i in 0..100 {
            let (cni, list) = (&rig.cni, &list);
            s.spawn(move || {
                let result = cni.add_network_list(list, &rt(i)).unwrap();
                assert_eq!(result.json["interfaces"][0]["sandbox"], format!("/run/netns/ns{i}"));
            });
        }
    });
    let add_time = started.elapsed();
    let attachments = rig.cni.cached_attachments(None).unwrap();
    assert_eq!(attachments.len(), 100);
    for a in &attachments {
        let n = a.container_id.trim_start_matches("ctr-").parse::<usize>().unwrap();
        assert_eq!(a.result.as_ref().unwrap()["interfaces"][0]["sandbox"], format!("/run/netns/ns{n}"));
    }
    let adds: BTreeSet<String> = rig
        .log()
        .iter()
        .filter(|i| i.command == "ADD")
        .map(|i| i.var("CNI_CONTAINERID").to_string())
        .collect();
    assert_eq!(adds.len(), 100);

    std::thread::scope(|s| {
        for i in 0..100 {
            let (cni, list) = (&rig.cni, &list);
            s.spawn(move || cni.del_network_list(list, &rt(i)).unwrap());
        }
    });
    assert!(rig.cni.cached_attachments(None).unwrap().is_empty());
    assert_eq!(rig.log().iter().filter(|i| i.command == "DEL").count(), 200);
    eprintln!("100 parallel 2-plugin ADDs took {add_time:?}");
}

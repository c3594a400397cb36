//! CNI_ARGS (`K=V;K=V`): parsing never panics, what parses prints back to the same text
//! and parses to the same pairs, and a refusal is code 4.
#![no_main]

use cni_types::args::CniArgs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match CniArgs::parse(text) {
        Ok(args) => {
            let printed = args.to_env_string();
            assert_eq!(printed, text, "CNI_ARGS that parse print back unchanged");
            assert_eq!(CniArgs::parse(&printed).expect("printed CNI_ARGS parse"), args);
            for (key, value) in args.pairs() {
                assert!(!key.is_empty() && !key.contains(';') && !key.contains('='));
                assert!(!value.contains(';'));
                assert!(args.get(key).is_some());
            }
            let _ = args.ignore_unknown();
            let _ = args.check_known(&["IP", "MAC", "K8S_POD_NAME"]);
        }
        Err(e) => assert_eq!(e.code, 4, "a bad CNI_ARGS is code 4: {e:?}"),
    }
});

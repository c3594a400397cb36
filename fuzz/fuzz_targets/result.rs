//! Results of every version and every conversion between them. The first byte picks the
//! version the JSON is read in when it names none; the rest is the JSON. For a result
//! that parses, printing it in any version either works or (0.1.0/0.2.0 only) says it
//! has no address; what was printed parses again in that version; printing is
//! idempotent (parse(print(r, v)) prints the same again); and 1.0.0 and 1.1.0, whose
//! layout is the internal model's, round-trip it exactly.
#![no_main]

use cni_types::result::ResultError;
use cni_types::version::ResultFamily;
use cni_types::{CniResult, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else { return };
    let default_version = Version::ALL[usize::from(selector) % Version::ALL.len()];
    let Ok((model, read_as)) = CniResult::parse_bytes(json, default_version) else { return };
    // The same JSON through the other entry points agrees.
    let value: serde_json::Value = serde_json::from_slice(json).expect("parsed once already");
    assert_eq!(CniResult::from_value(value, read_as).expect("same version, same JSON"), model);

    for version in Version::ALL {
        let printed = match model.to_value(version) {
            Ok(printed) => printed,
            Err(ResultError::NoAddressForV02(_)) if version.family() == ResultFamily::V02 => continue,
            Err(e) => panic!("printing a parsed result as {version:?} failed: {e}"),
        };
        assert_eq!(printed["cniVersion"], version.as_str());
        let (again, named) = CniResult::parse(printed.clone(), Version::LATEST)
            .unwrap_or_else(|e| panic!("a result printed as {version:?} does not parse: {e}\n{printed}"));
        assert_eq!(named, version);
        let reprinted = again.to_value(version).expect("a printed result prints again");
        assert_eq!(reprinted, printed, "printing as {version:?} is not idempotent");
        if version.family() == ResultFamily::V1 {
            assert_eq!(again, model, "{version:?} does not round-trip the model");
        }
        let converted = CniResult::convert(printed, version, read_as);
        if let Err(e) = converted {
            assert!(matches!(e, ResultError::NoAddressForV02(_)), "{version:?} -> {read_as:?}: {e}");
        }
    }
});

//! The configuration keys a serde type accepts, read from the type itself.
//!
//! [`config_keys`] deserialises the type from a recording deserializer: every
//! `deserialize_struct` call hands over the struct's field names (after `rename` and
//! `rename_all`), which are recorded under the path they sit at (`ipam.ranges[][].subnet`:
//! `.` between a struct and its field, `[]` for the elements of a list). The recorder then
//! feeds each field a placeholder value (`0`, `false`, `""`, one list element, `Some`) so
//! nested structs are reached too.
//!
//! A placeholder a field refuses (an address type cannot be parsed from `""`) aborts
//! serde's visit of the enclosing struct, so the recording starts again with that field left
//! out; its own name is already recorded, and the fields after it are reached on the next
//! pass. A struct missing a required field errs only after all its fields were offered, so
//! nothing is lost by it either.
//!
//! What it cannot see: the keys of a map (`HashMap`, `serde_json::Map`, a
//! `#[serde(flatten)]` catch-all, which serde reads as a map without naming the struct's
//! fields): such a path is reported in [`Keys::open`], meaning "any key below this one".
//! A field typed `serde_json::Value` is one key: what is inside is not the type's business.
//! Untagged enums are tried against a unit placeholder, so keys inside their variants are
//! not seen; none of the plugin configurations use one.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

/// The keys a type accepts, as paths.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Keys {
    /// Every key path, e.g. `mtu`, `ipam.ranges[][].subnet`, `runtimeConfig.portMappings[].hostPort`.
    pub keys: BTreeSet<String>,
    /// Paths whose value is read as a map: any key below them is accepted (`routes[]` of a
    /// struct with a flattened catch-all; `sysctl` for a map of sysctls).
    pub open: BTreeSet<String>,
}

impl Keys {
    /// Adds another type's keys (a plugin that parses its stdin into two types).
    pub fn merge(&mut self, other: Keys) {
        self.keys.extend(other.keys);
        self.open.extend(other.open);
    }
}

/// Nesting deeper than this is a recursive type: the recording stops there.
const MAX_DEPTH: usize = 24;
/// Each pass leaves out at least one more field, so this bounds even pathological types.
const MAX_PASSES: usize = 512;

/// The keys `T` accepts (see the module documentation for what "accepts" covers).
pub fn config_keys<T: DeserializeOwned>() -> Keys {
    let mut skipped = BTreeSet::new();
    let mut found = Keys::default();
    for _ in 0..MAX_PASSES {
        let recording = Recording { found: RefCell::new(std::mem::take(&mut found)), skipped: &skipped };
        let outcome = T::deserialize(Recorder { recording: &recording, path: String::new(), depth: 0 });
        found = recording.found.into_inner();
        match outcome {
            Err(RecordError { path: Some(path), .. }) if !skipped.contains(&path) => {
                skipped.insert(path);
            }
            _ => return found,
        }
    }
    found
}

/// One pass over the type: the keys found so far, and the fields left out because they
/// refused their placeholder on an earlier pass.
struct Recording<'a> {
    found: RefCell<Keys>,
    /// Paths whose placeholder value was refused on an earlier pass: not offered again.
    skipped: &'a BTreeSet<String>,
}

/// Why a pass stopped: serde's error, with the path of the field that refused its
/// placeholder (then left out on the next pass).
#[derive(Debug)]
struct RecordError {
    /// The innermost key whose value failed; `None` until a map or list names it.
    path: Option<String>,
    msg: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)
    }
}

impl std::error::Error for RecordError {}

impl de::Error for RecordError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        RecordError { path: None, msg: msg.to_string() }
    }
}

fn at(path: &str) -> impl FnOnce(RecordError) -> RecordError + '_ {
    move |mut e| {
        e.path.get_or_insert_with(|| path.to_string());
        e
    }
}

struct Recorder<'t, 'a> {
    recording: &'t Recording<'a>,
    path: String,
    depth: usize,
}

impl<'t, 'a> Recorder<'t, 'a> {
    fn below(&self, suffix: &str) -> Recorder<'t, 'a> {
        let path = match (self.path.is_empty(), suffix) {
            (_, "[]") | (true, _) => format!("{}{suffix}", self.path),
            (false, _) => format!("{}.{suffix}", self.path),
        };
        Recorder { recording: self.recording, path, depth: self.depth + 1 }
    }

    fn too_deep(&self) -> Result<(), RecordError> {
        if self.depth > MAX_DEPTH {
            return Err(RecordError { path: Some(self.path.clone()), msg: "recursive type".into() });
        }
        Ok(())
    }
}

macro_rules! placeholder {
    ($($method:ident => $visit:ident($($value:expr)?)),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
            visitor.$visit($($value)?)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Recorder<'_, '_> {
    type Error = RecordError;

    placeholder! {
        deserialize_any => visit_unit(),
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(0),
        deserialize_i16 => visit_i64(0),
        deserialize_i32 => visit_i64(0),
        deserialize_i64 => visit_i64(0),
        deserialize_u8 => visit_u64(0),
        deserialize_u16 => visit_u64(0),
        deserialize_u32 => visit_u64(0),
        deserialize_u64 => visit_u64(0),
        deserialize_f32 => visit_f64(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_char => visit_char('a'),
        deserialize_str => visit_str(""),
        deserialize_string => visit_str(""),
        deserialize_bytes => visit_bytes(&[]),
        deserialize_byte_buf => visit_bytes(&[]),
        deserialize_unit => visit_unit(),
        deserialize_identifier => visit_str(""),
        deserialize_ignored_any => visit_unit(),
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
        self.too_deep()?;
        let element = self.below("[]");
        let offered = self.recording.skipped.contains(&element.path);
        visitor.visit_seq(Elements { element: Some(element).filter(|_| !offered), left: 1 })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, RecordError> {
        self.too_deep()?;
        let element = self.below("[]");
        visitor.visit_seq(Elements { element: Some(element), left: len })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
        self.recording.found.borrow_mut().open.insert(self.path.clone());
        visitor.visit_map(Fields { parent: self, fields: [].iter(), current: None })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.too_deep()?;
        {
            let mut found = self.recording.found.borrow_mut();
            for field in fields {
                found.keys.insert(self.below(field).path);
            }
        }
        visitor.visit_map(Fields { parent: self, fields: fields.iter(), current: None })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        let variant = variants.first().copied().unwrap_or_default();
        visitor.visit_enum(FirstVariant { recorder: self, variant })
    }
}

/// A struct's fields (or nothing, for a map), each offered once with a placeholder value.
struct Fields<'t, 'a> {
    parent: Recorder<'t, 'a>,
    fields: std::slice::Iter<'static, &'static str>,
    current: Option<Recorder<'t, 'a>>,
}

impl<'de> de::MapAccess<'de> for Fields<'_, '_> {
    type Error = RecordError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, RecordError> {
        for field in self.fields.by_ref() {
            let value = self.parent.below(field);
            if self.parent.recording.skipped.contains(&value.path) {
                continue;
            }
            self.current = Some(value);
            return seed.deserialize((*field).into_deserializer()).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, RecordError> {
        let value = self.current.take().expect("serde asks for a value after its key");
        let path = value.path.clone();
        seed.deserialize(value).map_err(at(&path))
    }
}

/// The elements of a list: one placeholder element, so its type is recorded once.
struct Elements<'t, 'a> {
    element: Option<Recorder<'t, 'a>>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, '_> {
    type Error = RecordError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, RecordError> {
        let Some(element) = self.element.as_ref().filter(|_| self.left > 0) else { return Ok(None) };
        self.left -= 1;
        let recorder =
            Recorder { recording: element.recording, path: element.path.clone(), depth: element.depth };
        seed.deserialize(recorder).map(Some).map_err(at(&element.path))
    }
}

/// An enum is recorded through its first variant.
struct FirstVariant<'t, 'a> {
    recorder: Recorder<'t, 'a>,
    variant: &'static str,
}

impl<'de, 't, 'a> de::EnumAccess<'de> for FirstVariant<'t, 'a> {
    type Error = RecordError;
    type Variant = Recorder<'t, 'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), RecordError> {
        let tag = seed.deserialize(self.variant.into_deserializer())?;
        Ok((tag, self.recorder))
    }
}

impl<'de> de::VariantAccess<'de> for Recorder<'_, '_> {
    type Error = RecordError;

    fn unit_variant(self) -> Result<(), RecordError> {
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, RecordError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, RecordError> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Conf {
        #[serde(default)]
        ip_masq: bool,
        mtu: Option<u32>,
        #[serde(rename = "macspoofchk")]
        mac_spoof_check: Option<bool>,
        ipam: Ipam,
        labels: std::collections::BTreeMap<String, String>,
        after_refused: String,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Ipam {
        ranges: Vec<Vec<Range>>,
        routes: Vec<Route>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Range {
        // Refuses the placeholder "": the recording must still reach the fields after it.
        subnet: ipnet::IpNet,
        range_start: Option<std::net::IpAddr>,
        gateway: Option<String>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Route {
        dst: String,
        #[serde(flatten)]
        extra: serde_json::Map<String, serde_json::Value>,
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nested_renamed_and_refused_fields_are_all_found() {
        let keys = config_keys::<Conf>();
        assert_eq!(
            keys.keys,
            set(&[
                "afterRefused",
                "ipMasq",
                "ipam",
                "ipam.ranges",
                "ipam.ranges[][].gateway",
                "ipam.ranges[][].rangeStart",
                "ipam.ranges[][].subnet",
                "ipam.routes",
                "labels",
                "macspoofchk",
                "mtu",
            ])
        );
        // A map, and a struct with a flattened catch-all, accept any key below them.
        assert_eq!(keys.open, set(&["ipam.routes[]", "labels"]));
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Recursive {
        name: String,
        children: Vec<Recursive>,
    }

    #[test]
    fn a_recursive_type_ends() {
        let keys = config_keys::<Recursive>();
        assert!(keys.keys.contains("children[].children[].name"), "{:?}", keys.keys);
    }
}

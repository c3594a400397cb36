//! Matching JSON object keys to struct fields without regard to case, as the reference does.
//!
//! The Go plugins decode every configuration with `encoding/json`, which matches an object
//! key to a struct field by its exact name first and otherwise by the first field whose name
//! equals the key under case folding. So `"IsGateway": true` works with the Go bridge, and
//! the CRI path sends capability arguments marshalled from Go structs with Go's field names
//! (`{"portMappings":[{"HostPort":8080,"ContainerPort":80,...}]}`). This module is the one
//! place that rule lives, for every configuration type of the workspace:
//!
//! - [`FoldKeys`] wraps any serde [`Deserializer`]; whenever a struct is deserialised through
//!   it, each key is renamed to the field it folds to before the struct sees it. Maps
//!   (`HashMap`, `serde_json::Map`, `Value`) keep their keys exactly as written.
//! - [`with_extra`] is `#[serde(flatten)] extra: Map` made foldable: serde's flatten asks the
//!   deserializer for a map, which hides the field names, so structs that keep unknown keys
//!   deserialise their known fields through it instead.
//! - [`get`] looks a name up in a map the same way (`runtimeConfig.bandwidth`).
//! - [`deserialize`] is the entry point: it also tells where a failure arose (the [`path`]
//!   module), which configuration errors must name.
//!
//! Where Go lets the last of two keys that fold to one field win, serde refuses the object
//! as having a duplicate field: an ambiguous configuration fails closed.

use serde::de::value::{MapAccessDeserializer, StrDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt;

/// Calls `$forward! { ... }` with every `Deserializer` method but `deserialize_struct`
/// (the deserializers here each treat that one apart), so the wrappers in this module and
/// in [`path`] forward one list rather than two copies of it.
macro_rules! forward_deserialize_methods {
    ($forward:ident) => {
        $forward! {
            deserialize_any();
            deserialize_bool();
            deserialize_i8();
            deserialize_i16();
            deserialize_i32();
            deserialize_i64();
            deserialize_i128();
            deserialize_u8();
            deserialize_u16();
            deserialize_u32();
            deserialize_u64();
            deserialize_u128();
            deserialize_f32();
            deserialize_f64();
            deserialize_char();
            deserialize_str();
            deserialize_string();
            deserialize_bytes();
            deserialize_byte_buf();
            deserialize_option();
            deserialize_unit();
            deserialize_unit_struct(name: &'static str);
            deserialize_newtype_struct(name: &'static str);
            deserialize_seq();
            deserialize_tuple(len: usize);
            deserialize_tuple_struct(name: &'static str, len: usize);
            deserialize_map();
            deserialize_enum(name: &'static str, variants: &'static [&'static str]);
            deserialize_identifier();
            deserialize_ignored_any();
        }
    };
}

pub mod path;
use path::{CaptureKey, Chain, Trail};

/// Whether `key` names `field` under Go's case folding. Field names are ASCII; besides the
/// ASCII letters, exactly two characters fold to an ASCII letter under Unicode simple case
/// folding — KELVIN SIGN to `k` and LATIN SMALL LETTER LONG S to `s` — and Go honours them.
pub fn folds_to(key: &str, field: &str) -> bool {
    let mut field_chars = field.chars();
    for k in key.chars() {
        let Some(f) = field_chars.next() else { return false };
        let same = k.eq_ignore_ascii_case(&f)
            || (k == '\u{212A}' && f.eq_ignore_ascii_case(&'k'))
            || (k == '\u{017F}' && f.eq_ignore_ascii_case(&'s'));
        if !same {
            return false;
        }
    }
    field_chars.next().is_none()
}

/// The field `key` sets: the field of that exact name, else the first (in declaration
/// order) whose name folds to it; `None` for a key no field takes.
pub fn resolve<'f>(fields: &[&'f str], key: &str) -> Option<&'f str> {
    fields.iter().find(|f| **f == key).or_else(|| fields.iter().find(|f| folds_to(key, f))).copied()
}

/// The value a struct field called `name` would take from `map`: the exact key, else the
/// first key that folds to it.
pub fn get<'m>(map: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    map.get(name).or_else(|| map.iter().find(|(k, _)| folds_to(k, name)).map(|(_, v)| v))
}

/// Deserialises `T` from `de` with keys folded. A failure comes with the path to where it
/// arose (`ipam.ranges[0][0].subnet`, `.` for the root), keys as the input spelt them.
pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(de: D) -> Result<T, (String, D::Error)> {
    let trail = Trail::default();
    match T::deserialize(FoldKeys { de, chain: &Chain::Root, trail: &trail }) {
        Ok(value) => Ok(value),
        Err(error) => Err((trail.into_path(), error)),
    }
}

/// A deserializer that hands every struct its keys renamed to the fields they fold to, and
/// records in `trail` where a failure arose (`chain` leads to the value it reads).
struct FoldKeys<'p, D> {
    de: D,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

macro_rules! forward_to_inner {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            let FoldKeys { de, chain, trail } = self;
            de.$method($($arg,)* Folding::plain(visitor, chain, trail)).map_err(|e| trail.mark(chain, e))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for FoldKeys<'_, D> {
    type Error = D::Error;

    forward_deserialize_methods!(forward_to_inner);

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let FoldKeys { de, chain, trail } = self;
        let folding = Folding { visitor, fields: Some(fields), chain, trail };
        de.deserialize_struct(name, fields, folding).map_err(|e| trail.mark(chain, e))
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

/// Wraps the visitor so that what it is handed (maps, sequences, options) folds in turn;
/// `fields` is set when the visitor is a struct's.
struct Folding<'p, V> {
    visitor: V,
    fields: Option<&'static [&'static str]>,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'p, V> Folding<'p, V> {
    fn plain(visitor: V, chain: &'p Chain<'p>, trail: &'p Trail) -> Self {
        Folding { visitor, fields: None, chain, trail }
    }
}

macro_rules! forward_visits {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.visitor.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Folding<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visits! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_some(FoldKeys { de: d, chain: self.chain, trail: self.trail })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_newtype_struct(FoldKeys { de: d, chain: self.chain, trail: self.trail })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_seq(FoldingSeq { seq, index: 0, chain: self.chain, trail: self.trail })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let (chain, trail) = (self.chain, self.trail);
        self.visitor.visit_map(FoldingMap { map, fields: self.fields, key: None, chain, trail })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_enum(FoldingEnum { data, chain: self.chain, trail: self.trail })
    }
}

/// A seed whose value is deserialised through [`FoldKeys`].
struct FoldingSeed<'p, S> {
    seed: S,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FoldingSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(FoldKeys { de: d, chain: self.chain, trail: self.trail })
    }
}

struct FoldingSeq<'p, A> {
    seq: A,
    index: usize,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for FoldingSeq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        let element = Chain::Index { parent: self.chain, index: self.index };
        self.index += 1;
        let trail = self.trail;
        self.seq
            .next_element_seed(FoldingSeed { seed, chain: &element, trail })
            .map_err(|e| trail.mark(self.chain, e))
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

/// The entries of an object: keys renamed when the object is a struct's, values folding.
/// `key` is the current entry's key as written, for the path of a failure in its value.
struct FoldingMap<'p, A> {
    map: A,
    fields: Option<&'static [&'static str]>,
    key: Option<String>,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FoldingMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let (chain, trail) = (self.chain, self.trail);
        let Some(fields) = self.fields else {
            return self.map.next_key_seed(CaptureKey { seed, slot: &mut self.key }).map_err(|e| {
                let key = self.key.take();
                trail.mark(&Chain::Key { parent: chain, key }, e)
            });
        };
        let key = self
            .map
            .next_key::<String>()
            .map_err(|e| trail.mark(&Chain::Key { parent: chain, key: None }, e));
        let Some(key) = key? else { return Ok(None) };
        // A struct's own complaint about the key (unknown, duplicate) is placed at the struct.
        let value = match resolve(fields, &key) {
            Some(field) => seed.deserialize(StrDeserializer::<A::Error>::new(field)),
            // Not a field: the struct ignores it or reports it, under the name it was given.
            None => seed.deserialize(StrDeserializer::<A::Error>::new(&key)),
        };
        self.key = Some(key);
        value.map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        let member = Chain::Key { parent: self.chain, key: self.key.take() };
        let trail = self.trail;
        self.map
            .next_value_seed(FoldingSeed { seed, chain: &member, trail })
            .map_err(|e| trail.mark(self.chain, e))
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

struct FoldingEnum<'p, A> {
    data: A,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'de, 'p, A: EnumAccess<'de>> EnumAccess<'de> for FoldingEnum<'p, A> {
    type Error = A::Error;
    type Variant = FoldingVariant<'p, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self::Variant), A::Error> {
        let FoldingEnum { data, chain, trail } = self;
        let mut name = None;
        let (value, variant) =
            data.variant_seed(CaptureKey { seed, slot: &mut name }).map_err(|e| trail.mark(chain, e))?;
        Ok((value, FoldingVariant { variant, name, chain, trail }))
    }
}

/// An enum's content; a failure in it is placed at the variant's name.
struct FoldingVariant<'p, A> {
    variant: A,
    name: Option<String>,
    chain: &'p Chain<'p>,
    trail: &'p Trail,
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for FoldingVariant<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        let at = Chain::Key { parent: self.chain, key: self.name };
        self.variant.unit_variant().map_err(|e| self.trail.mark(&at, e))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        let (at, trail) = (Chain::Key { parent: self.chain, key: self.name }, self.trail);
        self.variant
            .newtype_variant_seed(FoldingSeed { seed, chain: &at, trail })
            .map_err(|e| trail.mark(&at, e))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let (at, trail) = (Chain::Key { parent: self.chain, key: self.name }, self.trail);
        self.variant.tuple_variant(len, Folding::plain(visitor, &at, trail)).map_err(|e| trail.mark(&at, e))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let (at, trail) = (Chain::Key { parent: self.chain, key: self.name }, self.trail);
        let folding = Folding { visitor, fields: Some(fields), chain: &at, trail };
        self.variant.struct_variant(fields, folding).map_err(|e| trail.mark(&at, e))
    }
}

/// Deserialises the struct `T` (derived, without `flatten`) together with every key it does
/// not name, each kept with its value as written, in order. This is what
/// `#[serde(flatten)] extra: Map<String, Value>` does, except that the deserializer is asked
/// for a struct with `T`'s field names, so that [`FoldKeys`] can match keys to them.
pub fn with_extra<'de, T, D>(d: D, name: &'static str) -> Result<(T, Map<String, Value>), D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    let fields = field_names::<T>();
    d.deserialize_struct(name, fields, ExtraVisitor::<T> { fields, known: std::marker::PhantomData })
}

struct ExtraVisitor<T> {
    fields: &'static [&'static str],
    known: std::marker::PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ExtraVisitor<T> {
    type Value = (T, Map<String, Value>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut extra = Map::new();
        let known = T::deserialize(MapAccessDeserializer::new(KnownKeys {
            map,
            fields: self.fields,
            extra: &mut extra,
        }))?;
        Ok((known, extra))
    }
}

/// The entries of an object that name one of `fields`; the others go to `extra`.
struct KnownKeys<'x, A> {
    map: A,
    fields: &'static [&'static str],
    extra: &'x mut Map<String, Value>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for KnownKeys<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            if self.fields.contains(&key.as_str()) {
                return seed.deserialize(StringDeserializer::<A::Error>::new(key)).map(Some);
            }
            let value: Value = self.map.next_value()?;
            self.extra.insert(key, value);
        }
        Ok(None)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// The field names a derived `Deserialize` passes to `deserialize_struct`, learnt by asking
/// it to deserialise from a deserializer that only records them. Empty for anything that is
/// not a plain struct.
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldProbe) {
        Err(ProbeAnswer(Some(fields))) => fields,
        _ => &[],
    }
}

struct FieldProbe;

#[derive(Debug)]
struct ProbeAnswer(Option<&'static [&'static str]>);

impl fmt::Display for ProbeAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field name probe")
    }
}

impl std::error::Error for ProbeAnswer {}

impl de::Error for ProbeAnswer {
    fn custom<M: fmt::Display>(_: M) -> Self {
        ProbeAnswer(None)
    }
}

impl<'de> Deserializer<'de> for FieldProbe {
    type Error = ProbeAnswer;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeAnswer> {
        Err(ProbeAnswer(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, ProbeAnswer> {
        Err(ProbeAnswer(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Implements `Serialize` and `Deserialize` for a struct derived with
/// `#[serde(remote = "Self")]` whose `extra: Map<String, Value>` field, marked
/// `#[serde(flatten, skip_deserializing)]`, holds the keys its other fields do not name:
/// deserialising goes through [`with_extra`](crate::fold::with_extra), so the declared fields
/// fold and the rest are kept as written.
#[macro_export]
macro_rules! keeps_unknown_keys {
    ($ty:ident) => {
        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                $ty::serialize(self, s)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                /// The declared fields alone, as the derive reads them.
                struct Declared($ty);
                impl<'de> ::serde::Deserialize<'de> for Declared {
                    fn deserialize<D: ::serde::Deserializer<'de>>(
                        d: D,
                    ) -> ::std::result::Result<Self, D::Error> {
                        $ty::deserialize(d).map(Declared)
                    }
                }
                let (Declared(mut value), extra) = $crate::fold::with_extra(d, stringify!($ty))?;
                value.extra = extra;
                Ok(value)
            }
        }
    };
}

#[cfg(test)]
mod tests;

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

/// A deserializer that hands every struct its keys renamed to the fields they fold to.
pub struct FoldKeys<D>(pub D);

macro_rules! forward_to_inner {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method($($arg,)* Folding::plain(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for FoldKeys<D> {
    type Error = D::Error;

    forward_to_inner! {
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

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, Folding { visitor, fields: Some(fields) })
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// Wraps the visitor so that what it is handed (maps, sequences, options) folds in turn;
/// `fields` is set when the visitor is a struct's.
struct Folding<V> {
    visitor: V,
    fields: Option<&'static [&'static str]>,
}

impl<V> Folding<V> {
    fn plain(visitor: V) -> Self {
        Folding { visitor, fields: None }
    }
}

macro_rules! forward_visits {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.visitor.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Folding<V> {
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
        self.visitor.visit_some(FoldKeys(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_newtype_struct(FoldKeys(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_seq(FoldingSeq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_map(FoldingMap { map, fields: self.fields })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_enum(FoldingEnum(data))
    }
}

/// A seed whose value is deserialised through [`FoldKeys`].
struct FoldingSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FoldingSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(FoldKeys(d))
    }
}

struct FoldingSeq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for FoldingSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(FoldingSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// The entries of an object: keys renamed when the object is a struct's, values folding.
struct FoldingMap<A> {
    map: A,
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FoldingMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let Some(fields) = self.fields else { return self.map.next_key_seed(seed) };
        let Some(key) = self.map.next_key::<String>()? else { return Ok(None) };
        match resolve(fields, &key) {
            Some(field) => seed.deserialize(StrDeserializer::<A::Error>::new(field)),
            // Not a field: the struct ignores it or reports it, under the name it was given.
            None => seed.deserialize(StringDeserializer::<A::Error>::new(key)),
        }
        .map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(FoldingSeed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

struct FoldingEnum<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for FoldingEnum<A> {
    type Error = A::Error;
    type Variant = FoldingVariant<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(seed)?;
        Ok((value, FoldingVariant(variant)))
    }
}

struct FoldingVariant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for FoldingVariant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(FoldingSeed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Folding::plain(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Folding { visitor, fields: Some(fields) })
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

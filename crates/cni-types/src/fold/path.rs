//! The path to a deserialisation failure (`ipam.ranges[0][0].subnet`), tracked by the same
//! wrappers that fold keys.
//!
//! A serde error does not say where in the document it arose, but a configuration error
//! must name the field. The folding wrappers already stand between every value and its
//! deserializer, so they also keep a [`Chain`] of the keys and indices leading to the value
//! being read (on the stack, nothing allocated while all goes well), and the first wrapper
//! an error passes records that chain in the [`Trail`]. One layer doing both keeps the code
//! every configuration type is instantiated with to one set of wrappers.
//!
//! The rendering: keys joined by `.`, sequence indices as `[i]`, a key that is not a string
//! or could not be read as `?`, and `.` for the document's root. Keys appear as the input
//! spelt them.

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};
use std::cell::RefCell;
use std::fmt::{self, Write as _};

/// The way from the document's root to the value being read, one link per nesting level.
pub(super) enum Chain<'a> {
    Root,
    /// An object member (or enum variant); `None` when its key was not captured.
    Key {
        parent: &'a Chain<'a>,
        key: Option<String>,
    },
    Index {
        parent: &'a Chain<'a>,
        index: usize,
    },
}

/// Where the first failure of one deserialisation happened.
#[derive(Default)]
pub struct Trail(RefCell<Option<String>>);

impl Trail {
    /// Records `chain` as the failure's place unless an inner wrapper already recorded one,
    /// and hands the error on.
    pub(super) fn mark<E>(&self, chain: &Chain<'_>, error: E) -> E {
        self.record(chain);
        error
    }

    #[cold]
    #[inline(never)]
    fn record(&self, chain: &Chain<'_>) {
        let mut place = self.0.borrow_mut();
        if place.is_none() {
            *place = Some(render(chain));
        }
    }

    /// The recorded path, or `.` when the failure was at the root (or none was recorded).
    pub fn into_path(self) -> String {
        self.0.into_inner().unwrap_or_else(|| ".".to_string())
    }
}

fn render(mut chain: &Chain<'_>) -> String {
    let mut steps = Vec::new();
    loop {
        match chain {
            Chain::Root => break,
            Chain::Key { parent, .. } | Chain::Index { parent, .. } => {
                steps.push(chain);
                chain = parent;
            }
        }
    }
    if steps.is_empty() {
        return ".".to_string();
    }
    let mut path = String::new();
    for (n, step) in steps.iter().rev().enumerate() {
        match step {
            Chain::Index { index, .. } => {
                let _ = write!(path, "[{index}]");
            }
            Chain::Key { key, .. } => {
                if n > 0 {
                    path.push('.');
                }
                path.push_str(key.as_deref().unwrap_or("?"));
            }
            Chain::Root => {}
        }
    }
    path
}

/// A seed for a key (or an enum variant) that also notes the key, as text, in `slot`.
pub(super) struct CaptureKey<'s, S> {
    pub seed: S,
    pub slot: &'s mut Option<String>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for CaptureKey<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(KeyDeserializer { de: d, slot: self.slot })
    }
}

struct KeyDeserializer<'s, D> {
    de: D,
    slot: &'s mut Option<String>,
}

macro_rules! forward_capturing {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method($($arg,)* KeyVisitor { visitor, slot: self.slot })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyDeserializer<'_, D> {
    type Error = D::Error;

    forward_deserialize_methods!(forward_capturing);
    forward_capturing! {
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

struct KeyVisitor<'s, V> {
    visitor: V,
    slot: &'s mut Option<String>,
}

/// Visits that note their value as the key's text before handing it on.
macro_rules! capture_visits {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            *self.slot = Some(v.to_string());
            self.visitor.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    capture_visits! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        *self.slot = Some(v.clone());
        self.visitor.visit_string(v)
    }

    // The rest is no key text: handed on as is.
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
        self.visitor.visit_i128(v)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
        self.visitor.visit_u128(v)
    }
    fn visit_f32<E: de::Error>(self, v: f32) -> Result<Self::Value, E> {
        self.visitor.visit_f32(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.visitor.visit_f64(v)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        self.visitor.visit_bytes(v)
    }
    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        self.visitor.visit_borrowed_bytes(v)
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        self.visitor.visit_byte_buf(v)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visitor.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_some(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_newtype_struct(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_map(map)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_enum(data)
    }
}

//! Reading an event's payload once its `type` is known, instead of buffering it first.
//!
//! serde's derived reader for an internally tagged enum cannot know where the tag is, so it copies the whole map
//! into its own intermediate tree, finds the tag there, then reads the variant from that copy. A log's load spent
//! about a third of its time so. troupe writes the tag first (serde's writer puts it first), so a reader that
//! looks at the first key can read the variant straight from the JSON. [`tagged_payload!`] declares the enum and
//! an externally tagged twin with the same fields; [`deserialize_tag_first`] reads the tag, then hands the rest of
//! the map to the twin as its variant's body. A payload whose tag is not first (one built by hand, or by
//! `serde_json::json!`, which sorts its keys) is read through a buffer of `serde_json::Value`s.
//!
//! What it reads differently from serde's derive, none of which troupe or its clients write: a payload written as
//! an array (`["session_reverted", 4]`) is refused; with the tag first, a second `type` later in the map is ignored
//! as an unknown field (serde refused it; so does the buffered path); and in a payload whose tag comes later, an
//! object with a key twice keeps the last (a `Value` holds one), where serde refused it.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, MapDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, VariantAccess, Visitor};
use serde::forward_to_deserialize_any;

const TAG: &str = "type";

/// Why a unit or tuple variant cannot be read: every kind of payload has named fields.
const NAMED_FIELDS: &str = "an event payload's kind has named fields";

/// Declares an enum tagged by `type` whose variants all have named fields, in snake_case on the wire, with an
/// `Unknown` variant appended for kinds this build does not model, and its [`serde::Deserialize`] through
/// [`deserialize_tag_first`]. The macro writes the enum's `#[serde(tag, rename_all)]` itself, so the twin cannot
/// disagree with it; the enum itself takes only doc comments and one `#[derive]` (`Serialize` and `JsonSchema`,
/// not `Deserialize`), and any other attribute there fails to match, since it would reach the enum and not its
/// twin. A variant's and a field's attributes apply to both alike (a `#[schemars]` one, which the twin does not
/// know, fails to compile). rustfmt does not format inside a macro's braces: keep the enum as it would.
macro_rules! tagged_payload {
    (
        $(#[doc = $doc:literal])*
        #[derive($($derive:path),* $(,)?)]
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident {
                    $( $(#[$field_attr:meta])* $field:ident : $field_ty:ty ),* $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive($($derive),*)]
        #[serde(tag = "type", rename_all = "snake_case")]
        $vis enum $name {
            $( $(#[$variant_attr])* $variant { $( $(#[$field_attr])* $field: $field_ty ),* }, )*
            /// A kind this build does not model (yet); its JSON is preserved where it is stored.
            #[serde(other)]
            Unknown,
        }

        /// The same kinds, tagged externally: what reads a variant's fields once its tag is known.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum TagFirst {
            $( $(#[$variant_attr])* $variant { $( $(#[$field_attr])* $field: $field_ty ),* }, )*
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $crate::types::events::tag_first::deserialize_tag_first::<D, TagFirst, $name>(
                    deserializer,
                    || $name::Unknown,
                )
            }
        }

        impl From<TagFirst> for $name {
            fn from(kind: TagFirst) -> Self {
                match kind {
                    $( TagFirst::$variant { $($field),* } => $name::$variant { $($field),* }, )*
                }
            }
        }
    };
}
pub(crate) use tagged_payload;

/// Reads a payload `P` from a map: `T` (the externally tagged twin) reads the variant named by the tag, and a tag
/// that `T` does not know gives `unknown()`.
pub(crate) fn deserialize_tag_first<'de, D, T, P>(deserializer: D, unknown: fn() -> P) -> Result<P, D::Error>
where
    D: Deserializer<'de>,
    T: de::Deserialize<'de> + Into<P>,
{
    deserializer.deserialize_map(PayloadVisitor::<T, P> { unknown, kinds: PhantomData })
}

struct PayloadVisitor<T, P> {
    unknown: fn() -> P,
    kinds: PhantomData<fn() -> T>,
}

impl<'de, T, P> Visitor<'de> for PayloadVisitor<T, P>
where
    T: de::Deserialize<'de> + Into<P>,
{
    type Value = P;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an event payload: an object with a `type`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<P, A::Error> {
        let first: Option<Cow<'de, str>> = map.next_key_seed(CowStr)?;
        match first {
            None => Err(de::Error::missing_field(TAG)),
            Some(key) if key == TAG => {
                let tag = map.next_value_seed(CowStr)?;
                read_kind::<T, P, A>(&tag, &mut map, self.unknown)
            }
            Some(key) => {
                // The tag is somewhere later: keep the other entries until it comes.
                let mut rest = vec![(key.into_owned(), map.next_value::<serde_json::Value>()?)];
                let mut tag = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == TAG {
                        if tag.is_some() {
                            return Err(de::Error::duplicate_field(TAG));
                        }
                        tag = Some(map.next_value::<String>()?);
                    } else {
                        rest.push((key, map.next_value()?));
                    }
                }
                let tag = tag.ok_or_else(|| de::Error::missing_field(TAG))?;
                let mut rest = MapDeserializer::<_, serde_json::Error>::new(rest.into_iter());
                read_kind::<T, P, _>(&tag, &mut rest, self.unknown).map_err(de::Error::custom)
            }
        }
    }
}

/// Reads the variant `tag` names from the rest of `map`; an unknown tag skips the rest and gives `unknown()`.
fn read_kind<'de, T, P, A>(tag: &str, map: &mut A, unknown: fn() -> P) -> Result<P, A::Error>
where
    T: de::Deserialize<'de> + Into<P>,
    A: MapAccess<'de>,
{
    let unknown_tag = Cell::new(false);
    match T::deserialize(VariantBody { tag, map: &mut *map, unknown_tag: &unknown_tag }) {
        Ok(kind) => Ok(kind.into()),
        Err(_) if unknown_tag.get() => {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(unknown())
        }
        Err(error) => Err(error),
    }
}

/// The tag and the rest of the map, seen by the twin as an externally tagged variant and its body.
struct VariantBody<'a, A> {
    tag: &'a str,
    map: &'a mut A,
    /// Set when the twin did not know the tag.
    unknown_tag: &'a Cell<bool>,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for VariantBody<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for VariantBody<'_, A> {
    type Error = A::Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), A::Error> {
        match seed.deserialize(StrDeserializer::<A::Error>::new(self.tag)) {
            Ok(variant) => Ok((variant, self)),
            Err(error) => {
                self.unknown_tag.set(true);
                Err(error)
            }
        }
    }
}

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for VariantBody<'_, A> {
    type Error = A::Error;

    // The macro admits only variants with named fields: the twin never asks for a unit or tuple variant.
    fn unit_variant(self) -> Result<(), A::Error> {
        Err(de::Error::custom(NAMED_FIELDS))
    }

    // serde's derive reads a struct variant with a `#[serde(flatten)]` field as a newtype of its map.
    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        seed.deserialize(MapAccessDeserializer::new(self.map))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _visitor: V) -> Result<V::Value, A::Error> {
        Err(de::Error::custom(NAMED_FIELDS))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self.map)
    }
}

/// A key or tag, borrowed from the input when it can be.
struct CowStr;

impl<'de> DeserializeSeed<'de> for CowStr {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for CowStr {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(value))
    }
}

#[cfg(test)]
mod tests {
    use crate::types::common::{ModelSelection, RunSelection, SessionOrigin};
    use crate::types::events::{EventPayload, StoredEvent, TitleChangeKind};

    fn payload(text: &str) -> Result<EventPayload, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Reads `text` as written (the tag first) and again through a `Value`, whose keys are sorted so that the tag
    /// comes later: both must agree, and a written payload must read back as itself.
    fn both_ways(text: &str) -> EventPayload {
        let read = payload(text).unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_ne!(value.as_object().unwrap().keys().next().map(String::as_str), Some("type"), "{text}");
        assert_eq!(serde_json::from_value::<EventPayload>(value).unwrap(), read, "{text}");
        assert_eq!(payload(&serde_json::to_string(&read).unwrap()).unwrap(), read, "{text}");
        read
    }

    #[test]
    fn a_payload_reads_the_same_with_its_tag_first_or_later() {
        assert_eq!(
            both_ways(r#"{"type":"session_title_committed","title":"t","change":"set","client_rename_id":"c"}"#),
            EventPayload::SessionTitleCommitted {
                title: Some("t".into()),
                change: TitleChangeKind::Set,
                client_rename_id: "c".into()
            }
        );
        // Defaults for absent fields, an unknown field ignored, an escaped tag.
        assert_eq!(
            both_ways(r#"{"type":"run_completed","extra":{"nested":[1,2]}}"#),
            EventPayload::RunCompleted { final_text: None }
        );
        assert_eq!(
            both_ways(r#"{"type":"session_\u0072everted","through_seq":4}"#),
            EventPayload::SessionReverted { through_seq: 4 }
        );
        // Nested structs and a nested tagged enum, with a field that must be present though null.
        let created = EventPayload::SessionCreated {
            origin: SessionOrigin::Delegated {
                root_session_id: "r".into(),
                parent_session_id: "p".into(),
                parent_run_id: "u".into(),
                parent_tool_call_id: "c".into(),
                depth: 2,
            },
            cwd: "/w".into(),
            selection: RunSelection {
                agent: "build".into(),
                model: ModelSelection { model: "local/echo".into(), variant: None },
                preset: None,
            },
        };
        assert_eq!(both_ways(&serde_json::to_string(&created).unwrap()), created);
        let no_variant = r#"{"type":"session_created","origin":{"type":"root"},"cwd":"/w",
            "selection":{"agent":"build","model":{"model":"local/echo"}}}"#;
        assert!(payload(no_variant).unwrap_err().to_string().contains("variant"));
    }

    /// The kinds the enum's schema names (what it writes), each of which the twin must know: a kind the twin
    /// spelled otherwise would be read back as `Unknown`.
    #[test]
    fn every_kind_the_enum_writes_is_read_as_itself() {
        let schema = serde_json::to_value(schemars::schema_for!(EventPayload)).unwrap();
        let kinds: Vec<&str> = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|kind| kind["properties"]["type"]["const"].as_str())
            .filter(|kind| *kind != "unknown")
            .collect();
        assert!(kinds.len() > 40, "{kinds:?}");
        for kind in kinds {
            // Without its fields a known kind fails for one it lacks; only an unknown one reads as `Unknown`.
            match payload(&format!(r#"{{"type":"{kind}"}}"#)) {
                Ok(read) => assert_eq!(read.kind(), Some(kind)),
                Err(error) => assert!(error.to_string().starts_with("missing field"), "{kind}: {error}"),
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_skipped_whole_wherever_its_tag_is() {
        assert_eq!(
            payload(r#"{"type":"a_future_kind","x":{"y":[1,{"z":2}]},"w":"v"}"#).unwrap(),
            EventPayload::Unknown
        );
        assert_eq!(payload(r#"{"a":{"b":[1]},"type":"a_future_kind","w":"v"}"#).unwrap(), EventPayload::Unknown);
        // What follows the payload in its event is still read.
        let line = r#"{"payload":{"type":"a_future_kind","x":{"y":[1]}},"session_id":"s","run_id":null,"seq":9,
            "timestamp":"t","origin":"user"}"#;
        let event: StoredEvent = serde_json::from_str(line).unwrap();
        assert_eq!((event.payload, event.seq, event.origin.as_deref()), (EventPayload::Unknown, 9, Some("user")));
    }

    /// A twin whose field borrows from the input can only be read straight from the text, never through the
    /// buffer of `Value`s: so it tells which way a payload was read.
    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum ProbeTwin<'a> {
        Probe {
            #[serde(borrow)]
            name: &'a str,
        },
        /// A kind with a flattened field: serde reads its body as a newtype of the map.
        Flat {
            #[serde(flatten)]
            rest: std::collections::BTreeMap<String, u64>,
        },
    }

    #[derive(Debug, PartialEq)]
    enum Probe<'a> {
        Named(&'a str),
        Flat(Vec<(String, u64)>),
        Unknown,
    }

    impl<'a> From<ProbeTwin<'a>> for Probe<'a> {
        fn from(twin: ProbeTwin<'a>) -> Self {
            match twin {
                ProbeTwin::Probe { name } => Probe::Named(name),
                ProbeTwin::Flat { rest } => Probe::Flat(rest.into_iter().collect()),
            }
        }
    }

    fn probe(text: &str) -> Result<Probe<'_>, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        super::deserialize_tag_first::<_, ProbeTwin, Probe>(&mut deserializer, || Probe::Unknown)
    }

    #[test]
    fn with_its_tag_first_a_payload_is_read_straight_from_the_text_and_otherwise_through_a_buffer() {
        assert_eq!(probe(r#"{"type":"probe","name":"x"}"#).unwrap(), Probe::Named("x"));
        let buffered = probe(r#"{"name":"x","type":"probe"}"#).unwrap_err().to_string();
        assert!(buffered.contains("borrowed string"), "{buffered}");
        // An escaped first key is still the tag.
        assert_eq!(probe(r#"{"typ\u0065":"probe","name":"x"}"#).unwrap(), Probe::Named("x"));
        assert_eq!(
            probe(r#"{"type":"flat","a":1,"b":2}"#).unwrap(),
            Probe::Flat(vec![("a".into(), 1), ("b".into(), 2)])
        );
        assert_eq!(probe(r#"{"a":1,"type":"flat"}"#).unwrap(), Probe::Flat(vec![("a".into(), 1)]));
        assert_eq!(probe(r#"{"type":"later","name":"x"}"#).unwrap(), Probe::Unknown);
    }

    #[test]
    fn a_payload_without_its_tag_or_fields_is_an_error_that_names_them() {
        for (text, says) in [
            (r#"{}"#, "missing field `type`"),
            (r#"{"through_seq":4}"#, "missing field `type`"),
            (r#"{"type":"session_reverted"}"#, "missing field `through_seq`"),
            (r#"{"through_seq":"four","type":"session_reverted"}"#, "invalid type"),
            (r#"{"type":7,"through_seq":4}"#, "invalid type"),
            (r#"[]"#, "invalid type"),
            (r#"{"through_seq":4,"type":"session_reverted","type":"run_completed"}"#, "duplicate field `type`"),
        ] {
            let error = payload(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}

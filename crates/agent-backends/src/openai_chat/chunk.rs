//! A streamed `chat.completion.chunk`, decoded in place.
//!
//! A chunk arrives per token. Serde's derived structs build each nested struct on the stack
//! and move it whole into its parent, and the parent into its own: for a chunk (288 bytes,
//! with a 200-byte choice and delta inside) that was several `memmove`s per token, the
//! largest frame of ours in issue 16's profile. Here the visitors write every field through
//! `&mut` into one [`ChunkParts`], which the decoder then reads. What is accepted and refused
//! is what the derived structs accepted and refused: unknown fields are skipped, a repeated
//! field is an error, `null` reads as absent.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::decode::{WireMessage, WireUsage, XGroq, lenient_string};

/// One chunk's fields, as the decoder reads them.
#[derive(Default)]
pub(super) struct ChunkParts<'a> {
    /// Borrowed: every chunk repeats the id and model, needed only from the first.
    pub(super) id: Option<Cow<'a, str>>,
    pub(super) model: Option<Cow<'a, str>>,
    /// The first choice with index 0: a chunk has one (the adapter never asks for `n > 1`).
    pub(super) first: ChoiceParts<'a>,
    /// `first` holds a choice.
    pub(super) has_first: bool,
    /// Further choices with index 0, in order (not seen from OpenAI; kept as before).
    pub(super) more: Vec<ChoiceParts<'a>>,
    /// Boxed, as these are in one chunk of a stream if any: the parts stay small to clear.
    pub(super) usage: Option<Box<WireUsage>>,
    pub(super) x_groq: Option<Box<XGroq>>,
    pub(super) error: Option<Box<Value>>,
}

impl<'a> ChunkParts<'a> {
    /// The choices with index 0, in the order they came.
    pub(super) fn choices(&mut self) -> impl Iterator<Item = &mut ChoiceParts<'a>> {
        let first = self.has_first.then_some(&mut self.first);
        first.into_iter().chain(self.more.iter_mut())
    }
}

/// One choice of a chunk.
#[derive(Default)]
pub(super) struct ChoiceParts<'a> {
    pub(super) index: Option<u32>,
    /// The delta, written in place; `has_delta` says whether the choice had one.
    pub(super) delta: WireMessage,
    pub(super) has_delta: bool,
    pub(super) finish_reason: Option<Cow<'a, str>>,
}

/// Decodes `data`, one chunk's JSON, into `parts` (which starts empty).
pub(super) fn parse<'a>(data: &'a str, parts: &mut ChunkParts<'a>) -> serde_json::Result<()> {
    let mut deserializer = serde_json::Deserializer::from_str(data);
    deserializer.deserialize_struct("Chunk", CHUNK_FIELDS, ChunkVisitor(parts))?;
    deserializer.end()
}

const CHUNK_FIELDS: &[&str] = &["id", "model", "choices", "usage", "x_groq", "error"];
const CHOICE_FIELDS: &[&str] = &["index", "delta", "finish_reason"];
const DELTA_FIELDS: &[&str] = &[
    "content",
    "refusal",
    "reasoning_content",
    "reasoning",
    "tool_calls",
    "audio",
    "images",
];

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChunkField {
    Id,
    Model,
    Choices,
    Usage,
    XGroq,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChoiceField {
    Index,
    Delta,
    FinishReason,
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum DeltaField {
    Content,
    Refusal,
    ReasoningContent,
    Reasoning,
    ToolCalls,
    Audio,
    Images,
    #[serde(other)]
    Other,
}

/// Fields seen so far in one object, to refuse a repeated one as the derived structs did.
/// A field is its enum variant's position, which is its name's position in the object's
/// `*_FIELDS` list (`field_lists_follow_the_enums` holds them together).
#[derive(Default)]
struct Seen(u16);

impl Seen {
    fn first<E: de::Error>(
        &mut self,
        field: usize,
        names: &'static [&'static str],
    ) -> Result<(), E> {
        let mask = 1 << field;
        if self.0 & mask != 0 {
            return Err(E::duplicate_field(names[field]));
        }
        self.0 |= mask;
        Ok(())
    }
}

struct ChunkVisitor<'p, 'a>(&'p mut ChunkParts<'a>);

impl<'de: 'a, 'a> Visitor<'de> for ChunkVisitor<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct Chunk")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let parts = self.0;
        let mut seen = Seen::default();
        while let Some(field) = map.next_key::<ChunkField>()? {
            if field != ChunkField::Other {
                seen.first(field as usize, CHUNK_FIELDS)?;
            }
            match field {
                ChunkField::Id => {
                    parts.id = map.next_value_seed(BorrowedText)?;
                }
                ChunkField::Model => {
                    parts.model = map.next_value_seed(BorrowedText)?;
                }
                ChunkField::Choices => {
                    map.next_value_seed(ChoicesSeed(&mut *parts))?;
                }
                ChunkField::Usage => {
                    parts.usage = map.next_value()?;
                }
                ChunkField::XGroq => {
                    parts.x_groq = map.next_value()?;
                }
                ChunkField::Error => {
                    parts.error = map.next_value()?;
                }
                ChunkField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// An optional string, borrowed from the input unless it had escapes.
struct BorrowedText;

impl<'de> DeserializeSeed<'de> for BorrowedText {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for BorrowedText {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
        inner.deserialize_str(self)
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(text)))
    }
}

/// A chunk's `choices`: `null` or absent is none; the choices with index 0 are kept.
struct ChoicesSeed<'p, 'a>(&'p mut ChunkParts<'a>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for ChoicesSeed<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for ChoicesSeed<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<(), D::Error> {
        inner.deserialize_seq(self)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let parts = self.0;
        loop {
            if parts.has_first {
                let mut choice = ChoiceParts::default();
                if seq.next_element_seed(ChoiceSeed(&mut choice))?.is_none() {
                    return Ok(());
                }
                if choice.index.unwrap_or(0) == 0 {
                    parts.more.push(choice);
                }
            } else {
                if seq
                    .next_element_seed(ChoiceSeed(&mut parts.first))?
                    .is_none()
                {
                    return Ok(());
                }
                if parts.first.index.unwrap_or(0) == 0 {
                    parts.has_first = true;
                } else {
                    parts.first = ChoiceParts::default();
                }
            }
        }
    }
}

/// One choice, written into the `ChoiceParts` it borrows.
struct ChoiceSeed<'p, 'a>(&'p mut ChoiceParts<'a>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for ChoiceSeed<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_struct("ChunkChoice", CHOICE_FIELDS, self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for ChoiceSeed<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct ChunkChoice")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let choice = self.0;
        let mut seen = Seen::default();
        while let Some(field) = map.next_key::<ChoiceField>()? {
            if field != ChoiceField::Other {
                seen.first(field as usize, CHOICE_FIELDS)?;
            }
            match field {
                ChoiceField::Index => {
                    choice.index = map.next_value()?;
                }
                ChoiceField::Delta => {
                    choice.has_delta = map.next_value_seed(DeltaSeed(&mut choice.delta))?;
                }
                ChoiceField::FinishReason => {
                    choice.finish_reason = map.next_value_seed(BorrowedText)?;
                }
                ChoiceField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A choice's `delta`, written into the `WireMessage` it borrows; `true` when it was there
/// (not `null`).
struct DeltaSeed<'p>(&'p mut WireMessage);

impl<'de> DeserializeSeed<'de> for DeltaSeed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DeltaSeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct WireMessage")
    }

    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<bool, D::Error> {
        inner.deserialize_struct("WireMessage", DELTA_FIELDS, self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let delta = self.0;
        let mut seen = Seen::default();
        while let Some(field) = map.next_key::<DeltaField>()? {
            if field != DeltaField::Other {
                seen.first(field as usize, DELTA_FIELDS)?;
            }
            match field {
                DeltaField::Content => {
                    delta.content = map.next_value()?;
                }
                DeltaField::Refusal => {
                    delta.refusal = map.next_value_seed(Lenient)?;
                }
                DeltaField::ReasoningContent => {
                    delta.reasoning_content = map.next_value_seed(Lenient)?;
                }
                DeltaField::Reasoning => {
                    delta.reasoning = map.next_value_seed(Lenient)?;
                }
                DeltaField::ToolCalls => {
                    delta.tool_calls = map.next_value()?;
                }
                DeltaField::Audio => {
                    delta.audio = map.next_value()?;
                }
                DeltaField::Images => {
                    delta.images = map.next_value()?;
                }
                DeltaField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(true)
    }
}

/// A string field read as `lenient_string` reads it: anything but a string is absent.
struct Lenient;

impl<'de> DeserializeSeed<'de> for Lenient {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        lenient_string(deserializer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn read(json: &str) -> Result<ChunkParts<'_>, serde_json::Error> {
        let mut parts = ChunkParts::default();
        parse(json, &mut parts).map(|()| parts)
    }

    // What is kept is what the derived `Option<Vec<ChunkChoice>>` filtered to index 0 kept.
    #[test]
    fn only_choices_with_index_zero_are_kept_and_null_is_none() {
        let reasons = |json: &str| {
            read(json)
                .unwrap()
                .choices()
                .map(|choice| choice.finish_reason.clone().map(Cow::into_owned))
                .collect::<Vec<_>>()
        };
        assert!(reasons(r#"{"choices": null}"#).is_empty());
        assert!(reasons(r#"{"id": "c"}"#).is_empty());
        assert!(reasons(r#"{"choices": []}"#).is_empty());
        assert_eq!(
            reasons(
                r#"{"choices": [{"index": 1, "finish_reason": "a"}, {"index": 0, "finish_reason": "b"},
                {"finish_reason": "c"}, {"index": 2}]}"#
            ),
            [Some("b".to_owned()), Some("c".to_owned())]
        );
        assert!(read(r#"{"choices": {"index": 0}}"#).is_err());
    }

    #[test]
    fn strings_without_escapes_are_borrowed_and_null_fields_are_absent() {
        let mut parts = read(
            r#"{"id": "chatcmpl-1", "model": "gpt\u002d4o", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "hi", "refusal": null,
            "reasoning": 5, "tool_calls": null}, "logprobs": null, "finish_reason": null}],
            "usage": null, "obfuscation": "x"}"#,
        )
        .unwrap();
        assert!(matches!(parts.id, Some(Cow::Borrowed("chatcmpl-1"))));
        assert!(matches!(parts.model.as_deref(), Some("gpt-4o")));
        assert!(parts.usage.is_none() && parts.error.is_none());
        let choice = parts.choices().next().unwrap();
        assert!(choice.has_delta && choice.finish_reason.is_none());
        assert!(
            matches!(&choice.delta.content, Some(super::super::decode::Content::Text(text)) if text == "hi")
        );
        assert!(choice.delta.refusal.is_none() && choice.delta.reasoning.is_none());
        assert!(choice.delta.tool_calls.is_none());
        // A `null` delta is no delta.
        let mut parts = read(r#"{"choices": [{"delta": null, "finish_reason": "stop"}]}"#).unwrap();
        let choice = parts.choices().next().unwrap();
        assert!(!choice.has_delta);
        assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    }

    // `Seen` names a repeated field by its variant's position in the list.
    #[test]
    fn field_lists_follow_the_enums() {
        fn position<'de, T: Deserialize<'de>>(name: &'de str, index: fn(T) -> usize) -> usize {
            index(
                T::deserialize(serde::de::value::BorrowedStrDeserializer::<
                    serde::de::value::Error,
                >::new(name))
                .unwrap(),
            )
        }
        for (at, name) in CHUNK_FIELDS.iter().enumerate() {
            assert_eq!(
                position(name, |field: ChunkField| field as usize),
                at,
                "{name}"
            );
        }
        for (at, name) in CHOICE_FIELDS.iter().enumerate() {
            assert_eq!(
                position(name, |field: ChoiceField| field as usize),
                at,
                "{name}"
            );
        }
        for (at, name) in DELTA_FIELDS.iter().enumerate() {
            assert_eq!(
                position(name, |field: DeltaField| field as usize),
                at,
                "{name}"
            );
        }
    }

    // Refused as the derived structs refused them.
    #[test]
    fn repeated_fields_and_wrong_types_are_errors() {
        for bad in [
            r#"{"id": "a", "id": "b"}"#,
            r#"{"choices": [{"index": 0, "index": 0}]}"#,
            r#"{"choices": [{"delta": {"content": "a", "content": "b"}}]}"#,
            r#"{"choices": [null]}"#,
            r#"{"choices": [{"delta": "text"}]}"#,
            r#"{"choices": [{"delta": {"images": {}}}]}"#,
            r#"{"id": 5}"#,
            r#"{"usage": {"prompt_tokens": "many"}}"#,
            r#"[1, 2]"#,
            r#"{"id": "a"} trailing"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        // A repeated field is named, at every level.
        for (bad, name) in [
            (r#"{"usage": null, "usage": null}"#, "usage"),
            (
                r#"{"choices": [{"finish_reason": null, "finish_reason": "stop"}]}"#,
                "finish_reason",
            ),
            (
                r#"{"choices": [{"delta": {"tool_calls": null, "tool_calls": []}}]}"#,
                "tool_calls",
            ),
        ] {
            let error = read(bad).err().unwrap().to_string();
            assert!(
                error.contains(&format!("duplicate field `{name}`")),
                "{error}"
            );
        }
    }
}

//! PII and secret redaction: emails, phone numbers, payment card numbers (Luhn-checked),
//! IBANs (mod-97-checked) and common API-key shapes (OpenAI `sk-`, Anthropic `sk-ant-`, AWS
//! `AKIA`/`ASIA`, GitHub `ghp_`/`github_pat_`…, Google `AIza`, Slack `xox?-`).
//!
//! One pass of one regular expression over the text finds candidates; the checksums then
//! keep only real card numbers and IBANs (a 16-digit order number that fails Luhn stays), and
//! each kept match becomes `[REDACTED:<kind>]`. Text without a match is not copied.

use std::fmt;
use std::sync::{Arc, LazyLock};

use agent_loop::{
    GuardFuture, InputCheck, InputGuardrail, ResultCheck, ResultVerdict, ToolGuardrail, Verdict,
};
use agent_types::{ToolResult, ToolResultBlock};
use regex::Regex;

/// What kind of PII or secret a match is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PiiKind {
    /// An email address.
    Email,
    /// A phone number (10 to 15 digits, with a `+` or separators).
    Phone,
    /// A payment card number (13 to 19 digits passing the Luhn check).
    Card,
    /// An IBAN (passing the mod-97 check).
    Iban,
    /// An API key of a known shape.
    ApiKey,
}

impl PiiKind {
    /// Every kind.
    pub const ALL: [PiiKind; 5] = [
        PiiKind::Email,
        PiiKind::Phone,
        PiiKind::Card,
        PiiKind::Iban,
        PiiKind::ApiKey,
    ];

    /// The kind's name, as in `[REDACTED:<name>]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Phone => "phone",
            Self::Card => "card",
            Self::Iban => "iban",
            Self::ApiKey => "api_key",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Email => 1,
            Self::Phone => 2,
            Self::Card => 4,
            Self::Iban => 8,
            Self::ApiKey => 16,
        }
    }
}

impl fmt::Display for PiiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One match: where it is and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiiMatch {
    /// Byte range in the text.
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
    /// What it is.
    pub kind: PiiKind,
}

// Alternatives in priority order: at one position the first that matches wins (keys before
// emails, emails before digits, IBANs before bare digits).
const PATTERN: &str = concat!(
    r"(?P<key>\b(?:sk-ant-[A-Za-z0-9_-]{20,}|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22,}",
    r"|AIza[0-9A-Za-z_-]{35}|xox[abposr]-[A-Za-z0-9-]{10,}))",
    r"|(?P<email>\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b)",
    r"|(?P<iban>\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b)",
    r"|(?P<digits>(?:\+|\b)\(?[0-9][0-9 ().-]{6,24}[0-9]\b)",
);

static REGEX: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(PATTERN).ok());

/// Finds and redacts PII and secrets of the chosen kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redactor {
    kinds: u8,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    /// Every kind.
    pub fn new() -> Self {
        Self::only(PiiKind::ALL)
    }

    /// Only these kinds.
    pub fn only(kinds: impl IntoIterator<Item = PiiKind>) -> Self {
        Self {
            kinds: kinds.into_iter().fold(0, |bits, kind| bits | kind.bit()),
        }
    }

    fn wants(self, kind: PiiKind) -> bool {
        self.kinds & kind.bit() != 0
    }

    /// Every match in `text`, in order, not overlapping.
    pub fn find(self, text: &str) -> Vec<PiiMatch> {
        let mut found = Vec::new();
        self.each(text, |found_one| found.push(found_one));
        found
    }

    fn each(self, text: &str, mut on: impl FnMut(PiiMatch)) {
        let Some(regex) = REGEX.as_ref() else {
            return;
        };
        for captures in regex.captures_iter(text) {
            let matched = if let Some(m) = captures.name("key") {
                Some((m.start(), m.end(), PiiKind::ApiKey))
            } else if let Some(m) = captures.name("email") {
                Some((m.start(), m.end(), PiiKind::Email))
            } else if let Some(m) = captures.name("iban") {
                iban_prefix(m.as_str()).map(|len| (m.start(), m.start() + len, PiiKind::Iban))
            } else if let Some(m) = captures.name("digits") {
                digits_kind(m.as_str()).map(|kind| (m.start(), m.end(), kind))
            } else {
                None
            };
            if let Some((start, end, kind)) = matched
                && self.wants(kind)
            {
                on(PiiMatch { start, end, kind });
            }
        }
    }

    /// `text` with every match replaced by `[REDACTED:<kind>]`, and how many of each kind;
    /// `None` when nothing matched (nothing is copied then).
    pub fn redact(self, text: &str) -> Option<(String, Counts)> {
        let mut out: Option<String> = None;
        let mut last = 0;
        let mut counts = Counts::default();
        self.each(text, |found| {
            let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[last..found.start]);
            out.push_str("[REDACTED:");
            out.push_str(found.kind.as_str());
            out.push(']');
            last = found.end;
            counts.add(found.kind);
        });
        let mut out = out?;
        out.push_str(&text[last..]);
        Some((out, counts))
    }
}

/// How many matches of each kind a redaction replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts([u32; 5]);

impl Counts {
    fn add(&mut self, kind: PiiKind) {
        let at = PiiKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.0[at] += 1;
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: Counts) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// How many of `kind`.
    pub fn of(&self, kind: PiiKind) -> u32 {
        PiiKind::ALL
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |at| self.0[at])
    }

    /// The total.
    pub fn total(&self) -> u32 {
        self.0.iter().sum()
    }
}

impl fmt::Display for Counts {
    /// `2 email, 1 card`: the kinds, never the redacted text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (kind, count) in PiiKind::ALL.iter().zip(self.0) {
            if count == 0 {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{count} {kind}")?;
        }
        Ok(())
    }
}

/// The Luhn check over ASCII digits.
pub fn luhn(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (at, digit) in digits.iter().rev().enumerate() {
        let mut value = u32::from(digit - b'0');
        if at % 2 == 1 {
            value *= 2;
            if value > 9 {
                value -= 9;
            }
        }
        sum += value;
    }
    sum.is_multiple_of(10)
}

/// The IBAN mod-97 check over an IBAN without spaces (uppercase letters and digits).
pub fn iban_valid(iban: &[u8]) -> bool {
    if !(15..=34).contains(&iban.len()) {
        return false;
    }
    let (head, tail) = iban.split_at(4);
    let mut remainder = 0u32;
    for &byte in tail.iter().chain(head) {
        match byte {
            b'0'..=b'9' => remainder = (remainder * 10 + u32::from(byte - b'0')) % 97,
            b'A'..=b'Z' => {
                let value = u32::from(byte - b'A') + 10;
                remainder = (remainder * 100 + value) % 97;
            }
            _ => return false,
        }
    }
    remainder == 1
}

/// The length of the longest prefix of a candidate that is a valid IBAN, cutting at its
/// spaces (the pattern may have run into the next word).
fn iban_prefix(candidate: &str) -> Option<usize> {
    let mut ends: Vec<usize> = candidate.match_indices(' ').map(|(at, _)| at).collect();
    ends.push(candidate.len());
    for &end in ends.iter().rev() {
        let compact: Vec<u8> = candidate.as_bytes()[..end]
            .iter()
            .copied()
            .filter(|byte| *byte != b' ')
            .collect();
        if compact.len() < 15 {
            break;
        }
        if iban_valid(&compact) {
            return Some(end);
        }
    }
    None
}

/// A run of digits and separators: a card (13–19 digits, Luhn) or a phone number (10–15
/// digits with a `+` or a separator; a bare digit run is an id, not a phone).
fn digits_kind(candidate: &str) -> Option<PiiKind> {
    let digits: Vec<u8> = candidate.bytes().filter(u8::is_ascii_digit).collect();
    let separators_ok = candidate
        .bytes()
        .all(|byte| byte.is_ascii_digit() || byte == b' ' || byte == b'-');
    if (13..=19).contains(&digits.len()) && separators_ok && luhn(&digits) {
        return Some(PiiKind::Card);
    }
    if !(10..=15).contains(&digits.len()) {
        return None;
    }
    // An ISO date (with a time after it) is not a phone.
    let bytes = candidate.as_bytes();
    if bytes.len() >= 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[..4].iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let plus = candidate.starts_with('+');
    let separated = candidate.contains([' ', '-', '(']);
    // Dotted numbers are versions and addresses more often than phones: only 3.3.4.
    let dotted = candidate.contains('.');
    let us_dotted = dotted
        && candidate.len() == 12
        && candidate.as_bytes()[3] == b'.'
        && candidate.as_bytes()[7] == b'.';
    if dotted && !us_dotted && !plus {
        return None;
    }
    (plus || separated || us_dotted).then_some(PiiKind::Phone)
}

/// The PII guardrail: redacts tool results (text and JSON blocks) before the model sees
/// them, and trips on input that carries a secret or a card number (those should never reach
/// a provider), as the CLI's `--guardrail pii` and a tenant's `pii = true` configure it.
#[derive(Debug, Clone)]
pub struct PiiGuardrail {
    results: Redactor,
    input: Option<Redactor>,
}

impl Default for PiiGuardrail {
    fn default() -> Self {
        Self::new()
    }
}

impl PiiGuardrail {
    /// Redacts every kind in tool results; trips on API keys and card numbers in the input.
    pub fn new() -> Self {
        Self {
            results: Redactor::new(),
            input: Some(Redactor::only([PiiKind::ApiKey, PiiKind::Card])),
        }
    }

    /// Redacts these kinds in tool results.
    #[must_use]
    pub fn redacting(mut self, redactor: Redactor) -> Self {
        self.results = redactor;
        self
    }

    /// Trips on these kinds in the input (`None`: never).
    #[must_use]
    pub fn tripping_on(mut self, redactor: Option<Redactor>) -> Self {
        self.input = redactor;
        self
    }

    /// As guardrails of a run: a tool guardrail, and an input guardrail when it trips on
    /// anything.
    pub fn into_guardrails(self) -> agent_loop::Guardrails {
        let shared = Arc::new(self);
        let mut guardrails = agent_loop::Guardrails::new().tool_shared(shared.clone());
        if shared.input.is_some() {
            guardrails = guardrails.input(InputSide(shared));
        }
        guardrails
    }

    /// Redacts `result` in place; the counts of what was redacted.
    pub fn redact_result(&self, result: &mut ToolResult) -> Counts {
        let mut counts = Counts::default();
        if let Some((text, found)) = self.results.redact(&result.content) {
            result.content = text;
            counts.merge(found);
        }
        for block in &mut result.blocks {
            match block {
                ToolResultBlock::Text { text } => {
                    if let Some((redacted, found)) = self.results.redact(text) {
                        *text = redacted;
                        counts.merge(found);
                    }
                }
                ToolResultBlock::Json { value } => {
                    let text = value.to_string();
                    if let Some((redacted, found)) = self.results.redact(&text) {
                        // A redaction inside a string keeps the JSON valid; one across
                        // tokens (a number) leaves the text as the block.
                        *block = match serde_json::from_str(&redacted) {
                            Ok(value) => ToolResultBlock::Json { value },
                            Err(_) => ToolResultBlock::Text { text: redacted },
                        };
                        counts.merge(found);
                    }
                }
                _ => {}
            }
        }
        counts
    }
}

impl ToolGuardrail for PiiGuardrail {
    fn name(&self) -> &str {
        "pii"
    }

    fn after_call(&self, _call: &ResultCheck<'_>, result: &mut ToolResult) -> ResultVerdict {
        let counts = self.redact_result(result);
        if counts.total() == 0 {
            ResultVerdict::Keep
        } else {
            ResultVerdict::Redacted(counts.to_string())
        }
    }
}

/// The input side of a [`PiiGuardrail`].
struct InputSide(Arc<PiiGuardrail>);

impl InputGuardrail for InputSide {
    fn name(&self) -> &str {
        "pii"
    }

    fn check(&self, input: InputCheck) -> GuardFuture<'_, Verdict> {
        let verdict = match self
            .0
            .input
            .and_then(|redactor| redactor.redact(&input.text))
        {
            Some((_, counts)) => Verdict::Trip(format!(
                "the input holds {counts}; remove it before sending it to a model"
            )),
            None => Verdict::Pass,
        };
        Box::pin(std::future::ready(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(text: &str) -> String {
        Redactor::new()
            .redact(text)
            .map_or_else(|| text.to_owned(), |(text, _)| text)
    }

    #[test]
    fn each_kind_is_found_and_redacted() {
        let cases = [
            ("mail ann@example.com now", "mail [REDACTED:email] now"),
            ("call +1 (555) 123-4567.", "call [REDACTED:phone]."),
            ("call 555-123-4567 or", "call [REDACTED:phone] or"),
            ("card 4111 1111 1111 1111 ok", "card [REDACTED:card] ok"),
            ("card 4111-1111-1111-1111", "card [REDACTED:card]"),
            (
                "iban DE89 3704 0044 0532 0130 00 AND more",
                "iban [REDACTED:iban] AND more",
            ),
            ("iban GB82WEST12345698765432.", "iban [REDACTED:iban]."),
            (
                "key sk-proj-abcdefghijklmnopqrstuvwxyz012345",
                "key [REDACTED:api_key]",
            ),
            (
                "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
                "key [REDACTED:api_key]",
            ),
            ("AKIAIOSFODNN7EXAMPLE here", "[REDACTED:api_key] here"),
            (
                "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "[REDACTED:api_key]",
            ),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghij",
                "[REDACTED:api_key]",
            ),
            (
                "AIzaSyA-1234567890abcdefghijklmnopqrstu",
                "[REDACTED:api_key]",
            ),
            ("xoxb-1234567890-abcdefghij", "[REDACTED:api_key]"),
        ];
        for (text, want) in cases {
            assert_eq!(redacted(text), want, "{text}");
        }
    }

    #[test]
    fn look_alikes_stay() {
        for text in [
            "order 4111 1111 1111 1112",        // fails Luhn
            "iban DE89 3704 0044 0532 0130 01", // fails mod 97
            "id 12345678901234",                // a bare digit run is an id
            "version 10.2.33.4400",             // dotted, not a phone
            "at 2026-11-24 20:57",              // a date
            "no@tld",                           // not an address
            "sk-short",                         // too short for a key
        ] {
            assert_eq!(Redactor::new().redact(text), None, "{text}");
        }
    }

    #[test]
    fn counts_say_what_without_the_text() {
        let (_, counts) = Redactor::new()
            .redact("a@b.io c@d.io 4111111111111111")
            .unwrap();
        assert_eq!(counts.to_string(), "2 email, 1 card");
        assert_eq!(counts.of(PiiKind::Email), 2);
    }

    #[test]
    fn only_the_chosen_kinds() {
        let emails = Redactor::only([PiiKind::Email]);
        assert_eq!(
            emails.redact("a@b.io 4111111111111111").unwrap().0,
            "[REDACTED:email] 4111111111111111"
        );
    }
}

//! Tool names: the providers' common rule, sanitization, and the `<verb>_<resource>` helper.

use crate::error::Error;

/// The longest name every provider accepts.
pub const MAX_NAME_LEN: usize = 64;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Path-like separators become `_` so `orders/items` stays readable as `orders_items`.
fn is_separator(c: char) -> bool {
    matches!(c, '/' | '\\' | '.' | ':') || c.is_whitespace()
}

/// Checks `name` against the rule every provider shares, `^[a-zA-Z0-9_-]{1,64}$`.
///
/// # Errors
///
/// [`Error::InvalidName`] saying which part of the rule the name breaks.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let invalid = |reason: String| Error::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("a tool name cannot be empty".to_owned()));
    }
    if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(invalid(format!(
            "{c:?} is not allowed; use only ASCII letters, digits, `_` and `-` (see `sanitize_name`)"
        )));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid(format!(
            "it is {} characters long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    Ok(())
}

/// Turns an arbitrary string (a path, an MCP tool name) into a valid tool name.
///
/// Path separators (`/`, `\`, `.`, `:`) and whitespace become `_`; any other character
/// outside `[a-zA-Z0-9_-]` is dropped; the result is cut to 64 characters. A name that is
/// already valid comes back unchanged.
///
/// # Errors
///
/// [`Error::InvalidName`] when nothing usable is left.
pub fn sanitize_name(raw: &str) -> Result<String, Error> {
    let mut name: String = raw
        .chars()
        .filter_map(|c| {
            if is_name_char(c) {
                Some(c)
            } else if is_separator(c) {
                Some('_')
            } else {
                None
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    // Every kept char is ASCII, so 64 chars are 64 bytes; this is only a safety net.
    name.truncate(MAX_NAME_LEN);
    if name.is_empty() {
        return Err(Error::InvalidName {
            name: raw.to_owned(),
            reason: "no allowed character is left after sanitizing".to_owned(),
        });
    }
    Ok(name)
}

/// Builds a `<verb>_<resource>` name: `tool_name("get", "orders/items")` is `get_orders_items`.
///
/// The resource is split on separators and whitespace, each segment is sanitized, empty
/// segments are skipped (so `/orders//{id}/` gives `orders_id`), and the whole name is cut to 64
/// characters.
///
/// # Errors
///
/// [`Error::InvalidName`] when the verb or the resource has no allowed character.
pub fn tool_name(verb: &str, resource: &str) -> Result<String, Error> {
    let mut parts = Vec::new();
    for raw in [verb, resource] {
        let before = parts.len();
        for segment in raw.split(is_separator) {
            let clean: String = segment.chars().filter(|c| is_name_char(*c)).collect();
            if !clean.is_empty() {
                parts.push(clean);
            }
        }
        if parts.len() == before {
            return Err(Error::InvalidName {
                name: format!("{verb}_{resource}"),
                reason: format!("`{raw}` has no allowed character"),
            });
        }
    }
    let mut name = parts.join("_");
    name.truncate(MAX_NAME_LEN);
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_accepts_the_provider_rule() {
        assert!(validate_name("get_weather").is_ok());
        assert!(validate_name("a-B_9").is_ok());
        assert!(validate_name(&"x".repeat(64)).is_ok());
        assert!(validate_name(&"x".repeat(65)).is_err());
        assert!(validate_name("").is_err());
        assert!(validate_name("get weather").is_err());
        assert!(validate_name("get.weather").is_err());
        assert!(validate_name("météo").is_err());
    }

    #[test]
    fn sanitize_replaces_separators_and_drops_the_rest() {
        assert_eq!(sanitize_name("fs/read.file").unwrap(), "fs_read_file");
        assert_eq!(sanitize_name(r"a\b:c").unwrap(), "a_b_c");
        assert_eq!(sanitize_name("météo!").unwrap(), "mto");
        assert_eq!(sanitize_name("list files").unwrap(), "list_files");
        assert_eq!(sanitize_name(&"ab".repeat(40)).unwrap().len(), 64);
        assert!(sanitize_name("???").is_err());
        assert!(sanitize_name("").is_err());
    }

    #[test]
    fn sanitize_leaves_valid_names_alone() {
        for name in ["get_weather", "a-b", "X9"] {
            assert_eq!(sanitize_name(name).unwrap(), name);
        }
    }

    #[test]
    fn tool_name_joins_verb_and_resource() {
        assert_eq!(
            tool_name("get", "orders/items").unwrap(),
            "get_orders_items"
        );
        assert_eq!(
            tool_name("delete", "/orders//{id}/").unwrap(),
            "delete_orders_id"
        );
        assert_eq!(tool_name("list", "users").unwrap(), "list_users");
        assert!(tool_name("get", "///").is_err());
        assert!(tool_name("", "orders").is_err());
        let long = tool_name("get", &"a".repeat(100)).unwrap();
        assert_eq!(long.len(), 64);
        assert!(validate_name(&long).is_ok());
    }
}

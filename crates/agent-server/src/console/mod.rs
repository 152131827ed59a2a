//! `/console`: the operator's web console, served from assets compiled into the binary, and
//! the self-contained run report (`agentry run --report`) built with the same renderer.
//!
//! The page is hand-written HTML, CSS and JavaScript (`assets/`), no framework, no CDN, no
//! Node at run time. It signs in with a tenant's API key (kept in the tab's
//! `sessionStorage`, sent as `Authorization: Bearer`) and reads only the public API: the
//! sessions list and sessions, their execute stream, approvals, `/v1/usage` and the
//! session's timeline (`timeline.rs`). Every string from the server is put in the page as
//! text, never as markup, and the assets are served with a Content-Security-Policy that
//! allows no inline script, no other origin and no framing. Every URL the page uses is
//! relative (the assets to the page, `console/`; the API to the directory above the
//! script), so the console works behind a reverse proxy under a path prefix.

mod timeline;

use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::state::AppState;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// What the console's pages may load: their own script, style and API, nothing inline,
/// nothing from elsewhere, and no framing.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes: the page, its two assets and the session timeline.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(to_directory))
        .route("/console/", get(index))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/v1/sessions/{id}/timeline", get(timeline::timeline))
}

/// `/console` → `console/`, relative: the page's asset and API URLs are relative to it, so
/// behind a reverse proxy under a path prefix (`/agentry/console` → `/agentry/console/`) they
/// stay under the prefix.
async fn to_directory() -> Response {
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static("console/"))],
    )
        .into_response()
}

async fn index(headers: HeaderMap) -> Response {
    asset(
        &headers,
        INDEX,
        "text/html; charset=utf-8",
        etags().index.as_str(),
    )
}

async fn script(headers: HeaderMap) -> Response {
    asset(
        &headers,
        SCRIPT,
        "text/javascript; charset=utf-8",
        etags().script.as_str(),
    )
}

async fn style(headers: HeaderMap) -> Response {
    asset(
        &headers,
        STYLE,
        "text/css; charset=utf-8",
        etags().style.as_str(),
    )
}

struct Etags {
    index: String,
    script: String,
    style: String,
}

/// Each asset's ETag: its SHA-256, so a new build's assets are fetched again.
fn etags() -> &'static Etags {
    static ETAGS: OnceLock<Etags> = OnceLock::new();
    ETAGS.get_or_init(|| Etags {
        index: format!("\"{}\"", &hex(&Sha256::digest(INDEX))[..32]),
        script: format!("\"{}\"", &hex(&Sha256::digest(SCRIPT))[..32]),
        style: format!("\"{}\"", &hex(&Sha256::digest(STYLE))[..32]),
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
    text
}

/// An asset with its security headers; 304 when the client holds this version.
fn asset(headers: &HeaderMap, body: &'static str, kind: &'static str, etag: &str) -> Response {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.into_response()
    };
    let set = response.headers_mut();
    set.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    set.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    // Revalidated on every load (cheap: a 304), so an upgraded server's assets show at once.
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    set.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    set.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(etag) = HeaderValue::from_str(etag) {
        set.insert(header::ETAG, etag);
    }
    response
}

/// One self-contained HTML page showing a run (conversation, timeline, usage), rendered
/// by the console's own script from `data` embedded as JSON: `{"session": {id, model,
/// status, system, messages, usage, cost_usd}, "timeline": {model_calls, tool_calls},
/// "provider", "written_at_ms"}` (the timeline in the shape of
/// `GET /v1/sessions/{id}/timeline`, see [`timeline_row_model`] and [`timeline_row_tool`]).
///
/// The JSON is escaped so no text in it can end its `<script>` element, and the page's
/// Content-Security-Policy allows only its own inline script and style (by hash) and no
/// network access.
pub fn report_page(data: &serde_json::Value) -> String {
    let json = script_safe_json(data);
    let script = format!("\n{SCRIPT}");
    let style = format!("\n{STYLE}");
    let policy = format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; img-src data:; \
         base-uri 'none'; form-action 'none'",
        base64(&Sha256::digest(script.as_bytes())),
        base64(&Sha256::digest(style.as_bytes())),
    );
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>agentry run report</title>\n<style>{style}</style>\n</head>\n\
         <body data-mode=\"report\">\n<header class=\"top\"><h1>agentry run report</h1></header>\n\
         <main id=\"app\" tabindex=\"-1\"></main>\n\
         <script type=\"application/json\" id=\"agentry-report\">{json}</script>\n\
         <script>{script}</script>\n</body>\n</html>\n"
    )
}

/// `value` as JSON that can sit inside a `<script>` element: every `<`, `>` and `&` (and
/// the two line separators JavaScript once treated as line ends) as a `\u` escape, which
/// JSON reads back as the same character.
fn script_safe_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut safe = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => safe.push_str("\\u003c"),
            '>' => safe.push_str("\\u003e"),
            '&' => safe.push_str("\\u0026"),
            '\u{2028}' => safe.push_str("\\u2028"),
            '\u{2029}' => safe.push_str("\\u2029"),
            other => safe.push(other),
        }
    }
    safe
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                text.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

pub use timeline::{timeline_row_model, timeline_row_tool};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn embedded_json_cannot_close_its_script_element() {
        let data = serde_json::json!({"text": "</script><script>alert(1)</script><!-- & \u{2028}"});
        let safe = script_safe_json(&data);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, data);
        let page = report_page(&data);
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "only the page's own two"
        );
    }

    #[test]
    fn the_report_policy_allows_exactly_its_inline_script() {
        let page = report_page(&serde_json::json!({}));
        let script_start = page.rfind("<script>").unwrap() + "<script>".len();
        let script_end = page.rfind("</script>").unwrap();
        let hash = base64(&Sha256::digest(&page.as_bytes()[script_start..script_end]));
        assert!(page.contains(&format!("script-src 'sha256-{hash}'")));
    }
}

//! The prompt-cache breakpoints: one closing the stable prefix, one on the newest message.

use super::request::{Body, CacheControl};
use super::{CacheLayout, CacheTtl};

/// Puts the two breakpoints into `body` (tools already sorted, history system notes already
/// moved into the user turns).
pub(super) fn mark(layout: &CacheLayout, body: &mut Body<'_>) {
    let marker = CacheControl {
        kind: "ephemeral",
        ttl: match layout.ttl {
            CacheTtl::FiveMinutes => None,
            CacheTtl::OneHour => Some("1h"),
        },
    };

    // The prefix: the static system prompt, or the last tool when there is none.
    if let Some(slot) = body.system.last_mut().and_then(|block| block.cache_slot()) {
        *slot = Some(marker);
    } else if let Some(tool) = body.tools.last_mut() {
        tool.cache_control = Some(marker);
    }

    // The tail: the newest message's last block that may carry a marker (thinking blocks may
    // not). Its prefix is the whole conversation so far, which the next request reads back.
    if let Some(slot) = body.messages.last_mut().and_then(|turn| {
        turn.content
            .iter_mut()
            .rev()
            .find_map(|block| block.cache_slot())
    }) {
        *slot = Some(marker);
    }
}

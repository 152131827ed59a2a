//! Ids clients cannot guess: 128 bits from the operating system's random source.
//!
//! Session ids and `chatcmpl-` ids used to be a clock, a process id and a counter, so one id
//! told a tenant the next ones. Now each is `getrandom` output: nothing about one id says
//! anything about another, and finding another tenant's session by guessing is out of reach
//! (ids are also scoped to their tenant, see `store`).

use crate::error::ApiError;

/// 128 random bits as 32 lowercase hex digits.
///
/// # Errors
///
/// 500 when the operating system's random source fails (it does not on supported systems;
/// an id from anything weaker would be guessable).
pub(crate) fn random_hex() -> Result<String, ApiError> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|error| {
        tracing::error!(%error, "the operating system's random source failed");
        ApiError::internal("could not make an id: the random source failed")
    })?;
    let mut hex = String::with_capacity(32);
    for byte in bytes {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    Ok(hex)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A new session id: `sess_` and 128 random bits.
///
/// # Errors
///
/// As [`random_hex`].
pub(crate) fn session_id() -> Result<String, ApiError> {
    Ok(format!("sess_{}", random_hex()?))
}

/// A new chat completion id: `chatcmpl-` and 128 random bits.
///
/// # Errors
///
/// As [`random_hex`].
pub(crate) fn completion_id() -> Result<String, ApiError> {
    Ok(format!("chatcmpl-{}", random_hex()?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_128_random_bits_and_share_nothing() {
        let ids: Vec<String> = (0..1000).map(|_| session_id().unwrap()).collect();
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
        for id in &ids {
            let hex = id.strip_prefix("sess_").unwrap();
            assert_eq!(hex.len(), 32);
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        // Consecutive ids share no prefix beyond chance: a counter or clock would share many
        // leading digits.
        let shared = ids
            .windows(2)
            .filter(|pair| pair[0][5..13] == pair[1][5..13])
            .count();
        assert_eq!(shared, 0);
        // About half the bits are set, as random bits are.
        let ones: u32 = ids
            .iter()
            .flat_map(|id| id[5..].chars())
            .map(|digit| digit.to_digit(16).unwrap().count_ones())
            .sum();
        let total = 1000 * 128;
        assert!(
            (total * 45 / 100..total * 55 / 100).contains(&ones),
            "{ones}"
        );
        assert!(completion_id().unwrap().starts_with("chatcmpl-"));
    }
}

//! The form of a client idempotency key (`client_run_id`, `client_rename_id`, …), checked before a request is
//! looked up by it.

use super::EngineError;

/// Checks a client idempotency key: 1..=256 bytes, no control characters.
pub fn check_idempotency_key(field: &'static str, key: &str) -> Result<(), EngineError> {
    let reason = if key.is_empty() {
        "it is empty".to_owned()
    } else if key.len() > 256 {
        format!("it is {} bytes long; at most 256 are allowed", key.len())
    } else if key.chars().any(char::is_control) {
        "it contains control characters".to_owned()
    } else {
        return Ok(());
    };
    Err(EngineError::InvalidIdempotencyKey { field, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_bounded() {
        assert!(check_idempotency_key("client_rename_id", "r-1").is_ok());
        assert!(check_idempotency_key("client_rename_id", "").is_err());
        assert!(check_idempotency_key("client_rename_id", &"x".repeat(257)).is_err());
        assert!(check_idempotency_key("client_rename_id", "a\nb").is_err());
    }
}

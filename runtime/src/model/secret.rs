//! API keys: kept out of every `Debug`, error and log line, and zeroed when dropped.

use zeroize::Zeroizing;

/// A provider's API key. `Debug` shows `ApiKey(<redacted>)`, there is no `Display`, and the memory holding the
/// key is overwritten when the value is dropped.
#[derive(Clone)]
pub struct ApiKey(Zeroizing<String>);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(Zeroizing::new(key.into()))
    }

    /// The key itself, for building a request header. Only the providers need it.
    pub(crate) fn expose(&self) -> &str {
        self.0.as_str()
    }

    /// Returns `text` with every occurrence of this key replaced, for vendor error bodies and messages that
    /// echo the key back ("Incorrect API key provided: ...").
    pub(crate) fn redact_from(&self, text: &str) -> String {
        let key = self.expose();
        // A very short "key" would blank out ordinary words; real keys are long.
        if key.len() < 8 {
            return text.to_owned();
        }
        text.replace(key, "<redacted>")
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ApiKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted_and_echoes_are_replaced() {
        let key = ApiKey::new("sk-test-0123456789abcdef");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert_eq!(key.redact_from("bad key sk-test-0123456789abcdef here"), "bad key <redacted> here");
    }
}

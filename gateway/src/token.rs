//! The daemon's bearer token, kept out of logs and compared in constant time.
//!
//! The token is the only thing standing between a local port and a shell on the machine, so the type makes the
//! two easy mistakes hard: its `Debug` never shows the value, and the only way to check a candidate is
//! [`Token::matches`], which does not leak how many leading bytes were right.

use std::fmt;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// A bearer token. Cloning copies the secret; the memory of every copy is wiped on drop.
#[derive(Clone)]
pub struct Token(Zeroizing<String>);

impl Token {
    pub fn new(value: impl Into<String>) -> Self {
        Token(Zeroizing::new(value.into()))
    }

    /// Whether `candidate` is this token. The comparison takes the same time wherever the first difference is;
    /// only the length can be told apart, and the length of a token is not a secret.
    pub fn matches(&self, candidate: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(candidate.as_bytes()))
    }

    /// The secret itself, for deriving values from it (the console's cookie name). Never log or send it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the token is empty. An empty token would let anyone in, so `start` refuses it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl From<String> for Token {
    fn from(value: String) -> Self {
        Token::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_only_the_exact_token() {
        let token = Token::new("s3cret-token");
        assert!(token.matches("s3cret-token"));
        assert!(!token.matches("s3cret-tokem"));
        assert!(!token.matches("s3cret-token "));
        assert!(!token.matches(""));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let token = Token::new("s3cret-token");
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }
}

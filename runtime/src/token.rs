//! The bearer token that authenticates every WebSocket upgrade.
//!
//! The token is 32 random bytes encoded as base64url without padding (43 characters, never starting with `-`, so
//! that it can follow `--token` on a command line), created on first start in
//! `<data_dir>/daemon/token` with mode 0600 and reused afterwards; `TROUPE_TOKEN` overrides it. It is a secret:
//! [`AuthToken`]'s `Debug` redacts it, errors never include it, and comparisons take the same time whatever the
//! candidate's content, so a client cannot learn it byte by byte from response times.
//!
//! Creation is crash-safe and race-safe. The token is written to a private temporary file and fsynced, then
//! hard-linked to its final name: a link either appears complete or not at all, and it fails when the name
//! already exists, so when two daemons start at once exactly one token wins and the loser reads it.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq;

use crate::data_dir::{DataDir, sync_dir};
use crate::error::RuntimeError;

/// The environment variable whose non-empty value replaces the stored token.
pub const TOKEN_ENV: &str = "TROUPE_TOKEN";

/// How many random bytes a new token has.
const TOKEN_RANDOM_BYTES: usize = 32;

/// The bearer token. Never printed: `Debug` shows `AuthToken(<redacted>)` and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// The token itself, for `troupe token` and for clients that must send it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token. The content comparison is constant-time; only a length mismatch
    /// returns early, which reveals the length (43 for generated tokens, so nothing secret).
    pub fn matches(&self, candidate: &str) -> bool {
        let expected = self.0.as_bytes();
        let candidate = candidate.as_bytes();
        if expected.len() != candidate.len() {
            return false;
        }
        expected.ct_eq(candidate).into()
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("AuthToken(<redacted>)")
    }
}

/// Returns the token to accept: `TROUPE_TOKEN` when set and non-empty, else the one stored in
/// `<data_dir>/daemon/token`, else a new one created there (creating `daemon/` if needed).
pub fn load_or_create_token(data_dir: &DataDir) -> Result<AuthToken, RuntimeError> {
    load_or_create_token_with_override(data_dir, std::env::var_os(TOKEN_ENV))
}

/// The environment-free core of [`load_or_create_token`], so tests need not mutate the process environment.
fn load_or_create_token_with_override(
    data_dir: &DataDir,
    environment_token: Option<OsString>,
) -> Result<AuthToken, RuntimeError> {
    if let Some(value) = environment_token.filter(|value| !value.is_empty()) {
        let invalid = || RuntimeError::TokenInvalid { source_name: TOKEN_ENV.to_owned() };
        let value = value.into_string().map_err(|_| invalid())?;
        return validated(value.trim(), invalid);
    }
    let path = data_dir.token_path();
    if let Some(token) = read_token_file(&path)? {
        return Ok(token);
    }
    create_token_file(data_dir)
}

/// Reads the token file; `None` when it does not exist.
fn read_token_file(path: &Path) -> Result<Option<AuthToken>, RuntimeError> {
    let contents = match std::fs::read(path) {
        Ok(contents) => contents,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(RuntimeError::io("read the token file", path, error)),
    };
    warn_when_readable_by_others(path);
    let invalid = || RuntimeError::TokenInvalid { source_name: path.display().to_string() };
    let text = String::from_utf8(contents).map_err(|_| invalid())?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(RuntimeError::TokenEmpty { path: path.to_path_buf() });
    }
    validated(trimmed, invalid).map(Some)
}

/// Accepts a token made of printable ASCII without spaces: anything else could not be sent in an
/// `Authorization` header or a `troupe.bearer.<token>` subprotocol name, and would lock every client out.
fn validated(token: &str, invalid: impl Fn() -> RuntimeError) -> Result<AuthToken, RuntimeError> {
    if token.is_empty() || !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(invalid());
    }
    Ok(AuthToken(token.to_owned()))
}

/// A token file that others can read is still used (refusing would stop the daemon over a mode an operator may
/// have chosen), but it deserves a warning.
fn warn_when_readable_by_others(path: &Path) {
    if let Ok(metadata) = std::fs::metadata(path)
        && metadata.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the token file is accessible to other users; consider chmod 600");
    }
}

/// 32 random bytes as base64url, drawn again while the text starts with `-`: a token that follows `--token` on a
/// command line must not read as a flag (a 1-in-64 chance per draw, so this costs almost nothing in entropy).
fn new_token_text() -> Result<String, RuntimeError> {
    loop {
        let mut random = [0u8; TOKEN_RANDOM_BYTES];
        getrandom::fill(&mut random).map_err(RuntimeError::Random)?;
        let text = URL_SAFE_NO_PAD.encode(random);
        if !text.starts_with('-') {
            return Ok(text);
        }
    }
}

/// Creates a new token file, or reads the one a concurrent process created first.
fn create_token_file(data_dir: &DataDir) -> Result<AuthToken, RuntimeError> {
    let daemon_dir = data_dir.daemon_dir();
    if !daemon_dir.is_dir() {
        // `troupe token` may run before the daemon ever started, so the whole layout may be missing.
        data_dir.ensure_layout()?;
    }

    let token = AuthToken(new_token_text()?);

    let final_path = data_dir.token_path();
    let temporary_path = daemon_dir.join(format!(".token.{}.tmp", crate::clock::new_id()));
    let outcome =
        write_private_file(&temporary_path, token.as_str().as_bytes()).and_then(|()| {
            match std::fs::hard_link(&temporary_path, &final_path) {
                Ok(()) => Ok(true),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(error) => Err(RuntimeError::io("link the token file", &final_path, error)),
            }
        });
    // The temporary name is removed whatever happened; failing to remove it only leaves a stray private file.
    let _ = std::fs::remove_file(&temporary_path);
    let created = outcome?;
    sync_dir(&daemon_dir)?;

    if created {
        tracing::info!(path = %final_path.display(), "created a new authentication token");
        Ok(token)
    } else {
        // Another process won the race; its token is the one every client will be given.
        read_token_file(&final_path)?.ok_or_else(|| {
            RuntimeError::io(
                "read the token file",
                &final_path,
                io::Error::new(io::ErrorKind::NotFound, "it disappeared after creation"),
            )
        })
    }
}

/// Writes `contents` to a new file with mode 0600 and fsyncs it. Fails if the file exists.
fn write_private_file(path: &Path, contents: &[u8]) -> Result<(), RuntimeError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|error| RuntimeError::io("create", path, error))?;
    file.write_all(contents).and_then(|()| file.sync_all()).map_err(|error| RuntimeError::io("write", path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_dir_in(temp: &tempfile::TempDir) -> DataDir {
        DataDir::new(temp.path().join("data"))
    }

    #[test]
    fn a_new_token_never_starts_with_a_hyphen() {
        // 64 draws per first character on average: 4096 draws see a leading `-` drawn ~64 times and redrawn.
        for _ in 0..4096 {
            let text = new_token_text().unwrap();
            assert_eq!(text.len(), 43);
            assert!(!text.starts_with('-'), "{text}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = AuthToken("secret-value".to_owned());
        assert_eq!(format!("{token:?}"), "AuthToken(<redacted>)");
    }

    #[test]
    fn matches_only_the_exact_token() {
        let token = AuthToken("abcdef".to_owned());
        assert!(token.matches("abcdef"));
        assert!(!token.matches("abcdeg"));
        assert!(!token.matches("abcde"));
        assert!(!token.matches("abcdefg"));
        assert!(!token.matches(""));
    }

    #[test]
    fn creates_a_private_43_character_token_and_reuses_it() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        std::fs::create_dir_all(data_dir.root()).unwrap();
        let created = load_or_create_token_with_override(&data_dir, None).unwrap();
        assert_eq!(created.as_str().len(), 43);
        assert!(created.as_str().bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        let metadata = std::fs::metadata(data_dir.token_path()).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(data_dir.daemon_dir()).unwrap().permissions().mode() & 0o777, 0o700);
        // No temporary file is left behind.
        let entries: Vec<_> = std::fs::read_dir(data_dir.daemon_dir()).unwrap().collect();
        assert_eq!(entries.len(), 1);

        let reloaded = load_or_create_token_with_override(&data_dir, None).unwrap();
        assert_eq!(reloaded, created);
    }

    #[test]
    fn a_stored_token_is_trimmed() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        std::fs::create_dir_all(data_dir.daemon_dir()).unwrap();
        std::fs::write(data_dir.token_path(), "  hand-made-token\n").unwrap();
        let token = load_or_create_token_with_override(&data_dir, None).unwrap();
        assert_eq!(token.as_str(), "hand-made-token");
    }

    #[test]
    fn an_empty_token_file_is_an_error() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        std::fs::create_dir_all(data_dir.daemon_dir()).unwrap();
        std::fs::write(data_dir.token_path(), " \n").unwrap();
        let error = load_or_create_token_with_override(&data_dir, None).unwrap_err();
        assert!(matches!(error, RuntimeError::TokenEmpty { .. }), "{error:?}");
    }

    #[test]
    fn an_unusable_token_is_rejected_without_echoing_it() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        std::fs::create_dir_all(data_dir.daemon_dir()).unwrap();
        std::fs::write(data_dir.token_path(), "has inner space").unwrap();
        let error = load_or_create_token_with_override(&data_dir, None).unwrap_err();
        assert!(matches!(error, RuntimeError::TokenInvalid { .. }));
        assert!(!error.to_string().contains("inner"));
    }

    #[test]
    fn the_environment_overrides_the_file_and_an_empty_value_does_not() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        let token = load_or_create_token_with_override(&data_dir, Some("from-env".into())).unwrap();
        assert_eq!(token.as_str(), "from-env");
        assert!(!data_dir.token_path().exists(), "an override creates no file");

        let created = load_or_create_token_with_override(&data_dir, Some("".into())).unwrap();
        assert_eq!(created.as_str().len(), 43);
    }

    #[test]
    fn racing_creators_end_up_with_one_token() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(&temp);
        std::fs::create_dir_all(data_dir.root()).unwrap();
        let tokens: Vec<AuthToken> = std::thread::scope(|scope| {
            let handles: Vec<_> =
                (0..8).map(|_| scope.spawn(|| load_or_create_token_with_override(&data_dir, None).unwrap())).collect();
            handles.into_iter().map(|handle| handle.join().unwrap()).collect()
        });
        let stored = std::fs::read_to_string(data_dir.token_path()).unwrap();
        for token in tokens {
            assert_eq!(token.as_str(), stored);
        }
    }
}

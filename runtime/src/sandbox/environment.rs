//! The environment of tool processes: an allowlist, not a guess. A daemon started from a user's shell or a CI job
//! holds whatever that shell held (`GPG_PASSPHRASE`, `CI_JOB_JWT`, `BW_SESSION`, `SLACK_WEBHOOK_URL`, ...), and no
//! list of secret-looking names can know them all. So a command gets only the variables programs need to find
//! themselves and the user and to speak the user's language and terminal ([`INHERITED`], `LC_*`), plus the names
//! the user lists in `[sandbox] env`; `TMPDIR` (and `TMP`, `TEMP`) is the run's own temp dir.

use std::ffi::OsString;

/// The daemon's variables every tool process gets, when the daemon has them.
pub const INHERITED: [&str; 11] =
    ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "NO_COLOR"];

/// The locale categories (`LC_ALL`, `LC_CTYPE`, ...), passed on with [`INHERITED`].
pub const LOCALE_PREFIX: &str = "LC_";

/// The daemon's own settings (`TROUPE_HOME`, `TROUPE_TOKEN`, ...): never passed on, not even when listed, because
/// they say where the daemon keeps its secrets or are those secrets. `troupe config check` refuses such a name.
pub const DAEMON_PREFIX: &str = "TROUPE_";

/// Whether `name` may appear in `[sandbox] env`: a plain variable name (letters, digits, `_`, not starting with a
/// digit) that is not one of the daemon's own settings. `Err` says what is wrong, for `config check`.
pub fn check_listed_name(name: &str) -> Result<(), String> {
    let plain = name.bytes().next().is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
    if !plain {
        return Err("is not an environment variable name (letters, digits and `_`, not starting with a digit)".into());
    }
    if name.to_ascii_uppercase().starts_with(DAEMON_PREFIX) {
        return Err(format!("names one of troupe's own settings ({DAEMON_PREFIX}*), which tools never get"));
    }
    Ok(())
}

/// The variables of `daemon` (the daemon's environment) that a tool process gets: [`INHERITED`], `LC_*` and the
/// names in `listed` (`[sandbox] env`), in the daemon's order. Names compare exactly, as the kernel does.
pub fn tool_environment(
    daemon: impl Iterator<Item = (OsString, OsString)>,
    listed: &[String],
) -> Vec<(OsString, OsString)> {
    daemon
        .filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            !name.starts_with(DAEMON_PREFIX)
                && (INHERITED.contains(&name)
                    || name.starts_with(LOCALE_PREFIX)
                    || listed.iter().any(|listed| listed == name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_passed(daemon: &[&str], listed: &[&str]) -> Vec<String> {
        let daemon = daemon.iter().map(|name| (OsString::from(name), OsString::from("value")));
        let listed: Vec<String> = listed.iter().map(|name| (*name).to_owned()).collect();
        tool_environment(daemon, &listed).into_iter().map(|(name, _)| name.into_string().unwrap()).collect()
    }

    #[test]
    fn only_the_allowlist_and_the_listed_names_pass() {
        let daemon = [
            "PATH",
            "GPG_PASSPHRASE",
            "CI_JOB_JWT",
            "BW_SESSION",
            "SLACK_WEBHOOK_URL",
            "STRIPE_SK_LIVE",
            "HOME",
            "LC_ALL",
            "SSH_AUTH_SOCK",
            "TROUPE_TOKEN",
            "CARGO_HOME",
            "path",
        ];
        assert_eq!(names_passed(&daemon, &[]), ["PATH", "HOME", "LC_ALL"]);
        assert_eq!(names_passed(&daemon, &["CARGO_HOME", "TROUPE_TOKEN"]), ["PATH", "HOME", "LC_ALL", "CARGO_HOME"]);
    }

    #[test]
    fn listed_names_must_be_plain_and_not_troupes_own() {
        assert!(check_listed_name("CARGO_HOME").is_ok());
        assert!(check_listed_name("_X1").is_ok());
        for bad in ["", "1X", "A-B", "A=B", "LC_*", "TROUPE_TOKEN", "troupe_home"] {
            assert!(check_listed_name(bad).is_err(), "{bad}");
        }
    }
}

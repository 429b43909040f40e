//! How a person names a session on the command line: its whole id, or a unique prefix of a root session's id
//! (the eight characters `troupe sessions` prints are enough). Run ids are named the same way
//! (`crate::run_control`), through [`one_by_prefix`].

use troupe_protocol::methods::ClientProtocol;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::SessionListParams;

use crate::cli_errors::explained;

/// Shortest prefix accepted (of a session's or a run's id), so that a stray digit is not taken for an id.
pub const MIN_PREFIX: usize = 4;

/// Resolves `given` to a session id: an existing id as is, else the one root session whose id starts with it.
/// Delegated (child) sessions are named by their whole id, as `troupe tree` prints it.
pub async fn resolve_session_id(client: &impl ClientProtocol, given: &str) -> anyhow::Result<String> {
    let given = given.trim();
    if client.session_get(SessionIdParams { session_id: given.to_owned() }).await.is_ok() {
        return Ok(given.to_owned());
    }
    if given.len() < MIN_PREFIX {
        anyhow::bail!(
            "no session {given:?}\n  hint: give at least {MIN_PREFIX} characters of an id that `troupe sessions` lists"
        );
    }
    let sessions =
        client.session_list(SessionListParams { cwd: None, include_archived: true }).await.map_err(explained)?.sessions;
    let session = one_by_prefix(
        given,
        sessions,
        |session| session.session_id.as_str(),
        "sessions",
        || format!("no session {given:?}\n  hint: `troupe sessions` lists them"),
    )?;
    Ok(session.session_id)
}

/// The one of `items` whose `id` starts with `given`. Refused with `none()` when no id does, and as ambiguous,
/// naming the first few (`plural` says what they are: "sessions", "active runs"), when several do.
pub fn one_by_prefix<T>(
    given: &str,
    items: Vec<T>,
    id: impl Fn(&T) -> &str,
    plural: &str,
    none: impl FnOnce() -> String,
) -> anyhow::Result<T> {
    let mut matching: Vec<T> = items.into_iter().filter(|item| id(item).starts_with(given)).collect();
    match matching.len() {
        1 => Ok(matching.swap_remove(0)),
        0 => Err(anyhow::anyhow!(none())),
        count => {
            let ids: Vec<&str> = matching.iter().take(5).map(&id).collect();
            anyhow::bail!(
                "{given:?} is ambiguous: {count} {plural} start with it ({}{})\n  hint: give more characters of the id",
                ids.join(", "),
                if count > ids.len() { ", …" } else { "" }
            )
        }
    }
}

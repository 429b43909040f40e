//! How a person names a session on the command line: its whole id, or a unique prefix of a root session's id
//! (the eight characters `troupe sessions` prints are enough).

use troupe_protocol::methods::ClientProtocol;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::SessionListParams;

use crate::cli_errors::explained;

/// Shortest prefix accepted, so that a stray digit is not taken for a session.
const MIN_PREFIX: usize = 4;

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
    let matching: Vec<_> = sessions.iter().filter(|session| session.session_id.starts_with(given)).collect();
    match matching.as_slice() {
        [one] => Ok(one.session_id.clone()),
        [] => anyhow::bail!("no session {given:?}\n  hint: `troupe sessions` lists them"),
        several => {
            let ids: Vec<&str> = several.iter().take(5).map(|session| session.session_id.as_str()).collect();
            anyhow::bail!(
                "{given:?} is ambiguous: {} sessions start with it ({}{})\n  hint: give more characters of the id",
                several.len(),
                ids.join(", "),
                if several.len() > ids.len() { ", …" } else { "" }
            )
        }
    }
}

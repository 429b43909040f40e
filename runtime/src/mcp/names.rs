//! The names of MCP tools: what the model calls them (`mcp__<server>__<tool>`, within what model APIs accept) and
//! what the permission policy judges (`mcp:<server>/<tool>`).

use sha2::{Digest, Sha256};

/// The prefix of every MCP tool's name as the model sees it. No built-in or plugin tool starts with it.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The longest tool name model APIs take (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_MODEL_TOOL_NAME_CHARS: usize = 64;

/// The longest tool name a server may declare (the MCP specification's bound); longer ones are not offered.
pub const MAX_MCP_TOOL_NAME_CHARS: usize = 128;

/// The permission resource of a server's tool: `mcp:<server>/<tool>`, so a rule's glob allows a whole server
/// (`mcp:docs/*`) or one tool (`mcp:docs/search`).
pub fn mcp_resource(server: &str, tool: &str) -> String {
    format!("mcp:{server}/{tool}")
}

/// Whether a server's tool name is one troupe offers: 1 to 128 of `A-Z a-z 0-9 _ - . /` (the specification's
/// characters and `/`, which some servers use). A name with anything else (a space, a quote, `$`) could not be
/// matched safely by a permission rule and is left out.
pub fn acceptable_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MCP_TOOL_NAME_CHARS
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b'/'))
}

/// The name the model calls `tool` of `server` by: `mcp__<server>__<tool>` with every character a model API
/// refuses (`.`, `/`) replaced by `_`; a name over 64 characters keeps its first 55 and ends in `_` and 8 hex
/// digits of the SHA-256 of the whole name, so two long names stay apart.
pub fn model_tool_name(server: &str, tool: &str) -> String {
    let full: String = format!("{MCP_TOOL_PREFIX}{server}__{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if full.len() <= MAX_MODEL_TOOL_NAME_CHARS {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(4).map(|byte| format!("{byte:02x}")).collect();
    format!("{}_{hash}", &full[..MAX_MODEL_TOOL_NAME_CHARS - 9])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_are_prefixed_sanitized_and_bounded() {
        assert_eq!(model_tool_name("docs", "search"), "mcp__docs__search");
        assert_eq!(model_tool_name("docs", "files.read/all"), "mcp__docs__files_read_all");
        let long = model_tool_name("docs", &"x".repeat(100));
        let other = model_tool_name("docs", &format!("{}y", "x".repeat(99)));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("mcp__docs__xxx"));
        assert_ne!(long, other);
        assert_eq!(mcp_resource("docs", "search"), "mcp:docs/search");
    }

    #[test]
    fn tool_names_a_rule_could_not_match_safely_are_not_offered() {
        for good in ["search", "files.read", "a/b", "A-b_9"] {
            assert!(acceptable_tool_name(good), "{good}");
        }
        for bad in ["", "a b", "a;b", "$x", "naïve", &"x".repeat(129)] {
            assert!(!acceptable_tool_name(bad), "{bad}");
        }
    }
}

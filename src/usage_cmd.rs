//! `troupe usage [--session ID | --agent NAME | --tree ID] [--json]`: token counts and estimated cost.
//!
//! Without a scope it is everything the daemon's sessions spent (`usage.global`). A session's table is its
//! visible branch (`session.usage`'s `usage`), followed by what it spent in all when a revert hid some turns;
//! every other scope counts everything spent, reverted-away turns included. Costs are the daemon's estimates,
//! shown in USD with 4 decimals, or "unknown" when no request of the row had a price.

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::usage::{AgentUsageParams, UsageFigures, UsageRollup};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::session_ref::resolve_session_id;

/// What to sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageScope {
    Global,
    Session(String),
    Agent(String),
    Tree(String),
}

impl UsageScope {
    /// The scope the flags name (at most one is given; clap enforces it). None of them is the global scope.
    pub fn from_flags(session: Option<String>, agent: Option<String>, tree: Option<String>) -> UsageScope {
        match (session, agent, tree) {
            (Some(id), _, _) => UsageScope::Session(id),
            (_, Some(name), _) => UsageScope::Agent(name),
            (_, _, Some(id)) => UsageScope::Tree(id),
            _ => UsageScope::Global,
        }
    }
}

pub async fn usage(connection: &Connection, scope: UsageScope, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let scope = match scope {
        UsageScope::Session(given) => UsageScope::Session(resolve_session_id(&client, &given).await?),
        UsageScope::Tree(given) => UsageScope::Tree(resolve_session_id(&client, &given).await?),
        other => other,
    };
    let (value, text) = match &scope {
        UsageScope::Global => {
            let result = client.usage_global(Empty {}).await.map_err(explained)?;
            let text = table("All sessions", &result.usage);
            (serde_json::to_value(result)?, text)
        }
        UsageScope::Session(session_id) => {
            let params = SessionIdParams { session_id: session_id.clone() };
            let result = client.session_usage(params).await.map_err(explained)?;
            let mut text = table(&format!("Session {session_id}, visible conversation"), &result.usage);
            if result.spent != result.usage {
                text.push('\n');
                text.push_str(&table("Spent in all, turns hidden by a revert included", &result.spent));
            }
            (serde_json::to_value(result)?, text)
        }
        UsageScope::Agent(agent) => {
            let result = client.agent_usage(AgentUsageParams { agent_id: agent.clone() }).await.map_err(explained)?;
            let text = table(&format!("Agent {agent}, all sessions"), &result.usage);
            (serde_json::to_value(result)?, text)
        }
        UsageScope::Tree(session_id) => {
            let params = SessionIdParams { session_id: session_id.clone() };
            let result = client.session_tree_usage(params).await.map_err(explained)?;
            let below = match result.session_count.saturating_sub(1) {
                0 => "no delegated sessions".to_owned(),
                1 => "1 delegated session".to_owned(),
                count => format!("{count} delegated sessions"),
            };
            let text = table(&format!("Session {session_id} and {below}"), &result.usage);
            (serde_json::to_value(result)?, text)
        }
    };
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        crate::out_clean!("{text}");
    }
    client.close().await;
    Ok(())
}

/// A titled table: one row per model, then the totals.
pub fn table(title: &str, rollup: &UsageRollup) -> String {
    let mut out = format!("{title}\n");
    if rollup.totals.request_count == 0 {
        out.push_str("  no model requests recorded\n");
        return out;
    }
    let with_writes = rollup.totals.cache_write_tokens > 0;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["model", "requests", "input", "cached", "output", "reasoning"];
    if with_writes {
        header.push("cache writes");
    }
    header.extend(["cache hits", "cost"]);
    rows.push(header.into_iter().map(str::to_owned).collect());
    let row = |name: &str, figures: &UsageFigures| {
        let mut cells = vec![
            name.to_owned(),
            count(figures.request_count),
            count(figures.input_tokens),
            count(figures.cache_read_tokens),
            count(figures.output_tokens),
            count(figures.reasoning_tokens),
        ];
        if with_writes {
            cells.push(count(figures.cache_write_tokens));
        }
        cells.push(figures.cache_hit_rate.map_or_else(|| "-".to_owned(), |rate| format!("{:.1}%", rate * 100.0)));
        cells.push(cost(figures.estimated_cost_usd));
        cells
    };
    rows.extend(rollup.by_model.iter().map(|(model, figures)| row(model, figures)));
    let mut total = row("total", &rollup.totals);
    // The daemon's total sums the costs it knows; a row whose cost is unknown makes the total a lower bound.
    if rollup.by_model.values().any(|figures| figures.estimated_cost_usd.is_none())
        && let (Some(last), Some(known)) = (total.last_mut(), rollup.totals.estimated_cost_usd)
    {
        *last = format!("{} + unknown", cost(Some(known)));
    }
    rows.push(total);
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| rows.iter().map(|row| row[column].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                // The model names read left-aligned, the numbers right-aligned.
                if column == 0 { format!("{cell:<width$}") } else { format!("{cell:>width$}") }
            })
            .collect();
        out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
    }
    out
}

/// An estimated cost: dollars with 4 decimals, or "unknown".
pub fn cost(usd: Option<f64>) -> String {
    usd.map_or_else(|| "unknown".to_owned(), |usd| format!("${usd:.4}"))
}

/// A count with thousands separators.
fn count(value: u64) -> String {
    troupe_protocol::diagnostic::thousands(value)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn figures(requests: u64, input: u64, cost: Option<f64>) -> UsageFigures {
        UsageFigures {
            input_tokens: input,
            output_tokens: 120,
            reasoning_tokens: 0,
            cache_read_tokens: input / 4,
            cache_write_tokens: 0,
            request_count: requests,
            cache_hit_rate: (input > 0).then_some(0.25),
            estimated_cost_usd: cost,
        }
    }

    #[test]
    fn a_table_has_a_row_per_model_and_the_totals() {
        let rollup = UsageRollup {
            totals: figures(3, 12_000, Some(0.001_8)),
            by_model: BTreeMap::from([
                ("local/echo".to_owned(), figures(1, 0, None)),
                ("openai/gpt-4o-mini".to_owned(), figures(2, 12_000, Some(0.001_8))),
            ]),
        };
        let text = table("All sessions", &rollup);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "All sessions");
        assert!(lines[1].trim_start().starts_with("model"), "{text}");
        assert!(lines[2].contains("local/echo") && lines[2].ends_with("unknown") && lines[2].contains(" - "), "{text}");
        assert!(lines[3].contains("openai/gpt-4o-mini") && lines[3].contains("12,000"), "{text}");
        assert!(lines[3].contains("25.0%") && lines[3].ends_with("$0.0018"), "{text}");
        assert!(lines[4].trim_start().starts_with("total") && lines[4].ends_with("$0.0018 + unknown"), "{text}");
        assert_eq!(lines.len(), 5);
        // The columns line up.
        let cost_column = |line: &str| line.len();
        assert_eq!(cost_column(lines[1]), cost_column(lines[4]));
    }

    #[test]
    fn nothing_recorded_says_so() {
        assert_eq!(
            table("Agent x, all sessions", &UsageRollup::empty()),
            "Agent x, all sessions\n  no model requests recorded\n"
        );
    }

    #[test]
    fn counts_and_costs_are_readable() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(cost(None), "unknown");
        assert_eq!(cost(Some(0.000_27)), "$0.0003");
        assert_eq!(cost(Some(12.5)), "$12.5000");
    }

    #[test]
    fn flags_name_the_scope() {
        assert_eq!(UsageScope::from_flags(None, None, None), UsageScope::Global);
        assert_eq!(UsageScope::from_flags(Some("s".into()), None, None), UsageScope::Session("s".into()));
        assert_eq!(UsageScope::from_flags(None, Some("a".into()), None), UsageScope::Agent("a".into()));
        assert_eq!(UsageScope::from_flags(None, None, Some("t".into())), UsageScope::Tree("t".into()));
    }
}

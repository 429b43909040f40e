//! The commands a person uses to look around: `troupe runs`, `approvals`, `models`, `agents`, `providers` and
//! `skills`. Each reads what the daemon already knows (nothing here changes state), prints it for a person (short
//! ids, relative times, colours on a terminal only, untrusted text cleaned) or, with `--json`, as JSON.
//!
//! Everything is printed through [`crate::output`], the one place that treats a closed pipe (`troupe models | head
//! -1`) as success: the reader has what it wanted, and the command exits 0 instead of panicking or complaining.

use clap::Subcommand;

use crate::client_args::ClientArgs;

/// The read-only commands, flattened into the `troupe` command line.
#[derive(Subcommand, Debug)]
pub enum InspectCommand {
    /// List a session's runs, oldest first, with their run ids (what steer, recall, cancel and stdin take).
    Runs {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix of it.
        session_id: String,
        /// Print JSON instead of one line per run.
        #[arg(long)]
        json: bool,
    },
    /// List pending approvals, with the ids `troupe approve` takes: of one session's tree, or of every running one.
    Approvals {
        #[command(flatten)]
        client: ClientArgs,
        /// Only this session's tree (default: every root session with an active run).
        session_id: Option<String>,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        /// Print each operation whole, however long (by default a long command is cut after 24 lines or 2 KiB,
        /// saying how much is left).
        #[arg(long, conflicts_with = "json")]
        full: bool,
    },
    /// List the models the daemon knows, with their provider and whether it is connected.
    Models {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// List the agents, with their description and model chain (first choice first).
    Agents {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// List the providers, whether each is connected, and its base URL (never a key).
    Providers {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// List the skills a session sees, and the skill files that could not be read, with the reason.
    Skills {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix of it.
        session_id: String,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
}

impl InspectCommand {
    /// Runs the command to its end; its exit code (0: these commands fail only with an error). A closed stdout
    /// is success.
    pub fn run(self) -> anyhow::Result<u8> {
        let result = crate::commands::block_on(async move {
            match self {
                InspectCommand::Runs { client, session_id, json } => {
                    crate::runs_cmd::runs(&client.connection(), &session_id, json).await
                }
                InspectCommand::Approvals { client, session_id, json, full } => {
                    crate::approvals_cmd::approvals(&client.connection(), session_id.as_deref(), json, full).await
                }
                InspectCommand::Models { client, json } => {
                    crate::catalog_cmd::catalog(&client, crate::catalog_cmd::Listing::Models, json).await
                }
                InspectCommand::Agents { client, json } => {
                    crate::catalog_cmd::catalog(&client, crate::catalog_cmd::Listing::Agents, json).await
                }
                InspectCommand::Providers { client, json } => {
                    crate::catalog_cmd::catalog(&client, crate::catalog_cmd::Listing::Providers, json).await
                }
                InspectCommand::Skills { client, session_id, json } => {
                    crate::skills_cmd::skills(&client.connection(), &session_id, json).await
                }
            }
        });
        closed_pipe_is_success(result).map(|()| 0)
    }
}

/// A broken pipe that reached here anyway (from a write not made through [`crate::output`]) is success too: the
/// reader had enough.
pub fn closed_pipe_is_success(result: anyhow::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(error) if is_broken_pipe(&error) => Ok(()),
        other => other,
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The first line of untrusted text, cleaned and cut to `max` characters (with `…` when cut).
pub fn first_line(untrusted: &str, max: usize) -> String {
    let cleaned = crate::style::clean(untrusted.trim_start());
    let line = cleaned.lines().next().unwrap_or("").trim_end();
    let more_lines = cleaned.trim_end().contains('\n');
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more_lines {
        format!("{line} …")
    } else {
        line.to_owned()
    }
}

/// [`table`] with its first row (the column names) in bold.
pub fn header_table(rows: &[Vec<String>], style: crate::style::Style) -> String {
    let mut text = String::new();
    for (index, line) in table(rows).lines().enumerate() {
        text.push_str(&if index == 0 { style.bold(line) } else { line.to_owned() });
        text.push('\n');
    }
    text
}

/// Rows of cells as aligned columns (two spaces apart), the last column unpadded. Widths count characters; colour
/// is applied by the caller to whole lines afterwards, so escapes never skew them.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| rows.iter().filter_map(|row| row.get(column)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            let last = column + 1 == row.len();
            let padded = if last {
                cell.clone()
            } else {
                format!("{cell}{}", " ".repeat(widths[column].saturating_sub(cell.chars().count())))
            };
            line.push_str(&padded);
            if !last {
                line.push_str("  ");
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_anywhere_in_the_chain_is_success() {
        let broken = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("printing");
        assert!(closed_pipe_is_success(Err(broken)).is_ok());
        assert!(closed_pipe_is_success(Err(anyhow::anyhow!("no session"))).is_err());
    }

    #[test]
    fn first_lines_are_cleaned_and_cut() {
        assert_eq!(first_line("fix the \u{1b}[31mtests\u{1b}[0m\nand docs", 40), "fix the tests …");
        assert_eq!(first_line("abcdefghij", 5), "abcd…");
        assert_eq!(first_line("  hello  ", 40), "hello");
    }

    #[test]
    fn columns_align_by_characters() {
        let rows = vec![
            vec!["a".to_owned(), "ééé".to_owned(), "x".to_owned()],
            vec!["bbbb".to_owned(), "c".to_owned(), "y".to_owned()],
        ];
        assert_eq!(table(&rows), "a     ééé  x\nbbbb  c    y\n");
    }
}

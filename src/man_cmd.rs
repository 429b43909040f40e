//! `troupe man`: the manual pages clap generates, one per command, so that every `troupe-COMMAND(1)` the main
//! page lists under SUBCOMMANDS exists: `troupe man` prints troupe(1), `troupe man goal set` prints
//! troupe-goal-set(1), and `troupe man --dir DIR` writes all of them into DIR.
//!
//! clap's `help` subcommand is left out everywhere: it has no page of its own to list.

use std::io::Write as _;
use std::path::Path;

use crate::cli_errors::UsageError;

/// Prints the page of the command named by `path` (empty: `troupe` itself), or with `dir` writes every page
/// there and prints the files written.
pub fn man(command: clap::Command, dir: Option<&Path>, path: &[String]) -> anyhow::Result<()> {
    let mut command = command.disable_help_subcommand(true);
    command.build();
    if let Some(dir) = dir {
        if !path.is_empty() {
            return Err(UsageError("--dir writes every page; name no command with it".to_owned()).into());
        }
        std::fs::create_dir_all(dir).map_err(|error| anyhow::anyhow!("cannot create {}: {error}", dir.display()))?;
        for file in write_all(&command, dir)? {
            crate::outln!("{}", file.display());
        }
        return Ok(());
    }
    let mut page = &command;
    for name in path {
        page = page.find_subcommand(name).filter(|sub| !sub.is_hide_set()).ok_or_else(|| {
            UsageError(format!(
                "`{}` has no command `{name}`; `troupe man --dir DIR` writes the page of every command",
                page.get_display_name().unwrap_or(page.get_name())
            ))
        })?;
    }
    let mut buffer = Vec::new();
    clap_mangen::Man::new(page.clone()).render(&mut buffer)?;
    let mut stdout = std::io::stdout().lock();
    crate::output::checked(stdout.write_all(&buffer).and_then(|()| stdout.flush()));
    Ok(())
}

/// Writes the page of `command` and of each of its visible subcommands, depth first; the files written.
fn write_all(command: &clap::Command, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut written = vec![
        clap_mangen::Man::new(command.clone())
            .generate_to(dir)
            .map_err(|error| anyhow::anyhow!("cannot write a page into {}: {error}", dir.display()))?,
    ];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        written.extend(write_all(sub, dir)?);
    }
    Ok(written)
}

//! The data directory's start check: a file of its layout that is not a file.
//!
//! Something other than a regular file where the daemon keeps one (most often a directory: a tool, a script or a
//! slip of `mkdir -p` made it) cannot be read or replaced. What that costs depends on the file, so each says what
//! the daemon does about it ([`Consequence`]): without its token or its lock it must not run; without its config,
//! provider keys, recorded URL or console sign-ins it runs, as if the file were missing, and says so. The daemon
//! and `troupe config check` report them in the same words.

use std::fmt;
use std::path::PathBuf;

use super::DataDir;
use crate::provider_store::PROVIDERS_FILE_NAME;

/// A file of the data directory's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutFile {
    Config,
    Token,
    Lock,
    Url,
    Providers,
    ConsoleSessions,
    SessionIndex,
}

impl LayoutFile {
    /// Every file the start check looks at, in the order they are reported.
    pub const ALL: [LayoutFile; 7] = [
        LayoutFile::Token,
        LayoutFile::Lock,
        LayoutFile::Config,
        LayoutFile::Providers,
        LayoutFile::Url,
        LayoutFile::ConsoleSessions,
        LayoutFile::SessionIndex,
    ];

    /// Where it is in `data_dir`.
    pub fn path(self, data_dir: &DataDir) -> PathBuf {
        match self {
            LayoutFile::Config => data_dir.config_path(),
            LayoutFile::Token => data_dir.token_path(),
            LayoutFile::Lock => data_dir.lock_path(),
            LayoutFile::Url => data_dir.url_path(),
            LayoutFile::Providers => data_dir.root().join(PROVIDERS_FILE_NAME),
            LayoutFile::ConsoleSessions => data_dir.console_sessions_path(),
            LayoutFile::SessionIndex => data_dir.session_index_path(),
        }
    }

    /// What it holds, for a sentence.
    fn holds(self) -> &'static str {
        match self {
            LayoutFile::Config => "its settings",
            LayoutFile::Token => "the token that authenticates clients",
            LayoutFile::Lock => "the lock that keeps a second daemon off this data directory",
            LayoutFile::Url => "the URL local clients find it at",
            LayoutFile::Providers => "the connected providers and their keys",
            LayoutFile::ConsoleSessions => "the web console's sign-ins",
            LayoutFile::SessionIndex => "every session's metadata as the last clean stop left it",
        }
    }

    /// What the daemon does when it is not a file.
    pub fn consequence(self) -> Consequence {
        match self {
            LayoutFile::Token => Consequence::RefuseUnlessTokenFromEnvironment,
            LayoutFile::Lock => Consequence::Refuse,
            LayoutFile::Config => Consequence::RunWithout("it runs on the default settings"),
            LayoutFile::Providers => Consequence::RunWithout(
                "it runs with no provider connected, and connecting one fails until the entry is removed",
            ),
            LayoutFile::Url => Consequence::RunWithout("local clients find it only when given its URL"),
            LayoutFile::ConsoleSessions => {
                Consequence::RunWithout("browsers must sign in to the console again after each restart")
            }
            LayoutFile::SessionIndex => Consequence::RunWithout(
                "each start reads every session's folder before it lists them, which takes longer with many sessions",
            ),
        }
    }
}

/// What the daemon does about a [`Misplaced`] file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consequence {
    /// It does not start: it cannot run safely without the file.
    Refuse,
    /// The token file: the daemon does not start, since it would have no token to require, unless `TROUPE_TOKEN`
    /// gives it one (the file is not read then).
    RefuseUnlessTokenFromEnvironment,
    /// It runs as if the file were missing; the text says what that means.
    RunWithout(&'static str),
}

/// What was found where a file belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundKind {
    Directory,
    /// A socket, a FIFO or a device.
    Special,
}

/// A file of the layout that is something else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misplaced {
    pub file: LayoutFile,
    pub path: PathBuf,
    pub found: FoundKind,
}

impl Misplaced {
    /// What to do, in words: remove the entry (it holds nothing the daemon wrote there).
    pub fn remedy(&self) -> String {
        let command = match self.found {
            FoundKind::Directory => "rmdir",
            FoundKind::Special => "rm",
        };
        match self.file.consequence() {
            Consequence::RefuseUnlessTokenFromEnvironment => format!(
                "remove it (`{command} {}`) and start again: a new token is created (clients need it: `troupe \
                 token`), or give the token in TROUPE_TOKEN",
                self.path.display()
            ),
            Consequence::Refuse => format!("remove it (`{command} {}`) and start again", self.path.display()),
            Consequence::RunWithout(_) => {
                format!("remove it (`{command} {}`) and restart the daemon", self.path.display())
            }
        }
    }
}

impl Misplaced {
    /// The sentence after the path: what it is, what it should be, what the daemon does and what to do.
    pub fn explanation(&self) -> String {
        let found = match self.found {
            FoundKind::Directory => "a directory",
            FoundKind::Special => "not a regular file",
        };
        let consequence = match self.file.consequence() {
            Consequence::Refuse => "the daemon cannot run without it",
            Consequence::RefuseUnlessTokenFromEnvironment => {
                "the daemon will not run without a token, which would let no client in, or any"
            }
            Consequence::RunWithout(what) => what,
        };
        format!("is {found}, where the daemon keeps {} in a file: {consequence}; {}", self.file.holds(), self.remedy())
    }
}

impl fmt::Display for Misplaced {
    /// One line: the path and its [`Misplaced::explanation`].
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {}", self.path.display(), self.explanation())
    }
}

impl DataDir {
    /// The files of the layout that exist but are not regular files (symlinks followed, as the daemon reads
    /// them). Missing files are not listed: each is created or treated as empty where it is used.
    pub fn misplaced_files(&self) -> Vec<Misplaced> {
        LayoutFile::ALL
            .into_iter()
            .filter_map(|file| {
                let path = file.path(self);
                let metadata = std::fs::metadata(&path).ok()?;
                let found = if metadata.is_dir() {
                    FoundKind::Directory
                } else if metadata.is_file() {
                    return None;
                } else {
                    FoundKind::Special
                };
                Some(Misplaced { file, path, found })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_and_sockets_where_files_belong_are_found_and_files_are_not() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(temp.path().to_path_buf());
        data_dir.ensure_layout().unwrap();
        assert_eq!(data_dir.misplaced_files(), []);
        std::fs::write(data_dir.config_path(), "").unwrap();
        std::fs::create_dir(data_dir.token_path()).unwrap();
        std::fs::create_dir(data_dir.root().join(PROVIDERS_FILE_NAME)).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(data_dir.url_path()).unwrap();

        let found = data_dir.misplaced_files();
        let summary: Vec<_> = found.iter().map(|misplaced| (misplaced.file, misplaced.found)).collect();
        assert_eq!(
            summary,
            [
                (LayoutFile::Token, FoundKind::Directory),
                (LayoutFile::Providers, FoundKind::Directory),
                (LayoutFile::Url, FoundKind::Special),
            ]
        );
        let token = found[0].to_string();
        assert!(token.starts_with(&format!("{} is a directory", data_dir.token_path().display())), "{token}");
        assert!(token.contains(&format!("`rmdir {}`", data_dir.token_path().display())), "{token}");
        assert!(token.contains("TROUPE_TOKEN"), "{token}");
        assert!(found[2].to_string().contains("`rm "), "{}", found[2]);
        assert!(matches!(found[1].file.consequence(), Consequence::RunWithout(_)));
        assert_eq!(found[0].file.consequence(), Consequence::RefuseUnlessTokenFromEnvironment);
    }
}

//! Path checks for the classifier: does a path word stay inside the cwd and away from denied paths?
//!
//! Twice over: by its text (resolved against the cwd lexically; a `..` component is refused outright) and
//! physically, through the caller's resolver ([`ClassifierContext::resolve`]), so that a symlink inside the cwd
//! that leads elsewhere (`pw -> /etc/passwd`, `etc -> /etc`) is caught. A glob cannot be resolved without
//! listing directories, so it is accepted only where no match can be followed: in the last component, for a
//! program that does not follow its operands (the caller decides), below a directory that resolves inside.

use std::path::{Component, Path, PathBuf};

use super::ClassifierContext;

/// The characters that make a word a pattern (`(` for extended globs).
const GLOB_CHARACTERS: [char; 4] = ['*', '?', '[', '('];

/// How far a program reads below a path it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// The path itself (`cat`, `stat`, `head`).
    Single,
    /// Everything below it (`grep -r`, `rg`, `find`, `tree`, `du`, `ls -R`).
    Recursive,
}

/// Whether the path word `text` (a glob when `glob`) names only things inside the cwd and nothing inside a
/// denied path (nor, for a recursive read, a directory that holds one), by its text and physically.
pub(super) fn path_is_safe(text: &str, glob: bool, reach: Reach, context: &ClassifierContext<'_>) -> bool {
    if text.is_empty() || text.starts_with('~') {
        return false;
    }
    if glob {
        // Only the last component may be a pattern, and nothing may follow it: a pattern in a directory
        // component, or a trailing `/`, would make the kernel follow a matching symlink.
        let (directories, last) = text.rsplit_once('/').unwrap_or(("", text));
        if directories.contains(GLOB_CHARACTERS) || !last.contains(GLOB_CHARACTERS) || last.starts_with('.') {
            return false;
        }
    }
    let mut resolved = PathBuf::new();
    // Components up to (not including) the one holding a glob: what a glob can reach lies below it.
    let mut literal_prefix: Option<PathBuf> = None;
    for component in context.cwd.join(text).components() {
        match component {
            Component::ParentDir => return false,
            Component::CurDir => {}
            Component::Normal(name) => {
                let name_text = name.to_string_lossy();
                if glob && literal_prefix.is_none() && name_text.contains(GLOB_CHARACTERS) {
                    // A pattern that starts with `.` or holds a bracket expression may match `.` or `..`.
                    if name_text.starts_with('.') || name_text.contains('[') {
                        return false;
                    }
                    literal_prefix = Some(resolved.clone());
                }
                resolved.push(name);
            }
            Component::RootDir | Component::Prefix(_) => resolved.push(component),
        }
    }
    if !resolved.starts_with(context.cwd) {
        return false;
    }
    match (glob, &literal_prefix) {
        (true, Some(prefix)) => {
            let Some(physical) = (context.resolve)(prefix) else { return false };
            physical.starts_with(context.cwd)
                && !glob_reaches_denied(prefix, context)
                && !glob_reaches_denied(&physical, context)
        }
        (true, None) => false,
        (false, _) => {
            let Some(physical) = (context.resolve)(&resolved) else { return false };
            physical.starts_with(context.cwd)
                && !touches_denied(&resolved, reach, context)
                && !touches_denied(&physical, reach, context)
        }
    }
}

/// Whether `path` is inside a denied path or, for a recursive read, holds one.
fn touches_denied(path: &Path, reach: Reach, context: &ClassifierContext<'_>) -> bool {
    context
        .denied
        .iter()
        .any(|denied| path.starts_with(denied) || (reach == Reach::Recursive && denied.starts_with(path)))
}

/// Whether a pattern (never starting with `.`) matched among the entries of `prefix` may reach a denied path.
fn glob_reaches_denied(prefix: &Path, context: &ClassifierContext<'_>) -> bool {
    // A denied path whose next component below the prefix is a dot entry cannot be matched.
    let reachable = |denied: &Path| match denied.strip_prefix(prefix) {
        Ok(rest) => rest.components().next().is_none_or(|next| !next.as_os_str().to_string_lossy().starts_with('.')),
        Err(_) => prefix.starts_with(denied),
    };
    context.denied.iter().any(|denied| reachable(denied))
}

/// Whether a resolved absolute path (a file tool's resource) is inside the cwd and touches no denied path: not
/// inside one, and not a directory that holds one (a listing or search of it would reach inside).
pub(super) fn resolved_path_is_safe(path: &Path, context: &ClassifierContext<'_>) -> bool {
    path.is_absolute()
        && path.starts_with(context.cwd)
        && !path.components().any(|component| component == Component::ParentDir)
        && !context.denied.iter().any(|denied| path.starts_with(denied) || denied.starts_with(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/p/pw -> /etc/passwd`, `/p/etc -> /etc`, `/p/loop` cannot be resolved; everything else is itself.
    fn fake_resolve(path: &Path) -> Option<PathBuf> {
        let links = [("/p/pw", "/etc/passwd"), ("/p/etc", "/etc"), ("/p/in", "/p/src")];
        if path.starts_with("/p/loop") {
            return None;
        }
        for (link, target) in links {
            if let Ok(rest) = path.strip_prefix(link) {
                return Some(Path::new(target).join(rest));
            }
        }
        Some(path.to_path_buf())
    }

    fn check(text: &str, glob: bool, reach: Reach) -> bool {
        let denied = [PathBuf::from("/p/.troupe"), PathBuf::from("/p/secret")];
        let context = ClassifierContext { cwd: Path::new("/p"), denied: &denied, resolve: &fake_resolve };
        path_is_safe(text, glob, reach, &context)
    }

    #[test]
    fn paths_must_stay_inside_the_cwd_and_away_from_denied_paths() {
        use Reach::*;
        for (text, glob, reach) in [
            ("src/main.rs", false, Single),
            ("./src", false, Recursive),
            ("/p/src", false, Single),
            ("src/*.rs", true, Single),
            ("in/x.rs", false, Single),
            ("in/*.rs", true, Single),
        ] {
            assert!(check(text, glob, reach), "{text}");
        }
        for (text, glob, reach) in [
            ("../x", false, Single),
            ("src/../../x", false, Single),
            ("src/../x", false, Single),
            ("/etc/passwd", false, Single),
            ("~/x", false, Single),
            ("", false, Single),
            (".troupe/daemon/token", false, Single),
            ("./.troupe", false, Single),
            ("secret", false, Single),
            (".", false, Recursive),
            ("/p", false, Recursive),
            ("*", true, Single),
            ("s*/token", true, Single),
            (".*", true, Single),
            ("[.]x", true, Single),
            ("src/*/", true, Single),
            ("src/*/x", true, Single),
        ] {
            assert!(!check(text, glob, reach), "{text}");
        }
        // `*` never matches `.troupe`, but a recursive read of the cwd reaches it.
        assert!(check(".", false, Single));
        assert!(check("secret-not/x", false, Single));
    }

    #[test]
    fn symlinks_out_of_the_cwd_and_unresolvable_paths_are_refused() {
        use Reach::*;
        for (text, glob, reach) in [
            ("pw", false, Single),
            ("./pw", false, Single),
            ("etc/shadow", false, Single),
            ("etc", false, Recursive),
            ("etc/", false, Single),
            ("etc/*", true, Single),
            ("loop/x", false, Single),
            ("loop/*", true, Single),
        ] {
            assert!(!check(text, glob, reach), "{text}");
        }
    }
}

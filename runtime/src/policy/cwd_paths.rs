//! Lexical path checks for the classifier: does a path word stay inside the cwd and away from denied paths?
//!
//! Pure: paths are resolved against the cwd by their text alone. Because a symlinked directory makes `..`
//! mean something other than its text, a `..` component is refused outright rather than resolved.

use std::path::{Component, Path, PathBuf};

use super::ClassifierContext;

/// How far a program reads below a path it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// The path itself (`cat`, `stat`, `head`).
    Single,
    /// Everything below it (`grep -r`, `rg`, `find`, `tree`, `du`, `ls -R`).
    Recursive,
}

/// Whether the path word `text` (a glob when `glob`) names only things inside the cwd and nothing inside a
/// denied path (nor, for a recursive read, a directory that holds one).
pub(super) fn path_is_safe(text: &str, glob: bool, reach: Reach, context: &ClassifierContext<'_>) -> bool {
    if text.is_empty() || text.starts_with('~') {
        return false;
    }
    let mut resolved = PathBuf::new();
    // Components up to (not including) the first one holding a glob: what a glob can reach lies below it.
    let mut literal_prefix: Option<PathBuf> = None;
    let joined = context.cwd.join(text);
    for component in joined.components() {
        match component {
            Component::ParentDir => return false,
            Component::CurDir => {}
            Component::Normal(name) => {
                let name_text = name.to_string_lossy();
                if glob && literal_prefix.is_none() && name_text.contains(['*', '?', '[']) {
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
    if glob && let Some(prefix) = &literal_prefix {
        // Something a glob below `prefix` may reach. Patterns never start with `.` (refused above), so a denied
        // path whose next component below the prefix is a dot entry cannot be matched.
        let reachable = |denied: &Path| match denied.strip_prefix(prefix) {
            Ok(rest) => {
                rest.components().next().is_none_or(|next| !next.as_os_str().to_string_lossy().starts_with('.'))
            }
            Err(_) => prefix.starts_with(denied),
        };
        return !context.denied.iter().any(|denied| reachable(denied));
    }
    !context
        .denied
        .iter()
        .any(|denied| resolved.starts_with(denied) || (reach == Reach::Recursive && denied.starts_with(&resolved)))
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

    fn check(text: &str, glob: bool, reach: Reach) -> bool {
        let denied = [PathBuf::from("/p/.troupe"), PathBuf::from("/p/secret")];
        let context = ClassifierContext { cwd: Path::new("/p"), denied: &denied, cwd_is_repository_root: false };
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
        ] {
            assert!(!check(text, glob, reach), "{text}");
        }
        // `*` never matches `.troupe`, but a recursive read of the cwd reaches it.
        assert!(check(".", false, Single));
        assert!(check("secret-not/x", false, Single));
    }
}

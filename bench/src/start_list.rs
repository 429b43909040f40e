//! How much of the start's function list the measured executable holds.
//!
//! `build.rs` hands `build/startup-symbols.txt` to the linker, which places the functions a start runs side by side;
//! a start then maps a few megabytes of code instead of pieces of all of it (docs/performance.md, finding 8). The
//! list names functions as the linker does, hash suffixes included, and a change to the crates renames many of them:
//! the linker skips names it does not find, silently, and the idle RSS of figure 6 rises by about 2 MiB with a
//! stale list. Figure 6 prints how many of the list's names the executable has, so a measurement made with a stale
//! list says so.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context as _;
use object::{Object, ObjectSymbol};

/// The list this benchmark was built with: the one `cargo build --release -p troupe -p troupe-bench` also hands
/// to the linker of the `troupe` built beside it.
const START_LIST: &str = include_str!("../../build/startup-symbols.txt");

/// How many of the list's names the executable's symbol table holds.
#[derive(Clone, Copy, Debug)]
pub struct Coverage {
    pub listed: usize,
    pub found: usize,
}

impl Coverage {
    /// Whether some of the list's functions are not in the executable: the list was made for another build. A list
    /// made for a build finds all of its names there, and every name missing costs: the function it now names is
    /// somewhere else in the code, and the kernel maps up to 64 KiB around each page a start touches (86 names
    /// missing of 1,412 put 1.9 MiB more of the executable in the idle RSS, docs/performance.md).
    pub fn is_stale(&self) -> bool {
        self.found < self.listed
    }
}

/// Counts the list's names in `executable`'s symbol table.
pub fn coverage(executable: &Path) -> anyhow::Result<Coverage> {
    let data = std::fs::read(executable).with_context(|| format!("read {}", executable.display()))?;
    let names = symbol_names(&data).with_context(|| format!("read the symbols of {}", executable.display()))?;
    Ok(count(START_LIST, &names))
}

/// The names in an executable's symbol table (none if it was stripped).
fn symbol_names(data: &[u8]) -> anyhow::Result<HashSet<&[u8]>> {
    let file = object::File::parse(data)?;
    Ok(file.symbols().filter_map(|symbol| symbol.name_bytes().ok()).collect())
}

/// The names of `list` (its lines but comments and blank ones) found in `names`.
fn count(list: &str, names: &HashSet<&[u8]>) -> Coverage {
    let listed: Vec<&str> =
        list.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).collect();
    let found = listed.iter().filter(|name| names.contains(name.as_bytes())).count();
    Coverage { listed: listed.len(), found }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_listed_names_the_executable_has_and_skips_comments() {
        let list = "# made by scripts/startup-symbols\n_ZN4main17h01E\n\n_ZN5start17h02E\n_ZN4gone17h03E\n";
        let names: HashSet<&[u8]> = [b"_ZN4main17h01E".as_slice(), b"_ZN5start17h02E", b"other"].into();
        let coverage = count(list, &names);
        assert_eq!((coverage.listed, coverage.found), (3, 2));
        assert!(coverage.is_stale(), "one name is missing");
        let all = count("_ZN4main17h01E\n", &names);
        assert!(!all.is_stale());
    }

    #[test]
    fn the_list_shipped_with_the_checkout_has_names() {
        let coverage = count(START_LIST, &HashSet::new());
        assert!(coverage.listed > 500, "build/startup-symbols.txt lists {} functions", coverage.listed);
        assert_eq!(coverage.found, 0);
    }

    #[test]
    fn reads_the_symbols_of_a_real_executable() -> anyhow::Result<()> {
        // This test's own executable: an ELF file with a symbol table, whose names include this function's.
        let executable = std::env::current_exe()?;
        let data = std::fs::read(&executable)?;
        let names = symbol_names(&data)?;
        let ours = names.iter().filter(|name| {
            std::str::from_utf8(name).is_ok_and(|name| name.contains("reads_the_symbols_of_a_real_executable"))
        });
        assert!(ours.count() >= 1, "{} has no symbol of this test among {}", executable.display(), names.len());
        Ok(())
    }
}

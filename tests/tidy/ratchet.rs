//! The ratchet on cycles a scope still has: the checked-in list of edges that lie on a cycle today
//! (`known_cycle_edges.txt`). An edge on a cycle that is not in the list fails, and so does a listed edge that no
//! longer lies on a cycle, so the list can only shrink.

use std::collections::{BTreeMap, BTreeSet};

use crate::graph::{Edge, cyclic_components, edges_on_cycles, shortest_cycle_through};
use crate::references::Reference;

pub const LIST: &str = "tests/tidy/known_cycle_edges.txt";

/// The listed edges by scope. A line is `<scope folder> <from> -> <to>`; `#` starts a comment.
pub fn parse_list(text: &str) -> Result<BTreeMap<String, BTreeSet<Edge>>, String> {
    let mut list: BTreeMap<String, BTreeSet<Edge>> = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [scope, from, "->", to] = words.as_slice() else {
            return Err(format!("{LIST}:{}: expected `<scope> <from> -> <to>`, found `{line}`", number + 1));
        };
        if !list.entry((*scope).to_owned()).or_default().insert(((*from).to_owned(), (*to).to_owned())) {
            return Err(format!("{LIST}:{}: `{line}` is listed twice", number + 1));
        }
    }
    Ok(list)
}

/// What is wrong with `scope`'s references against its `listed` edges, each a paragraph for the failure message.
pub fn check(scope: &str, references: &[Reference], listed: &BTreeSet<Edge>) -> Vec<String> {
    let mut places: BTreeMap<Edge, Vec<String>> = BTreeMap::new();
    for found in references {
        places
            .entry((found.from.clone(), found.to.clone()))
            .or_default()
            .push(format!("{scope}/{}:{}", found.file, found.line));
    }
    let edges: BTreeSet<Edge> = places.keys().cloned().collect();
    let on_cycles = edges_on_cycles(&edges);
    let mut problems = Vec::new();
    for component in cyclic_components(&edges) {
        let inside: Vec<&Edge> =
            on_cycles.iter().filter(|(from, to)| component.contains(from) && component.contains(to)).collect();
        let new: Vec<&&Edge> = inside.iter().filter(|edge| !listed.contains(**edge)).collect();
        if new.is_empty() {
            continue;
        }
        let mut report = format!(
            "{scope}: the modules {} import each other in a circle. Break each new edge (move what it needs to a \
             module both can import, or invert the dependency):",
            component.join(", ")
        );
        for edge in &new {
            let cycle = shortest_cycle_through(&edges, edge).unwrap_or_default();
            report.push_str(&format!("\n  new edge {} -> {} closes the cycle {}", edge.0, edge.1, cycle.join(" -> ")));
        }
        report.push_str("\n  the edges of the circle, with the lines that make them:");
        for edge in inside {
            let known = if listed.contains(edge) { " (listed, known)" } else { "" };
            report.push_str(&format!("\n    {} -> {}{known}", edge.0, edge.1));
            for place in &places[edge] {
                report.push_str(&format!("\n      {place}"));
            }
        }
        problems.push(report);
    }
    for edge in listed.difference(&on_cycles) {
        let why = if edges.contains(edge) { "no longer lies on a cycle" } else { "no longer exists" };
        problems.push(format!(
            "{scope}: the edge {} -> {} {why}: well done; delete the line `{scope} {} -> {}` from {LIST} so that it \
             cannot come back",
            edge.0, edge.1, edge.0, edge.1
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(from: &str, to: &str, line: usize) -> Reference {
        Reference { from: from.to_owned(), to: to.to_owned(), file: format!("{from}.rs"), line }
    }

    fn edges(pairs: &[(&str, &str)]) -> BTreeSet<Edge> {
        pairs.iter().map(|(from, to)| ((*from).to_owned(), (*to).to_owned())).collect()
    }

    #[test]
    fn an_unlisted_cycle_fails_with_its_edges_and_lines() {
        let references =
            [reference("a", "b", 3), reference("b", "c", 7), reference("c", "a", 9), reference("c", "d", 1)];
        let problems = check("x/src", &references, &BTreeSet::new());
        assert_eq!(problems.len(), 1, "{problems:?}");
        let report = &problems[0];
        assert!(report.contains("the modules a, b, c import each other"), "{report}");
        assert!(report.contains("new edge a -> b closes the cycle a -> b -> c -> a"), "{report}");
        for place in ["x/src/a.rs:3", "x/src/b.rs:7", "x/src/c.rs:9"] {
            assert!(report.contains(place), "{place} missing from {report}");
        }
        assert!(!report.contains("c.rs:1"), "c -> d lies on no cycle: {report}");
    }

    #[test]
    fn a_listed_cycle_passes_but_a_new_edge_closing_another_fails() {
        let known = edges(&[("a", "b"), ("b", "a")]);
        assert!(check("x/src", &[reference("a", "b", 1), reference("b", "a", 1)], &known).is_empty());
        let grown = [reference("a", "b", 1), reference("b", "a", 1), reference("b", "c", 2), reference("c", "a", 4)];
        let problems = check("x/src", &grown, &known);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("new edge b -> c"), "{}", problems[0]);
        assert!(problems[0].contains("new edge c -> a"), "{}", problems[0]);
        assert!(problems[0].contains("a -> b (listed, known)"), "{}", problems[0]);
    }

    #[test]
    fn a_listed_edge_that_is_gone_or_off_every_cycle_must_be_deleted() {
        let known = edges(&[("a", "b"), ("b", "a"), ("c", "d")]);
        let problems = check("x/src", &[reference("a", "b", 1)], &known);
        assert_eq!(
            problems,
            [
                "x/src: the edge a -> b no longer lies on a cycle: well done; delete the line `x/src a -> b` from \
                 tests/tidy/known_cycle_edges.txt so that it cannot come back",
                "x/src: the edge b -> a no longer exists: well done; delete the line `x/src b -> a` from \
                 tests/tidy/known_cycle_edges.txt so that it cannot come back",
                "x/src: the edge c -> d no longer exists: well done; delete the line `x/src c -> d` from \
                 tests/tidy/known_cycle_edges.txt so that it cannot come back",
            ]
        );
    }

    #[test]
    fn the_list_parses_and_refuses_malformed_or_doubled_lines() {
        let list = parse_list("# comment\n\nactors/src a -> b  # why\nactors/src b -> a\n").unwrap();
        assert_eq!(list["actors/src"], edges(&[("a", "b"), ("b", "a")]));
        assert!(parse_list("actors/src a b").unwrap_err().contains(":1: expected"));
        assert!(parse_list("s a -> b\ns a -> b").unwrap_err().contains(":2: `s a -> b` is listed twice"));
    }
}

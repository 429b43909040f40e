//! The report of a scope's import cycles: each circle of modules, an edge that closes it (with the shortest cycle
//! through that edge), and the file:line of every path that makes each of its edges.

use std::collections::{BTreeMap, BTreeSet};

use crate::graph::{Edge, cyclic_components, edges_on_cycles, shortest_cycle_through};
use crate::references::Reference;

/// Every cycle among `scope`'s references, each a paragraph for the failure message; empty for a DAG.
pub fn check(scope: &str, references: &[Reference]) -> Vec<String> {
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
        let mut report = format!(
            "{scope}: the modules {} import each other in a circle. Break it (move what an edge needs to a module \
             both can import, or invert the dependency: a child reaches its parent through a port):",
            component.join(", ")
        );
        if let Some(first) = inside.first() {
            let cycle = shortest_cycle_through(&edges, first).unwrap_or_default();
            report.push_str(&format!("\n  for example {}", cycle.join(" -> ")));
        }
        report.push_str("\n  the edges of the circle, with the lines that make them:");
        for edge in inside {
            report.push_str(&format!("\n    {} -> {}", edge.0, edge.1));
            for place in &places[edge] {
                report.push_str(&format!("\n      {place}"));
            }
        }
        problems.push(report);
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(from: &str, to: &str, line: usize) -> Reference {
        Reference { from: from.to_owned(), to: to.to_owned(), file: format!("{from}.rs"), line }
    }

    #[test]
    fn a_cycle_fails_with_its_edges_and_lines() {
        let references =
            [reference("a", "b", 3), reference("b", "c", 7), reference("c", "a", 9), reference("c", "d", 1)];
        let problems = check("x/src", &references);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let report = &problems[0];
        assert!(report.contains("the modules a, b, c import each other"), "{report}");
        assert!(report.contains("for example a -> b -> c -> a"), "{report}");
        for place in ["x/src/a.rs:3", "x/src/b.rs:7", "x/src/c.rs:9"] {
            assert!(report.contains(place), "{place} missing from {report}");
        }
        assert!(!report.contains("c.rs:1"), "c -> d lies on no cycle: {report}");
    }

    #[test]
    fn a_dag_passes() {
        let references = [reference("a", "b", 1), reference("b", "c", 2), reference("a", "c", 3)];
        assert!(check("x/src", &references).is_empty());
    }
}

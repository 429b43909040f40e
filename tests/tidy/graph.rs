//! The module graph: strongly connected components (Tarjan), the edges that lie on a cycle, and a shortest cycle
//! through an edge for the failure report.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A directed edge `from -> to` between units.
pub type Edge = (String, String);

/// The strongly connected components of the graph with more than one node (a unit never references itself:
/// references within a unit are not edges), each sorted, in a stable order.
pub fn cyclic_components(edges: &BTreeSet<Edge>) -> Vec<Vec<String>> {
    let mut successors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        successors.entry(from).or_default().push(to);
        successors.entry(to).or_default();
    }
    let mut tarjan = Tarjan {
        successors: &successors,
        index: BTreeMap::new(),
        low_link: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in successors.keys() {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    let mut components: Vec<Vec<String>> = tarjan
        .components
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut names: Vec<String> = component.into_iter().map(str::to_owned).collect();
            names.sort();
            names
        })
        .collect();
    components.sort();
    components
}

/// The edges whose two ends lie in one strongly connected component: exactly the edges that lie on some cycle.
pub fn edges_on_cycles(edges: &BTreeSet<Edge>) -> BTreeSet<Edge> {
    let components = cyclic_components(edges);
    let component_of: BTreeMap<&str, usize> = components
        .iter()
        .enumerate()
        .flat_map(|(number, component)| component.iter().map(move |node| (node.as_str(), number)))
        .collect();
    edges
        .iter()
        .filter(|(from, to)| {
            component_of.get(from.as_str()).is_some_and(|component| component_of.get(to.as_str()) == Some(component))
        })
        .cloned()
        .collect()
}

/// A shortest cycle through `edge` (`[from, to, …, from]`), if the edge lies on one.
pub fn shortest_cycle_through(edges: &BTreeSet<Edge>, edge: &Edge) -> Option<Vec<String>> {
    let (from, to) = edge;
    // Breadth-first from `to` back to `from`.
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([to.as_str()]);
    let mut seen = BTreeSet::from([to.as_str()]);
    while let Some(node) = queue.pop_front() {
        if node == from {
            // `to`, …, `from` walked backwards, then closed by the edge itself.
            let mut back = vec![node];
            let mut at = node;
            while at != to {
                at = came_from[at];
                back.push(at);
            }
            back.reverse();
            let mut cycle = vec![from.clone()];
            cycle.extend(back.into_iter().map(str::to_owned));
            return Some(cycle);
        }
        for (next_from, next) in edges.range((node.to_owned(), String::new())..) {
            if next_from != node {
                break;
            }
            if seen.insert(next.as_str()) {
                came_from.insert(next.as_str(), node);
                queue.push_back(next.as_str());
            }
        }
    }
    None
}

struct Tarjan<'a> {
    successors: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low_link: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on_stack: BTreeSet<&'a str>,
    components: Vec<Vec<&'a str>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, node: &'a str) {
        let number = self.index.len();
        self.index.insert(node, number);
        self.low_link.insert(node, number);
        self.stack.push(node);
        self.on_stack.insert(node);
        let successors: &'a [&'a str] = self.successors.get(node).map_or(&[], Vec::as_slice);
        for &next in successors {
            if !self.index.contains_key(next) {
                self.visit(next);
                let lowest = self.low_link[node].min(self.low_link[next]);
                self.low_link.insert(node, lowest);
            } else if self.on_stack.contains(next) {
                let lowest = self.low_link[node].min(self.index[next]);
                self.low_link.insert(node, lowest);
            }
        }
        if self.low_link[node] == self.index[node] {
            let mut component = Vec::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack.remove(member);
                component.push(member);
                if member == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(pairs: &[(&str, &str)]) -> BTreeSet<Edge> {
        pairs.iter().map(|(from, to)| ((*from).to_owned(), (*to).to_owned())).collect()
    }

    #[test]
    fn components_are_found_and_a_dag_has_none() {
        let dag = graph(&[("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]);
        assert!(cyclic_components(&dag).is_empty());
        let knotted = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "a")]);
        assert_eq!(cyclic_components(&knotted), [vec!["a", "b", "c"], vec!["d", "e"]]);
    }

    #[test]
    fn only_edges_inside_a_component_lie_on_cycles() {
        let knotted = graph(&[("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "c"), ("x", "y")]);
        assert_eq!(edges_on_cycles(&knotted), graph(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")]));
    }

    #[test]
    fn the_shortest_cycle_through_an_edge_is_reported() {
        let knotted = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("c", "a"), ("x", "a")]);
        let edge = ("a".to_owned(), "b".to_owned());
        assert_eq!(shortest_cycle_through(&knotted, &edge), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
        assert_eq!(shortest_cycle_through(&knotted, &("x".to_owned(), "a".to_owned())), None);
    }
}

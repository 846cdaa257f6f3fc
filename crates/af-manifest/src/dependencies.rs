//! The `depends_on` graph: its cycles, and the order in which services can start.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Service;

/// Every cycle in a dependency graph, each as the path that closes it (`[a, b, a]`), reported once
/// and starting at its smallest name so the result is deterministic. Edges to unknown names are
/// ignored; they are reported elsewhere.
pub fn find_cycles<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnPath,
        Done,
    }
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
        cycles: &mut BTreeSet<Vec<&'a str>>,
    ) {
        marks.insert(node, Mark::OnPath);
        path.push(node);
        for &next in graph.get(node).into_iter().flatten() {
            match marks.get(next).copied() {
                None => {}
                Some(Mark::OnPath) => {
                    let start = path.iter().position(|n| *n == next).unwrap_or(0);
                    cycles.insert(rotate_to_smallest(&path[start..]));
                }
                Some(Mark::Unvisited) => visit(next, graph, marks, path, cycles),
                Some(Mark::Done) => {}
            }
        }
        path.pop();
        marks.insert(node, Mark::Done);
    }
    let mut marks: BTreeMap<&str, Mark> = graph.keys().map(|k| (*k, Mark::Unvisited)).collect();
    let mut cycles = BTreeSet::new();
    for &node in graph.keys() {
        if marks.get(node) == Some(&Mark::Unvisited) {
            visit(node, graph, &mut marks, &mut Vec::new(), &mut cycles);
        }
    }
    cycles.into_iter().collect()
}

/// The cycle `[b, c, a]` as `[a, b, c, a]`: one spelling per cycle, closed.
fn rotate_to_smallest<'a>(cycle: &[&'a str]) -> Vec<&'a str> {
    let smallest = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    let mut closed: Vec<&str> = cycle[smallest..]
        .iter()
        .chain(&cycle[..smallest])
        .copied()
        .collect();
    if let Some(first) = closed.first().copied() {
        closed.push(first);
    }
    closed
}

/// Service names in an order where each comes after all it depends on: the start waves, one
/// after another.
pub(crate) fn start_order(services: &BTreeMap<String, Service>) -> Vec<&str> {
    start_waves(services).concat()
}

/// Services in waves: each wave holds every service whose dependencies all started in earlier
/// waves, alphabetically, so the services of one wave can start at the same time. Only called on
/// validated manifests, which have no cycles.
pub(crate) fn start_waves(services: &BTreeMap<String, Service>) -> Vec<Vec<&str>> {
    let mut started: BTreeSet<&str> = BTreeSet::new();
    let mut waves = Vec::new();
    while started.len() < services.len() {
        let wave: Vec<&str> = services
            .iter()
            .filter(|(name, service)| {
                !started.contains(name.as_str())
                    && service
                        .depends_on
                        .iter()
                        .all(|d| started.contains(d.as_str()))
            })
            .map(|(name, _)| name.as_str())
            .collect();
        // Empty only for a cycle, which validation refuses; stop rather than loop.
        if wave.is_empty() {
            break;
        }
        started.extend(&wave);
        waves.push(wave);
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph<'a>(edges: &[(&'a str, &[&'a str])]) -> BTreeMap<&'a str, Vec<&'a str>> {
        edges.iter().map(|(n, d)| (*n, d.to_vec())).collect()
    }

    #[test]
    fn no_cycles_in_a_dag() {
        let g = graph(&[("web", &["api", "db"]), ("api", &["db"]), ("db", &[])]);
        assert!(find_cycles(&g).is_empty());
    }

    #[test]
    fn finds_each_cycle_once() {
        let g = graph(&[
            ("c", &["a"]),
            ("a", &["b"]),
            ("b", &["c"]),
            ("d", &["d"]),
            ("e", &["a"]),
        ]);
        assert_eq!(
            find_cycles(&g),
            vec![vec!["a", "b", "c", "a"], vec!["d", "d"]]
        );
    }

    #[test]
    fn unknown_targets_are_not_cycles() {
        let g = graph(&[("a", &["ghost"])]);
        assert!(find_cycles(&g).is_empty());
    }
}

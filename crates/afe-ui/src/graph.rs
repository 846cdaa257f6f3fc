//! A flow drawn as a graph: each node in the column of its longest chain of needs, each need an
//! arrow into the node that waits for it, each box its node's name and state (as text, so colour
//! is never the only sign). Inline SVG made on the server: it reads with JavaScript off, and the
//! live script changes a box's state as it changes the list's. Every SVG element is closed
//! explicitly (`{}`): in HTML an SVG `<rect>` left open swallows what follows it.

use std::collections::BTreeMap;

use maud::{Markup, html};

const WIDTH: i64 = 150;
const HEIGHT: i64 = 46;
const GAP_X: i64 = 56;
const GAP_Y: i64 = 14;
const MARGIN: i64 = 4;

/// A node's place: its column (how many needs deep it is) and its row in that column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub id: String,
    pub column: usize,
    pub row: usize,
}

/// Places `nodes` (id, needs) in file order. A need that names no node is left out; a cycle
/// (which validation refuses) cannot loop, as a node is at most as deep as there are nodes.
pub fn layout(nodes: &[(String, Vec<String>)]) -> Vec<Placed> {
    let index: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let mut depth = vec![0usize; nodes.len()];
    for _ in 0..nodes.len() {
        let mut moved = false;
        for (i, (_, needs)) in nodes.iter().enumerate() {
            let deepest = needs
                .iter()
                .filter_map(|need| index.get(need.as_str()))
                .map(|&n| depth[n] + 1)
                .max()
                .unwrap_or(0)
                .min(nodes.len());
            if deepest > depth[i] {
                depth[i] = deepest;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut rows: BTreeMap<usize, usize> = BTreeMap::new();
    nodes
        .iter()
        .zip(depth)
        .map(|((id, _), column)| {
            let row = rows.entry(column).or_insert(0);
            let placed = Placed {
                id: id.clone(),
                column,
                row: *row,
            };
            *row += 1;
            placed
        })
        .collect()
}

fn x(column: usize) -> i64 {
    MARGIN + column as i64 * (WIDTH + GAP_X)
}

fn y(row: usize) -> i64 {
    MARGIN + row as i64 * (HEIGHT + GAP_Y)
}

/// The graph of `nodes` (id, needs, state); each box links to the node's entry in the list.
pub fn render(nodes: &[(String, Vec<String>, String)]) -> Markup {
    let shape: Vec<(String, Vec<String>)> = nodes
        .iter()
        .map(|(id, needs, _)| (id.clone(), needs.clone()))
        .collect();
    let placed = layout(&shape);
    let at: BTreeMap<&str, &Placed> = placed.iter().map(|p| (p.id.as_str(), p)).collect();
    let columns = placed.iter().map(|p| p.column + 1).max().unwrap_or(0);
    let rows = placed.iter().map(|p| p.row + 1).max().unwrap_or(0);
    let width = x(columns) - GAP_X + MARGIN;
    let height = y(rows) - GAP_Y + MARGIN;
    html! {
        div class="scroll graph" {
            svg xmlns="http://www.w3.org/2000/svg" width=(width.max(0)) height=(height.max(0))
                viewBox={ "0 0 " (width.max(0)) " " (height.max(0)) } role="group"
                aria-label="The flow as a graph: each node after the nodes it needs" {
                defs {
                    marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7"
                        markerHeight="7" orient="auto-start-reverse" {
                        path d="M 0 0 L 10 5 L 0 10 z" class="edge-head" {}
                    }
                }
                @for (id, needs, _) in nodes {
                    @for need in needs {
                        @if let (Some(from), Some(to)) = (at.get(need.as_str()), at.get(id.as_str())) {
                            @let (x1, y1) = (x(from.column) + WIDTH, y(from.row) + HEIGHT / 2);
                            @let (x2, y2) = (x(to.column), y(to.row) + HEIGHT / 2);
                            path class="edge" marker-end="url(#arrow)"
                                d={ "M " (x1) " " (y1) " C " (x1 + GAP_X / 2) " " (y1) ", "
                                    (x2 - GAP_X / 2) " " (y2) ", " (x2) " " (y2) } {}
                        }
                    }
                }
                @for (id, _, state) in nodes {
                    @if let Some(p) = at.get(id.as_str()) {
                        a href={ "#node-" (id) } {
                            g id={ "graph-" (id) } class="graph-node" {
                                rect x=(x(p.column)) y=(y(p.row)) width=(WIDTH) height=(HEIGHT) rx="6" {}
                                text x=(x(p.column) + 10) y=(y(p.row) + 19) class="graph-id" { (id) }
                                text x=(x(p.column) + 10) y=(y(p.row) + 37) class={ "state state-" (state) } { (state) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, needs: &[&str]) -> (String, Vec<String>) {
        (
            id.to_string(),
            needs.iter().map(|n| n.to_string()).collect(),
        )
    }

    fn places(placed: &[Placed]) -> Vec<(&str, usize, usize)> {
        placed
            .iter()
            .map(|p| (p.id.as_str(), p.column, p.row))
            .collect()
    }

    #[test]
    fn a_node_sits_one_column_after_its_deepest_need() {
        // plan → (code, docs) → review, and a lint that needs only plan.
        let placed = layout(&[
            node("plan", &[]),
            node("code", &["plan"]),
            node("docs", &["plan"]),
            node("review", &["code", "docs"]),
            node("lint", &["plan"]),
        ]);
        assert_eq!(
            places(&placed),
            [
                ("plan", 0, 0),
                ("code", 1, 0),
                ("docs", 1, 1),
                ("review", 2, 0),
                ("lint", 1, 2)
            ]
        );
    }

    #[test]
    fn a_need_declared_later_in_the_file_still_comes_first() {
        let placed = layout(&[node("b", &["a"]), node("a", &[])]);
        assert_eq!(places(&placed), [("b", 1, 0), ("a", 0, 0)]);
    }

    #[test]
    fn unknown_needs_are_ignored_and_a_cycle_ends() {
        assert_eq!(places(&layout(&[node("a", &["ghost"])])), [("a", 0, 0)]);
        let cycle = layout(&[node("a", &["b"]), node("b", &["a"])]);
        assert!(cycle.iter().all(|p| p.column <= 2), "{cycle:?}");
    }

    #[test]
    fn the_svg_names_every_node_with_its_state_and_draws_each_need() {
        let svg = render(&[
            ("n1".into(), vec![], "completed".into()),
            ("n2".into(), vec!["n1".into()], "started".into()),
        ])
        .into_string();
        assert!(svg.contains(r#"id="graph-n1""#) && svg.contains(r#"id="graph-n2""#));
        assert!(
            svg.contains(r#"class="state state-started">started<"#),
            "{svg}"
        );
        assert_eq!(svg.matches(r#"class="edge""#).count(), 1);
        assert!(svg.contains(r##"href="#node-n2""##));
        assert!(
            !svg.contains("<rect") || svg.contains("</rect>"),
            "closed: {svg}"
        );
        assert_eq!(svg.matches("<path").count(), svg.matches("</path>").count());
    }
}

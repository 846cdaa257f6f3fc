//! A line diff (longest common subsequence), for two revisions' normalized documents: small
//! texts, a few hundred lines, where the plain dynamic programme is plenty.

/// One line of a diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// Above this many lines on a side the texts are shown whole, removed then added.
const MAX_LINES: usize = 5_000;

pub fn lines<'a>(old: &'a str, new: &'a str) -> Vec<Line<'a>> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    if a.len() > MAX_LINES || b.len() > MAX_LINES {
        return a
            .into_iter()
            .map(Line::Removed)
            .chain(b.into_iter().map(Line::Added))
            .collect();
    }
    // longest[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut longest = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            longest[i][j] = if a[i] == b[j] {
                longest[i + 1][j + 1] + 1
            } else {
                longest[i + 1][j].max(longest[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(Line::Same(a[i]));
            i += 1;
            j += 1;
        } else if longest[i + 1][j] >= longest[i][j + 1] {
            out.push(Line::Removed(a[i]));
            i += 1;
        } else {
            out.push(Line::Added(b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| Line::Removed(l)));
    out.extend(b[j..].iter().map(|l| Line::Added(l)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_changed_is_marked() {
        let diff = lines("a\nb\nc\nd", "a\nc\nd\ne");
        assert_eq!(
            diff,
            [
                Line::Same("a"),
                Line::Removed("b"),
                Line::Same("c"),
                Line::Same("d"),
                Line::Added("e")
            ]
        );
        assert!(lines("x", "x").iter().all(|l| matches!(l, Line::Same(_))));
    }
}
